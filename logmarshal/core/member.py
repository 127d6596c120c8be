"""One member's decision core: events in, actions out, no I/O and no clock.

The edge owns the replay (one ``WorldState`` per coordination partition, fed in log order)
and hands the core read access to it; every event carries ``now`` (the edge's clock), which
the core uses only to predict (is a heartbeat due? may the claim have lapsed?), never to
decide ownership: that comes from verdicts in the replay.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from rationalizer import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    Reason,
    ReleasingPartition,
    Verdict,
    WorldState,
    coordination_partition,
    encode,
)

from .actions import Action, Closed, Fetch, HandOut, Revoke, Write
from .claiming import next_claim
from .delivery import delivery_for
from .events import Close, Event, Fetched, Replayed, Tick, WriteFailed, Written
from .held import Held
from .lease import Lease
from .options import CoreOptions
from .recovery import resume_after_takeover, takeover_candidates
from .release import Releases

__all__ = ["MemberCore"]

log = logging.getLogger(__name__)


@attrs.define
class _Pending:
    kind: str  # claim | takeover | heartbeat | reserve | release
    topic: str
    partition: int
    cp: int
    sent: int
    value: int = -1  # the offset the record carries (position or reservation)
    offset: int | None = None  # where it landed, once known


class MemberCore:
    """Decisions of one consumer instance. Call :meth:`step` with every event."""

    def __init__(
        self,
        options: CoreOptions,
        worlds: Sequence[WorldState],
        *,
        _reread_after_takeover: bool = True,
    ) -> None:
        if len(worlds) != options.coordination_partitions:
            raise ValueError("one WorldState per coordination partition is needed")
        self.options = options
        self._worlds = worlds
        self._delivery = delivery_for(options.mode)
        # private: False reproduces issue 10's AMO restart bug (the simulator's experiment)
        self._reread = _reread_after_takeover
        self._held: dict[tuple[str, int], Held] = {}
        self._pending: dict[int, _Pending] = {}
        self._caught_up: set[int] = set()
        self._recovered = False
        self._next_claim = 0
        self._token = 0
        self._closing = False
        self._closed = False
        self._fenced = False
        self._releases = Releases(options.release_attempts)

    # -- queries -----------------------------------------------------------------------------

    @property
    def me(self) -> tuple[str, str]:
        return (self.options.client_id, self.options.instance_id)

    @property
    def fenced(self) -> bool:
        return self._fenced

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def closed(self) -> bool:
        return self._closed

    def held(self) -> list[tuple[str, int]]:
        return sorted(self._held)

    def may_hand_out(self, topic: str, partition: int, now: int) -> bool:
        """Self-fencing: the replay says we hold it and our lease cannot have lapsed."""
        held = self._held.get((topic, partition))
        if held is None or self._fenced or self._closing:
            return False
        if not held.lease.may_hand_out(now):
            return False
        return self._worlds[held.cp].holder(self.options.group_id, topic, partition) == self.me

    def lease_expiry(self, topic: str, partition: int) -> int | None:
        held = self._held.get((topic, partition))
        return None if held is None else held.lease.expires_at()

    # -- the step ----------------------------------------------------------------------------

    def step(self, now: int, event: Event) -> list[Action]:
        out: list[Action] = []
        if self._closed:
            return out
        if isinstance(event, Written):
            p = self._pending.get(event.token)
            if p is not None:
                p.offset = event.offset
                self._resolve_landed(now, out)
        elif isinstance(event, WriteFailed):
            p = self._pending.pop(event.token, None)
            if p is not None:
                self._on_unknown(now, p, out)
        elif isinstance(event, Replayed):
            if event.at_end:
                self._caught_up.add(event.cp)
            self._resolve_landed(now, out)
            self._check_replay(event.cp, out)
        elif isinstance(event, Fetched):
            held = self._held.get((event.topic, event.partition))
            if held is not None and held.fetch_token == event.token:
                held.fetch_token = None
                for off, value in event.records:
                    if off == held.next_fetch:
                        held.buffer.append((off, value))
                        held.next_fetch = off + 1
        elif isinstance(event, Close):
            self._start_close(now, out)
        elif not isinstance(event, Tick):
            raise TypeError(f"not an event: {event!r}")
        self._act(now, out)
        return out

    # -- verdicts ----------------------------------------------------------------------------

    def _world(self, topic: str, partition: int) -> WorldState:
        return self._worlds[coordination_partition(topic, partition, len(self._worlds))]

    def _resolve_landed(self, now: int, out: list[Action]) -> None:
        for token, p in list(self._pending.items()):
            if p.offset is None:
                continue
            world = self._worlds[p.cp]
            if world.applied_through < p.offset:
                continue
            del self._pending[token]
            verdict = world.verdict(p.offset)
            if verdict is None:
                self._on_unknown(now, p, out)
            else:
                self._on_verdict(now, p, verdict, out)

    def _on_verdict(self, now: int, p: _Pending, v: Verdict, out: list[Action]) -> None:
        key = (p.topic, p.partition)
        held = self._held.get(key)
        if not v.accepted and v.reason is Reason.FENCED:
            self._become_fenced(out)
            return
        if p.kind == "release":
            self._releases.answered(key)
            return
        if p.kind == "claim":
            if v.accepted and held is None and not self._closing and not self._fenced:
                self._adopt(p.topic, p.partition, p.sent, None, out)
            return
        if p.kind == "takeover":
            if v.accepted and held is None and not self._closing and not self._fenced:
                resume = resume_after_takeover(
                    self._worlds[p.cp],
                    self.options.group_id,
                    p.topic,
                    p.partition,
                    p.value + 1,
                    reread=self._reread,
                )
                self._adopt(p.topic, p.partition, p.sent, resume, out)
            return
        if held is None:
            return
        if p.kind == "heartbeat":
            held.heartbeat_token = None
            if not v.accepted:
                self._lose(held, f"heartbeat rejected ({v.reason.value})", out)  # type: ignore[union-attr]
                return
            held.lease.renewed(p.sent)
            if p.value > held.confirmed_through:
                held.confirmed_through = min(p.value, held.claimed_through)
        elif p.kind == "reserve":
            held.reserve_token = None
            if not v.accepted:
                self._lose(held, f"ClaimingMessages rejected ({v.reason.value})", out)  # type: ignore[union-attr]
                return
            held.lease.renewed(p.sent)
            held.claimed_through = max(held.claimed_through, p.value)
            held.next_heartbeat = now  # confirm at once

    def _on_unknown(self, now: int, p: _Pending, out: list[Action]) -> None:
        """A write whose outcome we will not learn: retry what needs retrying."""
        held = self._held.get((p.topic, p.partition))
        if p.kind == "release":
            return  # Releases.due retries (bounded)
        if held is None:
            return  # a claim or takeover that landed anyway is adopted by the next pass
        if p.kind == "heartbeat" and held.heartbeat_token is not None:
            held.heartbeat_token = None
            held.next_heartbeat = now
        elif p.kind == "reserve":
            held.reserve_token = None  # re-reserving the same range is allowed

    def _check_replay(self, cp: int, out: list[Action]) -> None:
        world = self._worlds[cp]
        if world.is_fenced(*self.me):
            self._become_fenced(out)
            return
        for held in list(self._held.values()):
            if held.cp == cp:
                holder = world.holder(self.options.group_id, held.topic, held.partition)
                if holder != self.me:
                    self._lose(held, f"the replay shows holder {holder}", out)

    # -- state changes -----------------------------------------------------------------------

    def _adopt(
        self, topic: str, partition: int, sent: int, resume: int | None, out: list[Action]
    ) -> None:
        """We hold it in the log: start at the group's position (read now, after our claim's
        verdict), heartbeat it at once and fetch."""
        world = self._world(topic, partition)
        group = self.options.group_id
        if resume is None:
            r = world.resume_offset(group, topic, partition)
            resume = 0 if r is None else r  # no position: reset policy "earliest"
        held = Held(
            topic=topic,
            partition=partition,
            cp=coordination_partition(topic, partition, len(self._worlds)),
            lease=Lease(self.options.fence_after_ms, sent),
            next_fetch=resume,
            handed_through=resume - 1,
            claimed_through=resume - 1,
            confirmed_through=resume - 1,
            next_heartbeat=0,
        )
        self._held[held.key] = held
        log.debug("%s adopted %s/%d at %d", self.me, topic, partition, resume)

    def _lose(self, held: Held, why: str, out: list[Action]) -> None:
        del self._held[held.key]
        out.append(Revoke(held.topic, held.partition, lost=True, why=why))

    def _become_fenced(self, out: list[Action]) -> None:
        if self._fenced:
            return
        self._fenced = True
        for held in list(self._held.values()):
            self._lose(held, "this instance is fenced", out)
        self._releases.pending.clear()

    def _start_close(self, now: int, out: list[Action]) -> None:
        if self._closing:
            return
        self._closing = True
        for held in list(self._held.values()):
            if not self._fenced:
                self._releases.add(held.key, self._delivery.position(held), held.cp)
            del self._held[held.key]
            out.append(Revoke(held.topic, held.partition, lost=False, why="closing"))

    # -- what to do now ----------------------------------------------------------------------

    def _write(self, out: list[Action], p: _Pending, msg: object) -> int:
        self._token += 1
        key, value = encode(msg)  # type: ignore[arg-type]
        self._pending[self._token] = p
        out.append(Write(self._token, p.cp, key, value, p.kind))
        return self._token

    def _ids(self) -> dict[str, str]:
        o = self.options
        return {"client_id": o.client_id, "instance_id": o.instance_id, "group_id": o.group_id}

    def _act(self, now: int, out: list[Action]) -> None:
        if self._closing:
            in_flight = {
                (p.topic, p.partition) for p in self._pending.values() if p.kind == "release"
            }
            for key, position, cp in self._releases.due(in_flight):
                msg = ReleasingPartition(
                    **self._ids(), topic=key[0], partition=key[1], last_offset=position
                )
                self._write(out, _Pending("release", key[0], key[1], cp, now, position), msg)
            if self._releases.done and not any(p.kind == "release" for p in self._pending.values()):
                self._closed = True
                out.append(Closed())
            return
        if self._fenced:
            return
        hb = self.options.heartbeat_ms
        for held in list(self._held.values()):
            self._act_held(now, held, out)
        if len(self._caught_up) < len(self._worlds):
            return  # never claim before the start-up replay is complete
        busy = set(self._held) | {(p.topic, p.partition) for p in self._pending.values()}
        if not self._recovered:
            self._recovered = True
            self._recover(now, busy, out)
        if now < self._next_claim:
            return
        self._next_claim = now + self.options.claim_every_ms
        self._adopt_orphans(now, busy, out)
        wanted = self.options.max_claims - len(busy)
        if wanted <= 0 or any(p.kind == "claim" for p in self._pending.values()):
            return
        choice = next_claim(
            self._worlds,
            self.options.group_id,
            self.options.client_id,
            self.options.topics,
            busy,
            now,
        )
        if choice is not None:
            topic, part = choice
            cp = coordination_partition(topic, part, len(self._worlds))
            msg = ClaimingPartition(
                **self._ids(), topic=topic, partition=part, heartbeat_interval_ms=hb
            )
            self._write(out, _Pending("claim", topic, part, cp, now), msg)

    def _recover(self, now: int, busy: set[tuple[str, int]], out: list[Action]) -> None:
        """Restart recovery: heartbeat our client_id's fresh claims with this instance."""
        o = self.options
        subscribed = {t for t, _ in o.topics}
        for world_index, world in enumerate(self._worlds):
            for c in takeover_candidates(world, o.group_id, o.client_id, o.instance_id, now):
                if c.topic not in subscribed or (c.topic, c.partition) in busy:
                    continue
                r = world.resume_offset(o.group_id, c.topic, c.partition)
                last = -1 if r is None else r - 1
                msg = Heartbeat(
                    **self._ids(),
                    topic=c.topic,
                    partition=c.partition,
                    last_offset=last,
                    heartbeat_interval_ms=o.heartbeat_ms,
                )
                p = _Pending("takeover", c.topic, c.partition, world_index, now, last)
                self._write(out, p, msg)
                busy.add((c.topic, c.partition))

    def _adopt_orphans(self, now: int, busy: set[tuple[str, int]], out: list[Action]) -> None:
        """Claims the replay says this instance holds but we do not track (an accepted claim
        whose answer was lost): take them up."""
        subscribed = {t for t, _ in self.options.topics}
        for world in self._worlds:
            for c in world.claims_of(self.options.group_id, self.options.client_id):
                key = (c.topic, c.partition)
                if c.instance_id != self.options.instance_id or key in busy:
                    continue
                if c.topic in subscribed:
                    # we do not know when we sent what the log accepted: start with a lapsed
                    # lease, so nothing is handed out before our next heartbeat is accepted
                    self._adopt(c.topic, c.partition, now - self.options.fence_after_ms, None, out)
                    busy.add(key)

    def _act_held(self, now: int, held: Held, out: list[Action]) -> None:
        o = self.options
        if held.fetch_token is None and len(held.buffer) < o.batch:
            self._token += 1
            held.fetch_token = self._token
            out.append(Fetch(self._token, held.topic, held.partition, held.next_fetch))
        ours = self.may_hand_out(held.topic, held.partition, now)
        last = self._delivery.to_reserve(held, o.batch)
        if last is not None and ours:
            msg = ClaimingMessages(
                **self._ids(),
                topic=held.topic,
                partition=held.partition,
                proposed_last_offset=last,
            )
            held.reserve_token = self._write(
                out, _Pending("reserve", held.topic, held.partition, held.cp, now, last), msg
            )
        if held.heartbeat_token is None and now >= held.next_heartbeat:
            position = self._delivery.position(held)
            msg = Heartbeat(
                **self._ids(),
                topic=held.topic,
                partition=held.partition,
                last_offset=position,
                heartbeat_interval_ms=o.heartbeat_ms,
            )
            held.heartbeat_token = self._write(
                out, _Pending("heartbeat", held.topic, held.partition, held.cp, now, position), msg
            )
            held.next_heartbeat = now + o.heartbeat_ms // 2
        if ours:
            records = self._delivery.take(held, len(held.buffer))
            if records:
                out.append(HandOut(held.topic, held.partition, tuple(records)))
