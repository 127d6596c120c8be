"""Every store of a task restored to one commit.

A task's commit call writes a marker to each of its stores' changelogs in turn (each with
``lm-commit``: the call's sequence number in the epoch, the task's stores, and this store's
marker of the last call that reached every store), so a crash between two leaves the first
ones a commit ahead. A restore rebuilds each store from its changelog
(:func:`~logmarshal.streams.changelog._restore_store`), then takes the stores ahead back
to the commit every store has (:func:`rollbacks`, :func:`roll_back`); a restorer that died
among its fences left fences that judged some stores and not the others, which are read as
if absent (:func:`partial_fences`). :func:`restore_stores` does all of it;
:func:`read_changelogs` gives the tables a task would start from.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..cluster import Cluster
from .changelog import (
    NO_EPOCH,
    Restored,
    _effective,
    _epoch_of,
    _replay,
    _restore_store,
    changelog_topic,
    epoch_bounds,
    fetch_below,
    marker_of,
)
from .stores import InMemoryStore, KeyValueStore

log = logging.getLogger(__name__)

__all__ = [
    "Rollback",
    "partial_fences",
    "read_changelogs",
    "restore_stores",
    "roll_back",
    "rollbacks",
]


@attrs.frozen
class Rollback:
    """A store whose last commit another store of its task lacks (a crash between two
    stores' changelog writes): restored to the commit before it, ``bound`` being the new
    bound of ``epoch`` and ``positions`` what the store reflects there. ``sent``: the
    positions of the commit taken back, whose sink writes went out before its first
    marker (a commit flushes the sinks first)."""

    epoch: int
    bound: int
    positions: dict[str, int] | None
    sent: dict[str, int]


def _judged(r: Restored, epoch: int) -> bool:
    """Was ``epoch`` judged by a later owner's restore (its fence's verdict bounds it)?"""
    return epoch < r.seed or any(f[1] > epoch for f in _effective(r.found.fences, r.seed))


def _last_valid(r: Restored, epoch: int | None = None) -> int | None:
    """The offset of the store's last valid commit marker (of ``epoch``, if given)."""
    offsets = [
        o for o, e, _ in r.found.commits if o < r.bounds.get(e, 0) and (epoch is None or e == epoch)
    ]
    return max(offsets, default=None)


def partial_fences(restored: dict[str, Restored]) -> frozenset[int] | None:
    """The fence epochs whose writer did not fence every store of the task in one round
    (it died among its fences): read as if absent, since their writer committed nothing,
    and its fences judged some stores and not the others (a stale owner's commit that
    landed after the restore was invalid where a fence came before it, valid where none
    did). None when that cannot be told from these passes (a store restored from a local
    checkpoint lacks a fence another has: the fence may lie before its checkpoint): the
    caller restores every store from its whole changelog."""
    out: set[int] = set()
    for name, r in restored.items():
        for epoch, fenced in r.found.fence_sets.items():
            if fenced is None:
                continue  # (written before fences named their stores)
            stores, round_ = fenced
            for other in stores:
                them = restored.get(other)
                if other == name or them is None:
                    continue
                if epoch not in them.found.fence_sets:
                    if them.seed != NO_EPOCH:
                        return None
                    out.add(epoch)
                    continue
                theirs = them.found.fence_sets[epoch]
                if theirs is not None and theirs[1] != round_:
                    out.add(epoch)  # (fenced in two rounds: two restores' verdicts)
    return frozenset(out)


def rollbacks(restored: dict[str, Restored]) -> dict[str, Rollback] | None:
    """The stores of one task that must go back one commit: those whose last valid commit
    (seq n of epoch e, not yet judged by a later owner) names a store whose last valid
    commit of e is older than n, or that has none. A commit call writes a marker to every
    store of the task, one after the other, so a crash between two leaves the first ones
    a commit ahead; the commit before it (``prev``) reached every store, so one step back
    makes them one commit again. A store judged already, or a commit without the header
    (written before it existed), is taken as it is.

    A store judged already was judged with every other store by one restore (the fences of
    a restore that did not fence every store are read as if absent: :func:`partial_fences`),
    which took them back to one commit.

    None when that cannot be told from these passes: a store restored from a local
    checkpoint of the epoch shows no commit of it (they may lie before the checkpoint): the
    caller restores every store from its whole changelog."""
    out: dict[str, Rollback] = {}
    for name, r in restored.items():
        last = _last_valid(r)
        meta = None if last is None else r.found.meta.get(last)
        if last is None or meta is None:
            continue
        epoch = next(e for o, e, _ in r.found.commits if o == last)
        if _judged(r, epoch):
            continue
        for other in meta.stores:
            if other == name or other not in restored:
                continue
            them = restored[other]
            if _judged(them, epoch):
                continue
            theirs = _last_valid(them, epoch)
            if theirs is None and them.seed == epoch:
                return None  # (its commits of the epoch may lie before its local checkpoint)
            if theirs is None:
                seq = -1
            elif theirs in them.found.meta:
                seq = them.found.meta[theirs].seq
            else:
                continue
            if seq < meta.seq:
                sent = next(p for o, _, p in r.found.commits if o == last)
                out[name] = Rollback(epoch, meta.prev + 1, meta.prev_positions, sent)
                break
    return out


def roll_back(
    cluster: Cluster,
    topic: str,
    partition: int,
    store: KeyValueStore,
    apply: Callable[[bytes, bytes | None], None],
    r: Restored,
    back: Rollback,
) -> Restored:
    """Rebuild ``store`` from the whole changelog to the commit before its last
    (:func:`rollbacks`): the records of the commit taken back are not applied, and the keys
    they were the last record of are among ``uncommitted`` (rewritten by the next commit)."""
    earliest = cluster.earliest_offset(topic, partition)
    if r.seed != NO_EPOCH:
        # (replayed from a local checkpoint: the bounds of the whole log first)
        whole = _replay(
            cluster, topic, partition, lambda k, v: None, earliest, r.end, ignore=r.ignore
        )
        bounds = epoch_bounds(whole.commits, whole.fences)
    else:
        bounds = dict(r.bounds)
    bounds[back.epoch] = min(bounds.get(back.epoch, 0), back.bound)
    store.clear()
    found = _replay(
        cluster, topic, partition, apply, earliest, r.end, bounds=bounds, ignore=r.ignore
    )
    found = attrs.evolve(found, positions=back.positions)
    through = {e: b - 1 for e, b in bounds.items() if b > 0}
    return Restored(found, r.end, through, bounds, ignore=r.ignore)


def restore_stores(
    cluster: Cluster,
    application_id: str,
    partition: int,
    stores: Mapping[str, KeyValueStore],
    apply_of: Callable[[KeyValueStore], Callable[[bytes, bytes | None], None]],
    *,
    use_local: bool = True,
    epoch: int = NO_EPOCH,
) -> tuple[dict[str, Restored], dict[str, Rollback]]:
    """Rebuild each of a task's stores from its changelog partition and bring them to one
    commit; returns each store's restore and the stores taken back. ``apply_of(store)``
    applies a record to it; ``epoch``: the restorer's (a local checkpoint of its own epoch is
    not reused: its fence, written again, replaces the first, whose verdict on the epochs
    before the checkpoint a pass over the tail cannot give)."""

    def restore(name: str, local: bool, ignore: frozenset[int] = frozenset()) -> Restored:
        store = stores[name]
        topic = changelog_topic(application_id, name)
        return _restore_store(
            cluster, topic, partition, store, apply_of(store), use_local=local, ignore=ignore
        )

    restored = {name: restore(name, use_local) for name in sorted(stores)}
    for name, r in restored.items():
        if epoch != NO_EPOCH and r.seed == epoch:
            restored[name] = restore(name, False)
    partial = partial_fences(restored)
    if partial is None:  # (a store's local checkpoint may hide a fence: whole changelogs)
        restored = {name: restore(name, False) for name in sorted(stores)}
        partial = partial_fences(restored) or frozenset()
    if partial:
        log.warning(
            "%s/%d: the fences of epoch(s) %s are not in every store of the task (their "
            "writer died among them, before it committed): read as if absent",
            application_id,
            partition,
            sorted(partial),
        )
        for name, r in list(restored.items()):
            if r.seed != NO_EPOCH or partial & set(r.found.fence_sets):
                restored[name] = restore(name, False, partial)
    backs = rollbacks(restored)
    if backs is None:
        restored = {name: restore(name, False, partial) for name in sorted(stores)}
        backs = rollbacks(restored) or {}
    for name, back in sorted(backs.items()):
        topic = changelog_topic(application_id, name)
        if not _prev_kept(cluster, topic, partition, back, restored[name].end):
            # the cleaner passed the commit taken back (the task was down longer than the
            # changelog's min.compaction.lag.ms): the records it superseded may be gone, and
            # a take-back would lose them. The store stays ahead, as before take-backs: its
            # writes for the input it reflects are dropped in the replay
            log.warning(
                "%s/%d has a commit (input positions %s) that another store of the task lacks, "
                "but the commit before it was compacted away: it is not taken back (the state "
                "computed from this store during the replay of that input may be off; "
                "docs/streams.md, 'Stores out of step')",
                topic,
                partition,
                back.sent,
            )
            del backs[name]
            continue
        log.warning(
            "%s/%d has a commit (input positions %s) that another store of the task lacks "
            "(a crash between their changelog writes): restored to the commit before it "
            "(%s), as the others",
            topic,
            partition,
            back.sent,
            back.positions,
        )
        store = stores[name]
        restored[name] = roll_back(
            cluster, topic, partition, store, apply_of(store), restored[name], back
        )
    return restored, backs


def _prev_kept(cluster: Cluster, topic: str, partition: int, back: Rollback, end: int) -> bool:
    """Is the marker the store would be taken back to still in its changelog? It shares its
    key with the commit taken back (a commit's) or is a fence: gone, the cleaner has passed
    that commit, and the records it superseded may be gone with it."""
    at = back.bound - 1
    if at < 0:
        return True  # (back to before the epoch: nothing of it is needed)
    if at < cluster.earliest_offset(topic, partition):
        return False
    first = fetch_below(cluster, topic, partition, at, end)[0]
    return (
        first.offset == at
        and marker_of(first.key) is not None
        and (_epoch_of(first.headers) == back.epoch)
    )


def read_changelogs(
    cluster: Cluster, application_id: str, stores: list[str], partition: int
) -> dict[str, tuple[dict[Any, Any], dict[str, int] | None]]:
    """Per store of a task: the table its changelog partition restores to with the task's
    other stores, and the input positions it reflects (what a task would start from; for
    tests and tools. :func:`~logmarshal.streams.changelog.read_changelog` reads one store's
    changelog alone)."""
    mems = {name: InMemoryStore(name) for name in stores}
    restored, _ = restore_stores(
        cluster, application_id, partition, mems, lambda s: s.restore, use_local=False
    )
    return {name: (mems[name].all(), restored[name].found.positions) for name in stores}
