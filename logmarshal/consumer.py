"""Consumer: claims partitions through the coordination log and hands out their messages.

A background *manager* thread does the coordination: claim passes, heartbeats, restart
recovery and noticing lost claims. ``poll`` (in the caller's thread, like Kafka's consumer)
fetches from the claimed partitions and hands messages out. Two modes:

- ``"alo"`` (at least once): ``commit(msg)`` marks a message handled, in any order;
  heartbeats carry the highest *contiguous* committed offset, so a crash repeats at most
  the messages after it and never skips one.
- ``"amo"`` (at most once): before a batch is handed out it is reserved with
  ClaimingMessages; only once the replay has accepted that reservation and our heartbeat is
  written does the user see it. A crash loses at most that batch; nothing is handed out twice.

Every decision (did my claim win? am I still the holder?) is a verdict read from the replay.
The clock only predicts: when to heartbeat, when to try claiming, and when to stop handing
out because a claim might have lapsed without us seeing it (self-fencing).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Literal

import attrs

from rationalizer import FRESH, Reason, Verdict

from .cluster import Message
from .commits import CommitTracker
from .errors import ClosedError, OffsetOutOfRange, UnknownPartition, UnknownTopic
from .marshaler import Marshaler, Written

__all__ = ["Consumer"]

log = logging.getLogger(__name__)

Mode = Literal["alo", "amo"]
OffsetReset = Literal["earliest", "latest"]

#: Heartbeats are sent after a random fraction of HB in this range, so the holder always
#: looks fresh (< HB) to others and a group's heartbeats do not march in step.
HEARTBEAT_JITTER = (0.5, 0.8)

_Writer = Callable[[], Written]


@attrs.define(eq=False)
class _Claim:
    """A partition this consumer holds, and everything it knows about handing it out."""

    topic: str
    partition: int
    next_fetch: int
    tracker: CommitTracker
    #: clock.monotonic() when we *sent* our newest accepted message; sending precedes its
    #: log time, so ages measured from here over-estimate the claim's real age (safe side).
    last_ok: float
    next_heartbeat: float
    #: AMO: last offset reserved by an accepted ClaimingMessages (= handed out).
    claimed_through: int
    buffer: deque[Message] = attrs.field(factory=deque)
    #: serialises writes that carry a position, so a stale one never lands after a newer one
    io_lock: threading.Lock = attrs.field(factory=threading.Lock)
    fenced_logged: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


class Consumer:
    """Consumes ``topics`` as member ``marshaler.client_id`` of ``marshaler.group_id``.

    ``batch_size`` is the most messages one ``poll`` returns by default (and in AMO the most
    reserved at once, so at most that many are lost to a crash). ``max_claims`` caps how many
    partitions this consumer holds (None: no cap). A claim pass takes one partition, or as
    many as allowed when ``greedy``; passes happen every ``claim_interval`` seconds
    (default HB/4), jittered. ``fence_margin`` (default HB/4) is how long before ``2*HB``
    without an accepted message we stop handing out. ``auto_offset_reset`` says where to
    start on a partition the group never consumed, or whose position is outside the log.
    ``fast_reclaim`` takes back claims still fresh from a previous instance of our client_id.
    """

    def __init__(
        self,
        marshaler: Marshaler,
        topics: str | Iterable[str],
        *,
        mode: Mode = "alo",
        batch_size: int = 100,
        max_claims: int | None = None,
        greedy: bool = False,
        claim_interval: float | None = None,
        fence_margin: float | None = None,
        auto_offset_reset: OffsetReset = "earliest",
        fast_reclaim: bool = True,
        fetch_max_bytes: int = 1 << 20,
        verdict_timeout: float | None = None,
        poll_interval: float = 0.02,
        rng: random.Random | None = None,
    ) -> None:
        self._topics = (topics,) if isinstance(topics, str) else tuple(dict.fromkeys(topics))
        if not self._topics:
            raise ValueError("a consumer needs at least one topic")
        if mode not in ("alo", "amo"):
            raise ValueError(f'mode must be "alo" or "amo", got {mode!r}')
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if max_claims is not None and max_claims < 1:
            raise ValueError(f"max_claims must be at least 1 (or None), got {max_claims}")
        if auto_offset_reset not in ("earliest", "latest"):
            raise ValueError(
                f'auto_offset_reset must be "earliest" or "latest", got {auto_offset_reset!r}'
            )
        hb = marshaler.heartbeat_interval
        self._marshaler = marshaler
        self._cluster = marshaler.cluster
        self._clock = marshaler.clock
        self._rng = rng if rng is not None else random.Random()
        self._mode: Mode = mode
        self._batch_size = batch_size
        self._max_claims = max_claims
        self._greedy = greedy
        self._hb = hb
        self._claim_interval = hb / 4 if claim_interval is None else claim_interval
        margin = hb / 4 if fence_margin is None else fence_margin
        if not 0 <= margin < 2 * hb:
            raise ValueError(f"fence_margin must be in [0, 2*HB), got {margin}")
        self._fence_after = 2 * hb - margin
        self._reset: OffsetReset = auto_offset_reset
        self._fast_reclaim = fast_reclaim
        self._fetch_max_bytes = fetch_max_bytes
        self._verdict_timeout = max(hb, 1.0) if verdict_timeout is None else verdict_timeout
        self._poll_interval = poll_interval
        self._tick = min(0.05, hb / 10)

        self._cond = threading.Condition()
        self._poll_lock = threading.Lock()
        self._claims: dict[tuple[str, int], _Claim] = {}
        self._cursor = 0
        self._closed = False
        self._fenced = False
        self._stop = threading.Event()
        self._next_claim_pass = self._clock.monotonic()
        marshaler._register(self, self._topics)
        self._thread = threading.Thread(
            target=self._run,
            name=f"logmarshal-consumer:{marshaler.group_id}:{marshaler.client_id}",
            daemon=True,
        )
        self._thread.start()

    # -- public API -------------------------------------------------------------------------

    @property
    def topics(self) -> tuple[str, ...]:
        return self._topics

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def marshaler(self) -> Marshaler:
        return self._marshaler

    @property
    def fenced(self) -> bool:
        """True once a newer instance of our client_id took over: this one has stopped."""
        with self._cond:
            return self._fenced

    def claims(self) -> list[tuple[str, int]]:
        """The partitions this consumer holds, sorted."""
        with self._cond:
            return sorted(self._claims)

    def position(self, topic: str, partition: int) -> int | None:
        """The ``last_offset`` the next heartbeat would carry; None if not held."""
        with self._cond:
            claim = self._claims.get((topic, partition))
            return None if claim is None else self._position(claim)

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[Message]:
        """Up to ``max_records`` (default ``batch_size``) messages of one partition, in order.

        Waits up to ``timeout`` seconds for some. Returns [] when there are none, or when
        the consumer is closed meanwhile. Not for concurrent use from several threads
        (``commit`` is).
        """
        limit = self._batch_size if max_records is None else max_records
        if limit < 1:
            raise ValueError(f"max_records must be at least 1, got {limit}")
        with self._cond:
            if self._closed:
                raise ClosedError("poll() on a closed consumer")
        deadline = time.monotonic() + timeout
        with self._poll_lock:
            while True:
                batch = self._poll_once(limit)
                if batch:
                    return batch
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                with self._cond:
                    if self._closed:
                        return []
                    self._cond.wait(min(remaining, self._poll_interval))

    def __iter__(self) -> Iterator[Message]:
        """Messages until the consumer is closed (ALO: remember to ``commit`` each)."""
        while True:
            with self._cond:
                if self._closed:
                    return
            yield from self.poll(timeout=0.5)

    def commit(self, message: Message) -> bool:
        """ALO: ``message`` is fully handled. Any order; thread-safe.

        Returns False when it changes nothing: AMO mode (handing out *is* committing), a
        partition no longer held, or an offset not outstanding.
        """
        if self._mode == "amo":
            return False
        with self._cond:
            claim = self._claims.get((message.topic, message.partition))
            if claim is None:
                return False
            return claim.tracker.commit(message.offset)

    def close(self, *, release: bool = True, timeout: float | None = None) -> None:
        """Stop; with ``release``, write each claim's final position and give it up.

        ``release=False`` leaves the claims to go stale (or to be taken back by a restart of
        this client_id with ``fast_reclaim``), as a crash would.
        """
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        with self._cond:
            claims = list(self._claims.values())
            self._claims.clear()
        if release:
            for claim in claims:
                self._release(claim)
        self._marshaler._unregister(self)
        log.info(
            "consumer %s closed (%d claims %s)",
            self._name(),
            len(claims),
            "released" if release else "abandoned",
        )

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Consumer({self._name()}, topics={list(self._topics)}, mode={self._mode!r})"

    # -- helpers ----------------------------------------------------------------------------

    def _name(self) -> str:
        m = self._marshaler
        return f"{m.group_id}/{m.client_id}/{m.instance_id}"

    def _position(self, claim: _Claim) -> int:
        """Last offset fully handled: what heartbeats and the release report. Under _cond."""
        if self._mode == "amo":
            return claim.claimed_through
        return claim.tracker.position

    def _jitter(self) -> float:
        low, high = HEARTBEAT_JITTER
        return self._hb * self._rng.uniform(low, high)

    def _drop(self, claim: _Claim, why: str, verdict: Verdict | None = None) -> None:
        """Forget a claim the replay says is no longer ours; stop handing it out at once.

        A FENCED verdict means a newer instance of our client_id took over: this instance
        must stop altogether, so every claim goes and no new ones are tried.
        """
        if verdict is not None and verdict.reason is Reason.FENCED:
            with self._cond:
                if not self._fenced:
                    self._fenced = True
                    log.error(
                        "%s was fenced by a newer instance of its client_id; it stops consuming",
                        self._name(),
                    )
                others = [c for c in self._claims.values() if c is not claim]
            for other in others:
                self._drop(other, "this instance is fenced")
        with self._cond:
            if self._claims.get(claim.key) is claim:
                del self._claims[claim.key]
                log.warning(
                    "%s lost %s/%d: %s (%d buffered messages dropped)",
                    self._name(),
                    claim.topic,
                    claim.partition,
                    why,
                    len(claim.buffer),
                )
                claim.buffer.clear()

    def _current(self, claim: _Claim) -> bool:
        with self._cond:
            return self._claims.get(claim.key) is claim

    def _may_hand_out(self, claim: _Claim) -> bool:
        """Self-fencing: only while the replay says we hold it and it cannot have lapsed."""
        if not self._marshaler.is_holder(claim.topic, claim.partition):
            return False
        age = self._clock.monotonic() - claim.last_ok
        if age >= self._fence_after:
            if not claim.fenced_logged:
                claim.fenced_logged = True
                log.warning(
                    "%s: no accepted message on %s/%d for %.3f s; not handing it out until "
                    "a heartbeat is accepted",
                    self._name(),
                    claim.topic,
                    claim.partition,
                    age,
                )
            return False
        return True

    def _accepted(self, claim: _Claim, sent: float) -> None:
        with self._cond:
            if sent > claim.last_ok:
                claim.last_ok = sent
            if claim.fenced_logged:
                claim.fenced_logged = False
                log.info("%s: %s/%d confirmed again", self._name(), claim.topic, claim.partition)

    def _reset_offset(self, topic: str, partition: int) -> int:
        if self._reset == "earliest":
            return self._cluster.earliest_offset(topic, partition)
        return self._cluster.latest_offset(topic, partition)

    # -- poll -------------------------------------------------------------------------------

    def _poll_once(self, limit: int) -> list[Message]:
        with self._cond:
            keys = sorted(self._claims)
            if not keys:
                return []
            start = self._cursor % len(keys)
            self._cursor += 1
        for key in keys[start:] + keys[:start]:
            with self._cond:
                claim = self._claims.get(key)
            if claim is None or not self._may_hand_out(claim):
                continue
            batch = (
                self._take_alo(claim, limit)
                if self._mode == "alo"
                else self._take_amo(claim, limit)
            )
            if batch:
                return batch
        return []

    def _fetch(self, claim: _Claim) -> list[Message]:
        """Fetch from ``claim.next_fetch`` without waiting; resets an out-of-range position."""
        try:
            return self._cluster.fetch(
                claim.topic,
                claim.partition,
                claim.next_fetch,
                max_bytes=self._fetch_max_bytes,
            )
        except OffsetOutOfRange as exc:
            offset = self._reset_offset(claim.topic, claim.partition)
            log.warning(
                "%s: %s/%d position %d is outside the log (%s); resetting to %s offset %d",
                self._name(),
                claim.topic,
                claim.partition,
                claim.next_fetch,
                exc,
                self._reset,
                offset,
            )
            self._move(claim, offset)
            return []
        except (UnknownTopic, UnknownPartition) as exc:
            log.warning(
                "%s: cannot fetch %s/%d: %s", self._name(), claim.topic, claim.partition, exc
            )
            return []

    def _move(self, claim: _Claim, offset: int) -> None:
        """Jump a claim to ``offset`` (reset): nothing before it will be handed out."""
        with self._cond:
            if self._claims.get(claim.key) is not claim or claim.buffer:
                return
            claim.next_fetch = offset
            if self._mode == "alo":  # a reset: commits of messages before it no longer count
                claim.tracker = CommitTracker(offset - 1)
            else:
                claim.claimed_through = max(claim.claimed_through, offset - 1)

    def _take_alo(self, claim: _Claim, limit: int) -> list[Message]:
        with self._cond:
            need_fetch = not claim.buffer
        if need_fetch:
            messages = self._fetch(claim)
            with self._cond:
                if self._claims.get(claim.key) is not claim:
                    return []
                fresh = [m for m in messages if m.offset >= claim.next_fetch]
                if fresh:
                    claim.buffer.extend(fresh)
                    claim.next_fetch = fresh[-1].offset + 1
        with self._cond:
            if self._claims.get(claim.key) is not claim:
                return []
            out = []
            while claim.buffer and len(out) < limit:
                message = claim.buffer.popleft()
                claim.tracker.handed_out(message.offset)
                out.append(message)
            return out

    def _take_amo(self, claim: _Claim, limit: int) -> list[Message]:
        messages = self._fetch(claim)
        with self._cond:
            messages = [m for m in messages if m.offset >= claim.next_fetch][:limit]
        if not messages:
            return []
        last = messages[-1].offset
        with claim.io_lock:
            if not self._current(claim):
                return []
            sent = self._clock.monotonic()
            verdict = self._write_and_wait(
                lambda: self._marshaler.claim_messages(claim.topic, claim.partition, last)
            )
            if verdict is None:
                return []  # unknown: retried (re-reserving the same range is allowed)
            if not verdict.accepted:
                self._drop(claim, f"ClaimingMessages rejected ({_reason(verdict)})", verdict)
                return []
            if not self._marshaler.is_holder(claim.topic, claim.partition):
                self._drop(claim, "the replay shows another holder after our reservation")
                return []
            self._accepted(claim, sent)
            with self._cond:
                claim.claimed_through = last
                claim.next_fetch = last + 1
            sent = self._clock.monotonic()
            verdict = self._write_and_wait(
                lambda: self._marshaler.heartbeat(claim.topic, claim.partition, last)
            )
            if verdict is None or not verdict.accepted:
                if verdict is not None:
                    self._drop(claim, f"heartbeat rejected ({_reason(verdict)})", verdict)
                return []  # reserved but not handed out: lost, which AMO allows
            self._accepted(claim, sent)
            with self._cond:
                claim.next_heartbeat = sent + self._jitter()
        if not self._may_hand_out(claim):
            return []
        return messages

    def _write_and_wait(self, write: _Writer) -> Verdict | None:
        """Write one coordination message and read its verdict; None if unknown."""
        try:
            written = write()
        except ClosedError:
            return None
        except Exception:
            log.exception("%s: coordination write failed", self._name())
            return None
        verdict = self._marshaler.wait_verdict(written, self._verdict_timeout)
        if verdict is None:
            log.warning(
                "%s: no verdict for %s within %.3f s", self._name(), written, self._verdict_timeout
            )
        return verdict

    # -- the manager thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._marshaler.wait_caught_up(timeout=self._tick * 4):
                    break
            if self._fast_reclaim and not self._stop.is_set():
                self._reclaim()
            while not self._stop.is_set():
                try:
                    self._manage()
                except Exception:
                    log.exception("%s: coordination pass failed; retrying", self._name())
                self._stop.wait(self._tick)
        except Exception:
            log.exception("%s: the manager thread stopped", self._name())

    def _manage(self) -> None:
        now = self._clock.monotonic()
        with self._cond:
            claims = list(self._claims.values())
            fenced = self._fenced
        if not fenced and self._marshaler.is_fenced():
            with self._cond:
                self._fenced = True
            log.error(
                "%s was fenced by a newer instance of its client_id; it stops consuming",
                self._name(),
            )
        if self._fenced:
            for claim in claims:
                self._drop(claim, "this instance is fenced")
            return
        for claim in claims:
            if self._stop.is_set():
                return
            if not self._marshaler.is_holder(claim.topic, claim.partition):
                self._drop(claim, "the replay shows another holder (or none)")
            elif now >= claim.next_heartbeat:
                self._heartbeat(claim)
        if now >= self._next_claim_pass and not self._stop.is_set():
            self._next_claim_pass = now + self._claim_interval * self._rng.uniform(0.5, 1.5)
            self._claim_pass()

    def _heartbeat(self, claim: _Claim) -> None:
        with claim.io_lock:
            if not self._current(claim):
                return
            with self._cond:
                position = self._position(claim)
            sent = self._clock.monotonic()
            verdict = self._write_and_wait(
                lambda: self._marshaler.heartbeat(claim.topic, claim.partition, position)
            )
            if verdict is None:
                with self._cond:
                    claim.next_heartbeat = sent + self._tick
                return
            if not verdict.accepted:
                self._drop(claim, f"heartbeat rejected ({_reason(verdict)})", verdict)
                return
            self._accepted(claim, sent)
            with self._cond:
                claim.next_heartbeat = sent + self._jitter()

    def _wanted(self) -> int:
        with self._cond:
            held = len(self._claims)
        if self._max_claims is None:
            return 1 << 30
        return max(0, self._max_claims - held)

    def _candidates(self) -> list[tuple[str, int]]:
        """Partitions of our topics not held by us, read afresh each pass so growth is seen."""
        out = []
        with self._cond:
            held = set(self._claims)
        for topic in self._topics:
            try:
                count = self._cluster.partitions(topic)
            except UnknownTopic:
                log.debug("%s: topic %s does not exist (yet)", self._name(), topic)
                continue
            out.extend((topic, p) for p in range(count) if (topic, p) not in held)
        return out

    def _claim_pass(self) -> None:
        wanted = self._wanted()
        if wanted == 0 or self._fenced:
            return
        now_ms = self._marshaler.now_ms()
        paused_until = self._marshaler.paused_until()
        if paused_until is not None and now_ms < paused_until:
            return  # compared with our clock: the replay's time stands still without records
        candidates = [
            tp for tp in self._candidates() if self._marshaler.claimable(*tp, now_ms=now_ms)
        ]
        self._rng.shuffle(candidates)
        taken = 0
        for topic, partition in candidates:
            if taken >= (wanted if self._greedy else 1) or self._stop.is_set():
                break
            if self._try_claim(topic, partition):
                taken += 1

    def _try_claim(self, topic: str, partition: int) -> bool:
        """Claim, read the verdict, heartbeat at once, start at the resume offset."""
        verdict = self._write_and_wait(lambda: self._marshaler.claim_partition(topic, partition))
        if verdict is None or not verdict.accepted:
            log.debug(
                "%s: claim of %s/%d not won (%s)",
                self._name(),
                topic,
                partition,
                "no verdict" if verdict is None else _reason(verdict),
            )
            return False  # nothing else changes: a lost race never touches positions
        return self._adopt(topic, partition, "claimed")

    def _adopt(self, topic: str, partition: int, how: str) -> bool:
        """We hold ``(topic, partition)``: heartbeat at once and start handing it out."""
        resume = self._marshaler.resume_offset(topic, partition)
        if resume is None:
            resume = self._reset_offset(topic, partition)
        last_offset = resume - 1
        beat_sent = self._clock.monotonic()
        verdict = self._write_and_wait(
            lambda: self._marshaler.heartbeat(topic, partition, last_offset)
        )
        if verdict is None or not verdict.accepted:
            log.warning(
                "%s: heartbeat after %s %s/%d was not accepted (%s)",
                self._name(),
                how,
                topic,
                partition,
                "no verdict" if verdict is None else _reason(verdict),
            )
            return False
        claim = _Claim(
            topic=topic,
            partition=partition,
            next_fetch=resume,
            tracker=CommitTracker(last_offset),
            last_ok=beat_sent,
            next_heartbeat=beat_sent + self._jitter(),
            claimed_through=last_offset,
        )
        with self._cond:
            if self._closed:
                # close() raced us: give it straight back rather than leave it to go stale
                pass
            else:
                self._claims[claim.key] = claim
                self._cond.notify_all()
                log.info("%s %s %s/%d, resuming at %d", self._name(), how, topic, partition, resume)
                return True
        self._release(claim)
        return False

    def _reclaim(self) -> None:
        """Restart recovery: take back our client_id's still-fresh claims with this instance."""
        now_ms = self._marshaler.now_ms()
        me = self._marshaler.identity
        for old in self._marshaler.claims():
            if self._stop.is_set() or self._wanted() == 0:
                return
            if old.topic not in self._topics or (old.client_id, old.instance_id) == me:
                continue
            if self._marshaler.freshness(old.topic, old.partition, now_ms) != FRESH:
                continue
            if self._adopt(old.topic, old.partition, f"took back (from {old.instance_id})"):
                continue
            log.info("%s: could not take back %s/%d", self._name(), old.topic, old.partition)

    def _release(self, claim: _Claim) -> None:
        with claim.io_lock:
            with self._cond:
                position = self._position(claim)
            verdict = self._write_and_wait(
                lambda: self._marshaler.release_partition(claim.topic, claim.partition, position)
            )
        if verdict is not None and verdict.accepted:
            log.info(
                "%s released %s/%d at %d", self._name(), claim.topic, claim.partition, position
            )
        else:
            log.warning(
                "%s: release of %s/%d not accepted (%s); it will go stale",
                self._name(),
                claim.topic,
                claim.partition,
                "no verdict" if verdict is None else _reason(verdict),
            )


def _reason(verdict: Verdict) -> str:
    reason: Reason | None = verdict.reason
    return reason.value if reason is not None else "accepted"
