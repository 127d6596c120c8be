"""The simulator's user-hand schedule (``--seeks``, off by default): user code seeks, and the
data log's start moves up under the group, while every other fault runs.

The seven attacks of 2026-12-02 (docs/protocol-notes.md, "A release given up, and a window
written again") found their holes in seeks, resets and OutOfRange answers, which no seed
took: the simulator's data log never lost its start and its members never sought. This
schedule makes them:

- **Who.** Partition seeds with faults, when asked (its own generator,
  ``random.Random(f"seeks/{seed}")``, so a run without ``--seeks`` keeps every schedule).
- **Seeks.** Every HB/2..2·HB of the fault window, a running instance seeks one partition it
  holds to an offset anywhere from the log's start to 10 past its end (a seek beyond the end
  is refused at the next fetch, as Kafka refuses it). The core refuses some (not assigned
  yet; AMO: at or below what it handed out), as a Consumer raises them to user code.
- **Retention.** Now and then the start of one data partition moves up to anywhere up to its
  end (``delete-records``, retention): a fetch below it is refused.
- **A tail cut.** Now and then a data partition loses its last 1..50 records (an unclean
  leader election) and the next records produced reuse their offsets: a fetch beyond the new
  end is refused. The checks count by offset (the records a cut lost are not told apart
  from those that replaced them).
- **The reset policy.** One seed in three runs its members with
  ``auto_offset_reset="latest"``, the others with "earliest" (a Consumer's default).
- **The edge's answers.** A refused fetch (below the start, beyond the end) is answered with
  the bounds read 0..max_delay after the refusal, as the network edges read them (so the log
  may have grown over the position meanwhile); a claim's look-up gets the current bounds.

- **The deep variant** (``--seeks --read-ahead``, generators of its own): members read ahead
  as a Consumer does (``prefetch`` drawn from one batch to 500), user code pauses a
  partition for HB/2..3·HB, retention and tail cuts land inside what a member read and has
  not handed out, and one seed in four resets "error" (user code answers NoStart with a
  seek).

- **Cuts told by leader epochs** (``--seeks --epochs``): the edge remembers the generation
  of the log (a tail cut starts a new one, as an election a new leader epoch) of the last
  records it gave each member, and a fetch at or below them, after a cut below it, is
  refused naming the cut point (``OutOfRange.diverged``), as the network reader tells it
  (``logmarshal/network/epochs.py``, KIP-320): ALO goes back to the cut point (the checks
  allow its position back there, as after its own seek), AMO goes on from its position.
- **Starts after a cut** (``--seeks --epochs`` too; ``logmarshal/consumer/cut_checks.py``):
  each member's offsets mirror commits, at most once per HB, what changed of the positions
  it holds, each with the generation of the record before it as that member read it in its
  tenure (unknown: the generation Kafka holds with that same offset, else none); a pass
  lands up to 3·HB late, after the member's earlier passes (a stalled member's pass lands
  after its successor's), and a graceful close commits its final positions at once. A
  member's first fetch of a tenure, at a start the committed offset is at or above, whose
  committed generation's stretch of the log now ends below that start, is refused naming
  the end as the cut point, as the start check tells it (a leader never answers below the
  log's start: Kafka trims its epoch cache with it). What the real check cannot see (the
  mirror behind the start, or with no generation) is not told. ``--without start-check``
  tells nothing, and ALO then owes what it owes when told (the restart that skipped on
  Apache Kafka, 766b7cb).
- **What a cut told owes** (ALO): the records the log holds from the cut up to where the
  member was, written since the cut, that nobody handed out, in order before anything after
  them (within its tenure, unless user code seeks or retention deletes them first). What
  was read up to a cut keeps its generation, so a second cut below it, before anything was
  read from it, is told too (``network/epochs.py``).

What the checks allow (:mod:`scenarios.sim_checks`): ALO may skip what a seek forward
skipped (from what the seeking instance had handed out up to its target), what the log
deleted before anybody read it, and under "latest" what lies between the refused offset
and the end; its position may move back through the writer's own seek back or reset
("earliest" after a position beyond the end, a claim's look-up after a tail cut), within a
window after it. What an instance read before retention deleted it must be handed out, in
order, before anything after it, within its tenure, unless user code seeks; a NoStart whose
bounds hold its offset is a violation. AMO allows nothing more: its core refuses a seek at
or below what it handed out.
"""

from __future__ import annotations

import random
from typing import Any

from logmarshal.consumer.mirror import positions_held
from logmarshal.core import Bounds, Fetch, LookUp, NoStart, OutOfRange, Tick
from rationalizer import coordination_partition

Sim = Any  # scenarios.sim imports this module (the import graph allows no circle)
Key = tuple[str, int]


class UserHand:
    """The seeks and the moving log start of one seed."""

    def __init__(
        self, sim: Sim, seed: int, hb: int, deep: bool = False, epochs: bool = False
    ) -> None:
        self.sim = sim
        self.hb = hb
        self.rng = random.Random(f"seeks/{seed}")
        #: ``--epochs``: the edge tells a cut below what it gave a member (its own generator)
        self.epochs = epochs
        self.erng = random.Random(f"seeks-epochs/{seed}")
        #: per data partition, the first offset and generation of each stretch of its log
        #: written since a cut (a tail cut starts a new generation, as a new leader epoch)
        self.gens: dict[Key, list[tuple[int, int]]] = {k: [(0, 0)] for k in sim.produced}
        #: (instance, key) -> (next offset, generation) after the last records given it
        self.seen: dict[tuple[Any, Key], tuple[int, int]] = {}
        #: ALO: (instance, key) -> (epoch, offsets): what was written since a cut below what
        #: it handed out, told it: it goes back and hands those out first, within its tenure,
        #: unless user code seeks or retention deletes them first
        self.cut_owed: dict[tuple[Any, Key], tuple[int | None, set[int]]] = {}
        self.told = 0
        #: the start checks (``--epochs``; ``--without start-check``: the debt, no telling),
        #: from a generator of their own: Kafka's committed (next offset, generation of the
        #: record before it or None) per partition, as the members' mirrors write it
        self.start_checks = "start-check" not in sim.without
        self.srng = random.Random(f"seeks-starts/{seed}")
        self.committed: dict[Key, tuple[int, int | None]] = {}
        #: (instance, key) -> (tenure, offset -> the generation of the record it read there
        #: in that tenure): the reader's watch is forgotten when a partition is dropped
        self.read: dict[tuple[Any, Key], tuple[int | None, dict[int, int]]] = {}
        #: (instance, key) -> the tenure (the core's epoch) whose first fetch went out
        self.started: dict[tuple[Any, Key], int | None] = {}
        self._mirrored: dict[Any, int] = {}  # instance -> when its mirror last wrote
        #: instance -> (when its last write lands, what it committed last): a mirror commits
        #: one pass at a time, only what changed since its last pass
        self._mirror_writes: dict[Any, tuple[int, dict[Key, tuple[int, int | None]]]] = {}
        #: key -> offset -> the generation of the record there when somebody handed it out
        self.handed_gens: dict[Key, dict[int, int]] = {}
        self.start_cuts = 0
        #: the deep variant (``--seeks --read-ahead``): members read ahead as a Consumer does
        #: (prefetch up to 500), and retention and tail cuts land inside what a member read
        #: and has not handed out; its own generator (the plain schedule's draws unchanged)
        self.deep = deep
        self.drng = random.Random(f"seeks-deep/{seed}")
        #: ALO: (instance, key) -> (epoch, offsets): what the instance had read and not
        #: handed out when retention deleted it: the core hands it out (2757f24), in
        #: order, before anything after it, unless user code seeks or the tenure ends
        self.kept: dict[tuple[Any, Key], tuple[int | None, set[int]]] = {}
        #: (instance, key) whose NoStart user code is about to answer with a seek
        self.answering: set[tuple[Any, Key]] = set()
        #: (topic, partition) -> the data log's first offset
        self.start: dict[Key, int] = dict.fromkeys(sim.produced, 0)
        self.seeks = self.refused_seeks = self.truncations = self.cuts = self.out_of_range = 0
        #: every member's ``auto_offset_reset`` (a Consumer's default is "earliest")
        self.reset = self.rng.choice(("earliest", "earliest", "latest"))
        if deep and random.Random(f"seeks-error/{seed}").random() < 0.25:
            # user code that sets the position itself (auto_offset_reset="error"): a poll
            # raises NoPosition and it seeks (no_start); its own generator
            self.reset = "error"

    @classmethod
    def drawn(
        cls, sim: Sim, seed: int, hb: int, deep: bool = False, epochs: bool = False
    ) -> UserHand | None:
        """This seed's hand, if it gets one (partition seeds with faults)."""
        if not sim.faults or sim.sources != (sim.topic,):
            return None
        return cls(sim, seed, hb, deep, epochs)

    def prefetch(self, batch: int) -> int | None:
        """A new member's prefetch (None: the simulator's, one batch)."""
        if not self.deep:
            return None
        return self.drng.choice((batch, 4 * batch, 100, 500))

    def _buffers(self, key: Key) -> list[tuple[Any, list[int], int]]:
        """Live instances holding ``key`` with records read and not handed out (and where
        each fetches next)."""
        out = []
        for inst in self.sim.live():
            ahead = inst.core.read_ahead(*key)
            if ahead is None:
                continue
            buffered, next_fetch, _ = ahead
            if buffered and next_fetch is not None:
                out.append((inst, buffered, next_fetch))
        return out

    def _running(self) -> list[Any]:
        """Instances that run and hold something: what user code can seek or pause."""
        return [i for i in self.sim.live() if i.state == "alive" and i.core.held()]

    def pause(self) -> None:
        """User code pauses a held partition for HB/2..3·HB (Consumer.pause): the member
        reads ahead up to its prefetch meanwhile, and a backlog builds."""
        sim, drng = self.sim, self.drng
        running = self._running()
        if not running:
            return
        inst = drng.choice(running)
        key = drng.choice(sorted(inst.core.held()))
        inst.core.pause([key])
        sim.note(f"{inst.me} PAUSES {key}")

        def resume() -> None:
            inst.core.resume([key])
            sim.note(f"{inst.me} RESUMES {key}")
            sim.step(inst, Tick())

        sim.at(sim.now + drng.randint(self.hb // 2, 3 * self.hb), lambda: sim.on(inst, resume))

    def handed(self, inst: Any, key: Key, offsets: list[int]) -> None:
        """ALO: ``inst`` handed out ``offsets``: nothing it owes before them is skipped
        (what it read before retention deleted it; what was written since a cut below it)."""
        for owing, why in (
            (self.kept, "read before retention deleted it"),
            (self.cut_owed, "written since a cut below it"),
        ):
            self._owed(owing, why, inst, key, offsets)
        if self.epochs:
            handed = self.handed_gens.setdefault(key, {})
            for offset in offsets:
                handed[offset] = self._generation(key, offset)

    def _unhanded(self, key: Key, first: int, end: int) -> set[int]:
        """Offsets ``first``..``end - 1`` whose record the log holds now (written since a
        cut) that nobody handed out: what ALO owes after a cut told (a record of the same
        generation handed out by another member, told the cut before, is not owed twice)."""
        handed = self.handed_gens.get(key, {})
        first = max(first, self.start[key])  # (retention may have deleted them meanwhile)
        return {o for o in range(first, end) if handed.get(o) != self._generation(key, o)}

    def _owed(
        self,
        owing: dict[tuple[Any, Key], tuple[int | None, set[int]]],
        why: str,
        inst: Any,
        key: Key,
        offsets: list[int],
    ) -> None:
        kept = owing.get((inst.me, key))
        if kept is None:
            return
        epoch, owed = kept
        if inst.core.epoch(*key) != epoch:
            del owing[(inst.me, key)]  # another tenure: its buffer was dropped with it
            return
        owed.difference_update(offsets)
        skipped = sorted(o for o in owed if o < offsets[0])
        if skipped:
            self.sim.checks.fail(
                self.sim.now,
                f"ALO: {inst.me} skipped {key} {skipped[0]}..{skipped[-1]} ({len(skipped)}), "
                f"{why}, handing out {offsets[0]}",
            )
            owed.difference_update(skipped)
        if not owed:
            del owing[(inst.me, key)]

    def begin(self) -> None:
        self.sim.at(self.rng.randint(self.hb, 3 * self.hb), self.act)

    def act(self) -> None:
        sim, rng = self.sim, self.rng
        if not sim.in_faults():
            return
        draw = rng.random()
        if draw < 0.2:
            self.retention()
        elif draw < 0.3:
            self.cut()
        else:
            self.seek()
        if self.deep and self.drng.random() < 0.4:
            self.pause()
        sim.at(sim.now + rng.randint(self.hb // 2, 2 * self.hb), self.act)

    def retention(self) -> None:
        sim, rng = self.sim, self.rng
        key = rng.choice(sorted(self.start))
        start, end = self.start[key], sim.produced[key]
        if end <= start:
            return
        new = rng.randint(start + 1, end)
        if self.deep and self.drng.random() < 0.5:
            # into what a member read and has not handed out, or past where it reads next
            # (its next fetch is refused below the start with records read: 2757f24)
            buffers = self._buffers(key)
            if buffers:
                _, buffer, next_fetch = self.drng.choice(buffers)
                if next_fetch < end and self.drng.random() < 0.5:
                    new = self.drng.randint(next_fetch + 1, end)
                    # and a tail cut soon, while what was read below the start drains
                    # (6774ced)
                    if self.drng.random() < 0.5:
                        later = self.sim.now + self.drng.randint(self.hb // 10, self.hb)
                        self.sim.at(later, lambda: self.cut(key, into=True))
                elif buffer[-1] >= start:
                    new = min(end, self.drng.choice([o for o in buffer if o >= start]) + 1)
        if self.sim.mode == "alo":
            for inst, buffer, _ in self._buffers(key):
                below = {o for o in buffer if o < new}
                if below:
                    epoch, owed = self.kept.get((inst.me, key), (inst.core.epoch(*key), set()))
                    self.kept[(inst.me, key)] = (epoch, owed | below)
        for (_, owed_key), (_, owed) in self.cut_owed.items():
            if owed_key == key:  # (retention deletes them first: nobody can hand them out)
                owed.difference_update(range(min(owed, default=new), new))
        self.start[key] = new
        self.truncations += 1
        sim.note(f"RETENTION {key} starts at {new} (end {end})")
        sim.checks.truncated(key, new)

    def cut(self, key: Key | None = None, into: bool = False) -> None:
        """An unclean leader election on a data partition: its last 1..50 records are
        lost, and the next records produced reuse their offsets."""
        sim, rng = self.sim, self.rng
        if key is None:
            key = rng.choice(sorted(self.start))
        elif not sim.in_faults():
            return
        start, end = self.start[key], sim.produced[key]
        if end <= start:
            return
        new = (self.drng if into else rng).randint(max(start, end - 50), end - 1)
        if into or (self.deep and self.drng.random() < 0.5):
            # into what a member read and has not handed out (2757f24, 6774ced)
            read_ahead = [
                o for _, buffer, _ in self._buffers(key) for o in buffer if start <= o < end
            ]
            if read_ahead:
                new = self.drng.choice(read_ahead)
        sim.produced[key] = new
        gens = self.gens[key]
        generation = gens[-1][1] + 1
        while gens and gens[-1][0] >= new:
            gens.pop()
        gens.append((new, generation))
        self.cuts += 1
        sim.note(f"TAIL CUT {key} ends at {new} (was {end})")
        # a position now beyond the end is out of range: a member's at its refused fetch,
        # the group's at a claim's look-up (where the checks allow ALO's "earliest" back)

    def no_start(self, inst: Any, action: NoStart) -> None:
        """A poll raised NoPosition (auto_offset_reset="error"): user code seeks a little
        later, to the log's start, its end or anywhere between. A NoStart whose bounds hold
        its offset is a violation: the log has the position (2757f24)."""
        sim, drng = self.sim, self.drng
        key = (action.topic, action.partition)
        if action.offset >= 0 and action.start <= action.offset <= action.end:
            sim.checks.fail(
                sim.now,
                f"{inst.me} NoStart {key} at {action.offset}, inside the log "
                f"({action.start}..{action.end})",
            )
        if (inst.me, key) in self.answering:
            return
        self.answering.add((inst.me, key))

        def answer() -> None:
            self.answering.discard((inst.me, key))
            if inst.state != "alive" or key not in inst.core.held():
                return
            start, end = self.start[key], sim.produced[key]
            target = drng.choice((start, end, drng.randint(start, end)))
            self._seek(inst, key, target)

        sim.at(sim.now + drng.randint(0, self.hb // 2), lambda: sim.on(inst, answer))

    def seek(self) -> None:
        sim, rng = self.sim, self.rng
        running = self._running()
        if not running:
            return
        inst = rng.choice(running)
        topic, partition = rng.choice(sorted(inst.core.held()))
        key = (topic, partition)
        target = rng.randint(self.start[key], sim.produced[key] + 10)
        self._seek(inst, key, target)

    def _seek(self, inst: Any, key: Key, target: int) -> None:
        sim = self.sim
        topic, partition = key
        through = inst.core.handed_through(topic, partition)
        try:
            inst.core.seek(sim.now, topic, partition, target)
        except ValueError as exc:
            self.refused_seeks += 1
            sim.note(f"{inst.me} SEEK {key} to {target} refused: {exc}")
            return
        self.seeks += 1
        self.kept.pop((inst.me, key), None)  # (a seek drops what was read)
        self.cut_owed.pop((inst.me, key), None)
        sim.note(f"{inst.me} SEEKS {key} to {target} (handed through {through})")
        sim.checks.sought(sim.now, key, -1 if through is None else through, target, inst.me)
        sim.step(inst, Tick())  # (a Consumer's next pass acts on it)

    def bounds(self, action: LookUp, inst: Any = None) -> Bounds:
        """A claim's look-up: the bounds now. Under "latest" a group's position outside
        them (or none) starts at the end: ALO may skip from the position to it."""
        sim = self.sim
        key = (action.topic, action.partition)
        start, end = self.start[key], sim.produced[key]
        cp = coordination_partition(action.topic, action.partition, sim.ncoord)
        resume = sim.oracle[cp].resume_offset(sim.group, action.topic, action.partition)
        if self.reset == "latest":
            if resume is None or not start <= resume <= end:
                sim.checks.sought(
                    sim.now, key, -1 if resume is None else resume - 1, end, inst and inst.me
                )
        elif resume is not None and resume > end:
            # the group's position beyond the end (a tail cut below it): "earliest" takes
            # ALO back to the start
            sim.checks.sought(sim.now, key, resume, start, inst and inst.me)
        return Bounds(action.token, action.topic, action.partition, start, end)

    def fetched(self, inst: Any, key: Key, offsets: list[int]) -> None:
        """The edge gave ``inst`` records at ``offsets``: it remembers their generation."""
        if self.epochs and offsets:
            tenure = inst.core.epoch(*key)
            read = self.read.get((inst.me, key))
            if read is None or read[0] != tenure:
                read = self.read[(inst.me, key)] = (tenure, {})
            for offset in offsets:
                read[1][offset] = self._generation(key, offset)
            last = offsets[-1]
            self.seen[(inst.me, key)] = (last + 1, read[1][last])

    def _generation(self, key: Key, offset: int) -> int:
        return max(g for start, g in self.gens[key] if start <= offset)

    def mirrored(self, inst: Any, final: dict[Key, int] | None = None) -> None:
        """``inst``'s offsets mirror, at most once per HB (``--epochs``): the positions its
        core holds that changed since its last pass, each with the generation of the record
        before it as ``inst`` read it in its tenure, landing late but in order; ``final``:
        the positions a graceful close commits, now."""
        if not self.epochs:
            return
        sim = self.sim
        if final is None:
            if sim.now - self._mirrored.get(inst.me, -self.hb) < self.hb:
                return
            self._mirrored[inst.me] = sim.now
        held = positions_held(inst.core, {}, False) if final is None else final
        lands, last = self._mirror_writes.get(inst.me, (sim.now, {}))
        commits = {}
        for key, position in held.items():
            tenure = inst.core.epoch(*key)
            read = self.read.get((inst.me, key))
            generation = read[1].get(position - 1) if read and read[0] == tenure else None
            if generation is None:
                # not read by this member: the generation Kafka holds with that same offset
                # is committed again (1a771f0), else none
                kept = self.committed.get(key)
                generation = kept[1] if kept is not None and kept[0] == position else None
            if last.get(key) != (position, generation):
                commits[key] = (position, generation)
        if not commits:
            return
        delay = 0 if final is not None else self.srng.randint(0, 3 * self.hb)
        land = max(lands, sim.now + delay)
        self._mirror_writes[inst.me] = (land, {**last, **commits})
        sim.at(land, lambda: self.committed.update(commits))

    def closing(self, inst: Any) -> dict[Key, int]:
        """The positions ``inst``'s graceful close commits (read before its core closes)."""
        return positions_held(inst.core, {}, self.sim.mode == "amo") if self.epochs else {}

    def _start_cut(self, inst: Any, key: Key, action: Fetch) -> int | None:
        """At ``inst``'s first fetch of a tenure: where the log was cut below its start, as
        the start check finds it from the committed offset and generation (None: not a
        start, nothing to tell, or nothing the check can see). Told, ALO owes what lies
        between (:meth:`_tell_cut`); untold (``--without start-check``), it owes it all the
        same."""
        tenure = inst.core.epoch(*key)
        if self.started.get((inst.me, key), -1) == tenure:
            return None
        self.started[(inst.me, key)] = tenure
        start = action.offset
        committed = self.committed.get(key)
        if committed is None or committed[1] is None or committed[0] < start:
            return None  # the mirror behind the start, or no generation: nothing to tell by
        end = self._epoch_end(key, committed[1])
        if end >= start:
            return None
        self.start_cuts += 1
        self.sim.note(f"{inst.me} STARTS {key} at {start}: its log was cut at {end}")
        if self.sim.mode == "alo" and not self.start_checks:
            owed = self._unhanded(key, end, start)
            epoch, before = self.cut_owed.get((inst.me, key), (tenure, set()))
            self.cut_owed[(inst.me, key)] = (epoch, before | owed)
        return end

    def _epoch_end(self, key: Key, generation: int) -> int:
        """Where ``generation``'s stretch of the log ends now, as a leader answers
        OffsetForLeaderEpoch: Kafka's epoch cache is trimmed with the log's start, so the
        answer is never below it."""
        later = [first for first, g in self.gens[key] if g > generation]
        return max(later[0] if later else self.sim.produced[key], self.start[key])

    def _cut_below(self, inst: Any, key: Key, offset: int) -> int | None:
        """Where ``key``'s log was cut below ``offset`` since the edge gave ``inst`` records
        up to it (the end of their generation's stretch now), or None."""
        seen = self.seen.get((inst.me, key))
        if seen is None or offset > seen[0]:
            return None
        end = self._epoch_end(key, seen[1])
        if end >= offset:
            return None
        # what was read up to the cut keeps its generation: a second cut below this one,
        # before anything is read from it, is told too (network/epochs.py)
        self.seen[(inst.me, key)] = (end, seen[1])
        return end

    def _tell_cut(self, inst: Any, action: Fetch, cut: int) -> None:
        """Refuse ``action`` naming the cut point, with the bounds read after the refusal."""
        sim = self.sim
        key = (action.topic, action.partition)
        self.told += 1

        def answer() -> None:
            bounds = (self.start[key], sim.produced[key])
            sim.note(f"{inst.me} CUT BELOW {key} at {cut} (fetch at {action.offset}), {bounds}")
            buffered, next_fetch, token = inst.core.read_ahead(*key) or ([], None, None)
            position = buffered[0] if buffered else next_fetch
            if token == action.token and position is not None and position > cut:
                # what it handed out was cut: ALO goes back to the cut point, and its
                # position may move back there, as after its own seek
                through = inst.core.handed_through(*key)
                sim.checks.sought(sim.now, key, cut - 1 if through is None else through, cut,
                                  inst.me)  # fmt: skip
                if sim.mode == "alo":
                    # and hands out first what was written there since the cut, in order
                    epoch, owed = self.cut_owed.get((inst.me, key), (inst.core.epoch(*key), set()))
                    self.cut_owed[(inst.me, key)] = (
                        epoch,
                        owed | self._unhanded(key, cut, position),
                    )
            sim.step(inst, OutOfRange(action.token, *key, *bounds, cut))

        sim.at(sim.now + self.erng.randint(0, sim.max_delay), lambda: sim.on(inst, answer))

    def refuses(self, inst: Any, action: Fetch) -> bool:
        """Is ``inst``'s fetch ``action`` outside the log, or (``--epochs``) at or below
        records given it that a cut since has taken (then it is answered OutOfRange, with
        the bounds read later)?"""
        key = (action.topic, action.partition)
        sim = self.sim
        if self.epochs:
            cut = self._cut_below(inst, key, action.offset)
            if cut is not None:
                self.started[(inst.me, key)] = inst.core.epoch(*key)  # (told already)
                self._tell_cut(inst, action, cut)
                return True
        if self.start[key] <= action.offset <= sim.produced[key]:
            if self.epochs:
                cut = self._start_cut(inst, key, action)
                if cut is not None and self.start_checks:
                    self._tell_cut(inst, action, cut)
                    return True
            return False
        self.out_of_range += 1

        def answer() -> None:  # the bounds, read after the refusal
            bounds = (self.start[key], sim.produced[key])
            sim.note(f"{inst.me} OUT OF RANGE {key} at {action.offset}, bounds {bounds}")
            buffered, _, token = inst.core.read_ahead(*key) or ([], None, None)
            if token == action.token:  # (else ignored: not held, or another fetch)
                # the member's position: the first record it read and has not handed out,
                # else where it fetches
                position = buffered[0] if buffered else action.offset
                if position > bounds[1]:
                    # beyond the end (a seek there, a tail cut below it): "earliest" takes
                    # ALO back to the start, as Kafka's consumer does. Not when only a
                    # read-ahead lies beyond it (the core keeps what the log holds)
                    sim.checks.sought(sim.now, key, action.offset, bounds[0], inst.me)
                if self.reset == "latest" and action.offset < bounds[0]:
                    # below the start: "latest" skips from the refused fetch to the end
                    # (what was read before it is handed out: 2757f24)
                    sim.checks.sought(sim.now, key, action.offset - 1, bounds[1], inst.me)
            sim.step(inst, OutOfRange(action.token, action.topic, action.partition, *bounds))

        sim.at(sim.now + self.rng.randint(0, sim.max_delay), lambda: sim.on(inst, answer))
        return True

    def summary(self) -> tuple[int, int, int, int, int, int, int]:
        return (
            self.seeks,
            self.refused_seeks,
            self.truncations,
            self.cuts,
            self.out_of_range,
            self.told,
            self.start_cuts,
        )
