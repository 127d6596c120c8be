"""The target assignment: which member *should* hold which partition.

Every member computes it from the same replayed log (the group's live members and their
announcements, the current holders), so they all derive the same target without talking
to each other. It is only advice: a member claims what the target gives it and releases
what the target moves away, but claims, heartbeats and fencing still decide ownership, so a
target computed from a late view costs time, never safety (docs/architecture.md, "Membership and
rebalancing"; docs/rebalancing.md).

``balanced`` is sticky (a unit stays with its holder while the holder is within its
share), balanced to within one unit per member (by weight, with ``max_claims`` as a cap),
and moves as few units as it can. It is a pure function of its arguments.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Callable, Iterable, Mapping, Sequence

from rationalizer._membership import Member

__all__ = ["WHOLE_TOPIC", "Strategy", "Unit", "balanced", "target", "units_of"]

#: A unit is ``(topic, partition)``, or ``(topic, WHOLE_TOPIC)`` for a topic assigned whole
#: (every member subscribed to it announced ``entire_topic``).
Unit = tuple[str, int]
WHOLE_TOPIC = -1

#: ``strategy(members, units, holders) -> {client_id: units}``: members are the counted
#: members sorted by client_id, units sorted, holders maps a unit to its holder's client_id.
Strategy = Callable[
    [Sequence[Member], Sequence[Unit], Mapping[Unit, str]], Mapping[str, Iterable[Unit]]
]


def units_of(members: Sequence[Member]) -> list[Unit]:
    """Every unit the members subscribe to, sorted. A topic's partition count is the largest
    any member announced (counts only grow); a topic is one unit when all its subscribers
    announce ``entire_topic``."""
    counts: dict[str, int] = {}
    whole: dict[str, bool] = {}
    for m in members:
        for topic, count in m.topics:
            counts[topic] = max(counts.get(topic, 0), count)
            whole[topic] = whole.get(topic, True) and m.entire_topic
    units: list[Unit] = []
    for topic in sorted(counts):
        if whole[topic]:
            if counts[topic] > 0:
                units.append((topic, WHOLE_TOPIC))
        else:
            units.extend((topic, p) for p in range(counts[topic]))
    return units


def _eligible(m: Member, unit: Unit, subscribed: frozenset[str]) -> bool:
    return unit[0] in subscribed and (unit[1] == WHOLE_TOPIC) == m.entire_topic


def balanced(
    members: Sequence[Member], units: Sequence[Unit], holders: Mapping[Unit, str]
) -> dict[str, list[Unit]]:
    """The sticky balanced target: ``{client_id: sorted units}`` for every member.

    1. Each unit stays with its holder if the holder is a member that may take it (it
       subscribes, and is under its ``max_claims``).
    2. Each other unit goes to the eligible member with room that would be least loaded
       after taking it (load = units / weight; ties by client_id).
    3. While moving one unit from a member ``a`` to an eligible ``b`` with room lowers
       ``sum(load^2 · weight)`` (for equal weights: ``a`` holds at least two more than
       ``b``), move the highest unit of the most loaded member to the least loaded one.
    4. If 3 made room (under ``max_claims``) for units step 2 could not place, place them
       and balance again.
    Every step is ordered, so the result depends on nothing but the arguments. Its cost is
    O(P·log M) to place and, when every member may take every unit with equal weights,
    O(log M) per move (O(M·log M) otherwise), so a group of thousands computes it in
    milliseconds even when one member holds everything (docs/performance.md, "What a fleet
    costs").
    """
    by_id = {m.client_id: m for m in members}
    ids = sorted(by_id)
    subs = {c: by_id[c].subscribed for c in ids}
    weight = {c: by_id[c].weight for c in ids}
    cap = {c: by_id[c].max_claims or len(units) + 1 for c in ids}
    owned: dict[str, list[Unit]] = {c: [] for c in ids}
    free: list[Unit] = []
    for unit in units:
        h = holders.get(unit)
        if h in by_id and _eligible(by_id[h], unit, subs[h]) and len(owned[h]) < cap[h]:
            owned[h].append(unit)
        else:
            free.append(unit)
    equal_weights = len(set(weight.values())) <= 1
    # every member may take every unit: the common group, balanced by heaps (below)
    uniform = equal_weights and len({(subs[c], by_id[c].entire_topic) for c in ids}) <= 1

    while True:
        left = _place(free, ids, owned, weight, cap, by_id, subs)
        if uniform:
            moved = _move_all_uniform(ids, owned, cap)
        else:
            moved = False
            while _move_one(ids, owned, weight, cap, by_id, subs, equal_weights):
                moved = True
        if not left or (len(left) == len(free) and not moved):
            return owned
        # balancing may have made room (under max_claims) for a unit only a full member
        # could take: place what is left again
        free = left


def _place(
    free: list[Unit],
    ids: list[str],
    owned: dict[str, list[Unit]],
    weight: dict[str, int],
    cap: dict[str, int],
    by_id: dict[str, Member],
    subs: dict[str, frozenset[str]],
) -> list[Unit]:
    """Step 2: each free unit (in order) to the eligible member with room that is least
    loaded after taking it, ties by client_id; returns the units nobody could take. One
    heap per kind of unit (its topic, whole or not) holds the members that may take it,
    keyed as ``min(room, key=(n + 1) / w, c)`` would rank them; an entry whose member has
    taken a unit since is stale and skipped."""
    heaps: dict[tuple[str, bool], list[tuple[float, str, int]]] = {}
    kinds: dict[str, list[tuple[str, bool]]] = {c: [] for c in ids}
    for unit in free:
        kind = (unit[0], unit[1] == WHOLE_TOPIC)
        if kind in heaps:
            continue
        heap = heaps[kind] = []
        for c in ids:
            if unit[0] in subs[c] and kind[1] == by_id[c].entire_topic:
                kinds[c].append(kind)
                n = len(owned[c])
                if n < cap[c]:
                    heap.append(((n + 1) / weight[c], c, n))
        heapq.heapify(heap)
    left: list[Unit] = []
    for unit in free:
        heap = heaps[(unit[0], unit[1] == WHOLE_TOPIC)]
        while heap and heap[0][2] != len(owned[heap[0][1]]):
            heapq.heappop(heap)  # stale: that member took a unit since
        if not heap:
            left.append(unit)
            continue
        c = heap[0][1]
        insort(owned[c], unit)
        n = len(owned[c])
        if n < cap[c]:
            for kind in kinds[c]:
                heapq.heappush(heaps[kind], ((n + 1) / weight[c], c, n))
    return left


class _Last:
    """A client_id that sorts in reverse: a min-heap of ``(-n, _Last(c))`` pops the most
    loaded member, ties to the largest client_id (the last of ``sorted(ids)`` at that load)."""

    __slots__ = ("c",)

    def __init__(self, c: str) -> None:
        self.c = c

    def __lt__(self, other: _Last) -> bool:
        return other.c < self.c


def _move_all_uniform(ids: list[str], owned: dict[str, list[Unit]], cap: dict[str, int]) -> bool:
    """Step 3 for equal weights when every member may take every unit: exactly the moves
    repeated :func:`_move_one` makes (the most loaded ``a``, ties to the last client_id, gives
    its highest unit to the least loaded ``b`` with room, ties to the first, while ``a``
    holds at least two more), with the two ends kept in heaps instead of sorting all members
    per move. Returns whether anything moved."""
    most = [(-len(owned[c]), _Last(c)) for c in ids]
    least = [(len(owned[c]), c) for c in ids if len(owned[c]) < cap[c]]
    heapq.heapify(most)
    heapq.heapify(least)
    moved = False
    while most:
        na, a = -most[0][0], most[0][1].c
        if na != len(owned[a]):
            heapq.heappop(most)  # stale
            continue
        if na == 0:
            return moved
        # the least loaded member with room other than a (a's own entry is set aside)
        aside = []
        b = None
        while least:
            nb, c = least[0]
            if nb != len(owned[c]) or nb >= cap[c]:
                heapq.heappop(least)  # stale, or full
            elif c == a:
                aside.append(heapq.heappop(least))
            else:
                b = c
                break
        for entry in aside:
            heapq.heappush(least, entry)
        if b is None or len(owned[b]) > na - 2:
            return moved
        insort(owned[b], owned[a].pop())
        moved = True
        nb = len(owned[b])
        heapq.heappush(most, (-(na - 1), _Last(a)))
        heapq.heappush(most, (-nb, _Last(b)))
        heapq.heappush(least, (na - 1, a))
        if nb < cap[b]:
            heapq.heappush(least, (nb, b))
    return moved


def _move_one(
    ids: list[str],
    owned: dict[str, list[Unit]],
    weight: dict[str, int],
    cap: dict[str, int],
    by_id: dict[str, Member],
    subs: dict[str, frozenset[str]],
    equal_weights: bool = False,
) -> bool:
    ranked = sorted(ids, key=lambda c: (len(owned[c]) / weight[c], c))
    for a in reversed(ranked):
        na = len(owned[a])
        if na == 0:
            return False
        first = True
        for b in ranked:
            nb = len(owned[b])
            if b == a or nb >= cap[b]:
                continue
            # the move lowers sum(n^2/w): (2·nb + 1)/wb < (2·na - 1)/wa
            if (2 * nb + 1) * weight[a] >= (2 * na - 1) * weight[b]:
                if equal_weights:
                    # ranked by n, every later b fails as well; and when the least loaded
                    # b fails, it fails against every less loaded a too: nothing moves
                    if first:
                        return False
                    break
                continue
            first = False
            for i in range(na - 1, -1, -1):
                unit = owned[a][i]
                if _eligible(by_id[b], unit, subs[b]):
                    del owned[a][i]
                    insort(owned[b], unit)
                    return True
    return False


def target(
    strategy: Strategy | str,
    members: Sequence[Member],
    holders: Mapping[Unit, str],
) -> dict[str, frozenset[Unit]]:
    """The target of every member under ``strategy`` ("balanced" or a callable); units no
    member may take are in nobody's target."""
    members = sorted(members, key=lambda m: m.client_id)
    units = units_of(members)
    if strategy == "balanced":
        result: Mapping[str, Iterable[Unit]] = balanced(members, units, holders)
    elif callable(strategy):
        result = strategy(members, units, holders)
    else:
        raise ValueError(f"unknown rebalance strategy {strategy!r}")
    known = set(units)
    out: dict[str, frozenset[Unit]] = {m.client_id: frozenset() for m in members}
    taken: set[Unit] = set()
    for client in sorted(result):
        if client not in out:
            continue  # a callable may name members that are not counted: ignore them
        mine = frozenset(u for u in result[client] if u in known and u not in taken)
        taken |= mine
        out[client] = mine
    return out
