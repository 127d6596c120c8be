"""A task's changelogs: the records a commit and a takeover write, and how a restore judges
them (:func:`valid_commits`, :func:`epoch_bounds`) to rebuild a store.

A commit writes a store's changed keys, then a commit marker that vouches for them and
carries the input positions they reflect; a restore applies a commit only once it sees its
marker. So the marker is stored only after every record it vouches for: in the same produce
call where the cluster stores a call all or none (``produce_is_atomic``), else in a call of
its own once the records' call succeeded.

Fencing: every changelog record carries the epoch of the claim it was written under (the
runner's ``Consumer.epoch``; later holders have higher ones). A task that takes over writes
a fence marker (its epoch, and the changelog offset its restore read up to) before it
processes; a restore applies only the commits that no fence invalidates
(:func:`valid_commits`), so a stalled former owner that appends a commit after losing the
task cannot change the state a later restore sees.

Compaction: changelogs are compacted (the latest record per key survives), so markers are
keyed per epoch (``COMMIT_KEY/<epoch>``, ``FENCE_KEY/<epoch>``): each epoch's last commit
marker and its fence survive. A fence also records its writer's verdict on the epochs before
it (``through``: each one's last valid commit marker) and the positions its restored state
reflects, because compaction may remove the valid markers a stale writer's later marker of
the same epoch supersedes. A restore judges every epoch by one bound (:func:`epoch_bounds`):
an epoch's valid commits are always a prefix of its commits.

One commit for every store: a task's commit call writes a marker to each of its stores in
turn, so a crash between two leaves the first a commit ahead. Each marker names the call
(``lm-commit``: its sequence number in the epoch, the task's stores, and this store's marker
of the last call that reached every store); a restore takes a store whose last commit another
store lacks back to that marker (:mod:`logmarshal.streams.task_restore`), so that every
store of the task reflects the same input.
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Callable
from typing import Any

import attrs

from .._ranges import read_below
from ..cluster import Cluster, Message
from .stores import InMemoryStore, KeyValueStore

log = logging.getLogger(__name__)

#: header on changelog records: JSON {topic: next input offset} the state reflects
POSITIONS_HEADER = "lm-positions"
#: key prefix of the record that ends each commit in a changelog (value: the positions as
#: JSON); the key is ``marker_key(COMMIT_KEY, epoch)``. Not valid JSON, so no store key can
#: equal it. (A key equal to the prefix alone, written before keys had the epoch, is read as
#: a marker too.)
COMMIT_KEY = b"\x00logmarshal-commit"
#: key prefix of the record a task writes when it takes over (after its restore, before it
#: processes): value JSON {"epoch": e, "base": b, "through": {epoch: offset}, "positions":
#: {topic: offset}}: "my state is exactly the valid commits below offset b, which reflect
#: input ``positions``; of each lower epoch, the commits through ``through[epoch]`` (none if
#: absent) are valid, and no commit of a lower epoch at or after b is"
FENCE_KEY = b"\x00logmarshal-fence"
#: header on every changelog record a task writes: its claim's fencing epoch, decimal ASCII
EPOCH_HEADER = "lm-epoch"
#: header on a commit marker: JSON {"seq": n, "stores": [...], "prev": [offset, positions]}:
#: the task's n-th commit call of its epoch, which wrote a marker to each of ``stores``; and
#: this store's marker (commit or fence) of the epoch's last commit before it that reached
#: every store. A restore takes a store back to ``prev`` when a store of ``stores`` lacks
#: the commit (:mod:`~logmarshal.streams.task_restore`): every store of a task is restored
#: to one commit
COMMIT_HEADER = "lm-commit"
#: the epoch of records without the header (written before epochs) and of unfenced tasks
NO_EPOCH = -1
#: changelog records are produced in batches of at most this many key+value bytes
CHANGELOG_BATCH_BYTES = 256 * 1024


def changelog_topic(application_id: str, store: str) -> str:
    return f"{application_id}-{store}-changelog"


def marker_key(prefix: bytes, epoch: int) -> bytes:
    """A commit or fence marker's key: one per epoch, so compaction keeps each epoch's last."""
    return prefix + b"/" + str(epoch).encode()


def marker_of(key: bytes | None) -> bytes | None:
    """COMMIT_KEY or FENCE_KEY if ``key`` is such a marker's, else None (a store key)."""
    if not key or key[0] != 0:
        return None
    for prefix in (COMMIT_KEY, FENCE_KEY):
        if key == prefix or (key.startswith(prefix) and key[len(prefix) : len(prefix) + 1] == b"/"):
            return prefix
    return None


def _epoch_of(headers: tuple) -> int:
    """The ``lm-epoch`` header of a changelog record; -1 for records written before epochs
    (or without one), which then behave as before: valid unless a fence says otherwise."""
    for name, value in headers:
        if name == EPOCH_HEADER:
            try:
                return int(value)
            except (TypeError, ValueError):
                return NO_EPOCH
    return NO_EPOCH


#: (offset, epoch, positions) of a commit marker; (offset, epoch, base, through, positions)
#: of a fence marker (the last two None in a fence written before they existed)
_Commit = tuple[int, int, dict[str, int]]
_Fence = tuple[int, int, int, "dict[int, int] | None", "dict[str, int] | None"]


@attrs.frozen
class CommitMeta:
    """A commit marker's ``lm-commit`` header (:data:`COMMIT_HEADER`)."""

    seq: int
    stores: tuple[str, ...]
    prev: int
    prev_positions: dict[str, int] | None


def _commit_meta(headers: tuple) -> CommitMeta | None:
    """The header of a commit marker; None where it has none (written before it existed)
    or one that does not parse (such a commit is judged by itself, as before)."""
    for name, value in headers:
        if name == COMMIT_HEADER:
            try:
                body = json.loads(value)
                prev, positions = body["prev"]
                return CommitMeta(
                    int(body["seq"]),
                    tuple(str(n) for n in body["stores"]),
                    int(prev),
                    None if positions is None else _positions(positions),
                )
            except (ValueError, TypeError, KeyError, AttributeError):
                return None
    return None


def commit_header(seq: int, stores: list[str], prev: tuple[int, dict[str, int] | None]) -> bytes:
    return json.dumps(
        {"seq": seq, "stores": stores, "prev": [prev[0], prev[1]]}, sort_keys=True
    ).encode()


def _positions(body: Any) -> dict[str, int]:
    return {str(t): int(o) for t, o in body.items()}


def _effective(fences: list[_Fence], seed: int) -> list[_Fence]:
    """The fences that count: each one's epoch above every fence before it (and ``seed``).
    A fence landing after a newer owner's (its writer stalled between restore and fence) is
    stale: the newer owner judged the log before it with no less knowledge."""
    out: list[_Fence] = []
    top = seed
    for fence in fences:
        if fence[1] > top:
            out.append(fence)
            top = fence[1]
    return out


def valid_commits(commits: list[_Commit], fences: list[_Fence], seed: int = NO_EPOCH) -> set[int]:
    """Offsets of the commit markers that are valid state: a commit (offset m, epoch e) is
    valid iff (a) no effective fence before it has a higher epoch (a newer owner had already
    fenced e) and (b) every effective fence after it with a higher epoch has a base above m
    (that owner restored a state that included it). ``seed``: the epoch fenced before the
    range (a local checkpoint's)."""
    eff = _effective(fences, seed)
    offsets = [f[0] for f in eff]
    epochs = [f[1] for f in eff]  # strictly increasing
    suffix_min = [0] * (len(eff) + 1)
    suffix_min[len(eff)] = 1 << 62
    for i in range(len(eff) - 1, -1, -1):
        suffix_min[i] = min(eff[i][2], suffix_min[i + 1])
    out = set()
    for offset, epoch, _ in commits:
        i = bisect.bisect_left(offsets, offset)
        if epoch < (epochs[i - 1] if i else seed):
            continue  # (a)
        if suffix_min[max(i, bisect.bisect_right(epochs, epoch))] <= offset:
            continue  # (b)
        out.add(offset)
    return out


def epoch_bounds(
    commits: list[_Commit], fences: list[_Fence], seed: int = NO_EPOCH
) -> dict[int, int]:
    """Per epoch with a commit marker: the offset below which its commits are valid state.
    The first effective fence of a higher epoch judged the epoch when it restored; if it
    recorded that verdict (``through``) it is the bound, since compaction may since have
    removed the markers it judged. Otherwise the markers decide (:func:`valid_commits`).
    One bound per epoch suffices: an epoch's valid commits are a prefix of its commits (an
    invalid one has a newer owner's fence before it, or a newer fence based at or before it,
    and so does every later commit of the epoch)."""
    eff = _effective(fences, seed)
    valid = valid_commits(commits, fences, seed)
    bounds: dict[int, int] = {}
    for epoch in {c[1] for c in commits}:
        judge = next((f for f in eff if f[1] > epoch), None)
        # the judge's verdict: its epoch's latest recorded one (a fence written again, after
        # a restore redone because another fence landed in between, supersedes the first)
        verdicts = (
            []
            if judge is None
            else [
                f[3] for f in fences if f[1] == judge[1] and f[0] >= judge[0] and f[3] is not None
            ]
        )
        if verdicts:
            bounds[epoch] = verdicts[-1].get(epoch, -1) + 1
        else:
            bounds[epoch] = 1 + max(
                (o for o, e, _ in commits if e == epoch and o in valid), default=-1
            )
    return bounds


@attrs.frozen
class ChangelogPass:
    """What one pass over a changelog range found: its markers, the positions the applied
    state reflects, the keys whose last record in the
    range belongs to no applied commit (a cut-short or stale commit: rewritten by the next
    commit, so that compaction cannot leave them as a key's only record), and per epoch the
    highest offset applied and the lowest dropped (to check the pass against the epochs'
    bounds, :func:`epoch_bounds`)."""

    commits: list[_Commit]
    fences: list[_Fence]
    positions: dict[str, int] | None
    uncommitted: frozenset[bytes]
    applied_max: dict[int, int] = attrs.field(factory=dict)
    dropped_min: dict[int, int] = attrs.field(factory=dict)
    #: per commit marker's offset: its ``lm-commit`` header, where it has one
    meta: dict[int, CommitMeta] = attrs.field(factory=dict)
    #: per fence epoch: the stores and the round its last fence here names (None: a fence
    #: written before they were recorded)
    fence_sets: dict[int, tuple[tuple[str, ...], int] | None] = attrs.field(factory=dict)

    def agrees(self, bounds: dict[int, int]) -> bool:
        """Did this pass apply exactly the records below their epoch's bound?"""
        return all(o < bounds.get(e, 0) for e, o in self.applied_max.items()) and all(
            o >= bounds.get(e, 0) for e, o in self.dropped_min.items()
        )


def _commit_positions(value: bytes | None) -> dict[str, int]:
    """The input positions a commit marker's value carries (JSON {topic: next offset})."""
    return _positions(json.loads(value or b"{}"))


def _fence_set(value: bytes | None) -> tuple[tuple[str, ...], int] | None:
    """The stores a fence says its writer fenced in the same round, and the round (None
    for a fence written before they were recorded, or one that does not parse)."""
    try:
        body = json.loads(value or b"{}")
        stores = body.get("stores")
        if stores is None:
            return None
        return tuple(str(n) for n in stores), int(body.get("round", 1))
    except (ValueError, TypeError, AttributeError):
        return None


def _fence_rewrites(value: bytes | None) -> bool:
    """Did the fence's writer have keys to rewrite at its first commit (a cut-short or stale
    commit's records were some keys' last)? A local checkpoint at such a fence is not
    reused: a replay of the tail after it would not find those keys again."""
    try:
        return bool(json.loads(value or b"{}").get("rewrite", False))
    except (ValueError, TypeError, AttributeError):
        return True


def _fence_fields(value: bytes | None) -> tuple[int, dict[int, int] | None, dict[str, int] | None]:
    body = json.loads(value or b"{}")
    through = body.get("through")
    positions = body.get("positions")
    return (
        int(body["base"]),
        None if through is None else {int(e): int(o) for e, o in through.items()},
        None if positions is None else {str(t): int(o) for t, o in positions.items()},
    )


def fetch_below(
    cluster: Cluster, topic: str, partition: int, offset: int, end: int
) -> list[Message]:
    """Records from ``offset`` (below ``end``, a log end read before) on: at least one, or
    RetriableError (:func:`~logmarshal._ranges.read_below`)."""
    return read_below(
        lambda max_wait: cluster.fetch(topic, partition, offset, max_wait=max_wait),
        f"{topic}/{partition}",
        offset,
        end,
    )


def _replay(
    cluster: Cluster,
    topic: str,
    partition: int,
    apply: Callable[[bytes, bytes | None], None],
    start: int,
    end: int,
    *,
    seed: int = NO_EPOCH,
    bounds: dict[int, int] | None = None,
    last: dict[str, int] | None = None,
    ignore: frozenset[int] = frozenset(),
) -> ChangelogPass:
    """Apply the commits of changelog range ``[start, end)`` in order. A data record belongs
    to the next commit marker of its epoch; the records of an epoch that no marker follows
    (a commit cut short by a crash) are never applied. With ``bounds``, exactly the records
    below their epoch's bound are applied; without, every commit that no fence seen so far
    invalidates (rule (a) of :func:`valid_commits`; the caller checks the pass against
    :func:`epoch_bounds` and replays again with them when they differ, which only a stale
    writer's race, or compaction after one, makes happen). The fences of the epochs in
    ``ignore`` are read as if absent (:func:`~logmarshal.streams.task_restore.partial_fences`)."""
    pending: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
    commits: list[_Commit] = []
    fences: list[_Fence] = []
    applied_max: dict[int, int] = {}
    dropped_min: dict[int, int] = {}
    latest: dict[bytes, tuple[int, bool]] = {}
    meta: dict[int, CommitMeta] = {}
    fence_sets: dict[int, tuple[tuple[str, ...], int] | None] = {}
    top = seed

    def settle(epoch: int, records: list[tuple[int, bytes, bytes | None]], below: int) -> None:
        for off, key, value in records:
            ok = off < below
            if ok:
                apply(key, value)
                applied_max[epoch] = max(applied_max.get(epoch, -1), off)
            elif below >= 0:  # a cut-short commit's (below -1) is never valid: not a drop
                dropped_min[epoch] = min(dropped_min.get(epoch, off), off)
            prev = latest.get(key)
            if prev is None or prev[0] < off:
                latest[key] = (off, ok)

    offset = start
    while offset < end:
        for m in fetch_below(cluster, topic, partition, offset, end):
            if m.offset >= end:
                offset = end
                break
            epoch = _epoch_of(m.headers)
            kind = marker_of(m.key)
            if kind is COMMIT_KEY:
                if bounds is not None:
                    below = bounds.get(epoch, 0)
                else:
                    below = m.offset + 1 if epoch >= top else 0
                settle(epoch, pending.pop(epoch, []), below)
                positions = _commit_positions(m.value)
                commits.append((m.offset, epoch, positions))
                header = _commit_meta(m.headers)
                if header is not None:
                    meta[m.offset] = header
                if m.offset < below:
                    applied_max[epoch] = max(applied_max.get(epoch, -1), m.offset)
                    last = positions
                else:
                    dropped_min[epoch] = min(dropped_min.get(epoch, m.offset), m.offset)
            elif kind is FENCE_KEY and epoch in ignore:
                pass
            elif kind is FENCE_KEY:
                fence_sets[epoch] = _fence_set(m.value)
                base, through, fenced_at = _fence_fields(m.value)
                if any(base <= f[0] for f in fences):
                    # another fence landed between its writer's restore and it: the writer
                    # did not see it, so its verdict does not count (it restores again)
                    through = fenced_at = None
                fences.append((m.offset, epoch, base, through, fenced_at))
                if epoch >= top:
                    # effective (or its writer's again): its restored state is the state here
                    if fenced_at is not None:
                        last = fenced_at
                    top = epoch
            elif m.key is not None:
                pending.setdefault(epoch, []).append((m.offset, m.key, m.value))
            offset = m.offset + 1
    left = sum(len(r) for r in pending.values())
    if left:
        log.warning(
            "%s/%d: %d changelog record(s) of no commit marker (a commit cut short) ignored",
            topic,
            partition,
            left,
        )
    for epoch, records in pending.items():
        settle(epoch, records, -1)
    uncommitted = frozenset(k for k, (_, ok) in latest.items() if not ok)
    return ChangelogPass(
        commits, fences, last, uncommitted, applied_max, dropped_min, meta, fence_sets
    )


def _marks_checkpoint(
    cluster: Cluster,
    topic: str,
    partition: int,
    local: tuple[int, dict[str, int] | None, int | None],
    end: int,
) -> bool:
    """Is the changelog's record at the local checkpoint's offset the marker it was taken
    at (its epoch's commit or fence, with its positions)? A changelog deleted and written
    again past that offset holds another record there: its tail on the old local state
    would be a state no changelog holds. A marker compacted away (its epoch committed
    again after it) cannot be checked either: both mean a full replay."""
    at, positions, epoch = local
    if epoch is None:
        return False
    m = fetch_below(cluster, topic, partition, at, end)[0]
    if m.offset != at or m.key is None or _epoch_of(m.headers) != epoch:
        return False
    kind = marker_of(m.key)
    held: dict[str, int] | None
    try:
        if kind is COMMIT_KEY and m.key == marker_key(COMMIT_KEY, epoch):
            held = _commit_positions(m.value)
        elif kind is FENCE_KEY and m.key == marker_key(FENCE_KEY, epoch):
            if _fence_rewrites(m.value):
                return False
            held = _fence_fields(m.value)[2]
        else:
            return False
    except (ValueError, TypeError, KeyError, AttributeError):
        return False
    if held == positions:
        return True
    log.info(
        "%s/%d: the record at the local checkpoint's offset %d is not the marker it was "
        "taken at (the changelog was written again); full replay",
        topic,
        partition,
        at,
    )
    return False


@attrs.frozen
class Restored:
    """A store rebuilt from its changelog partition: what the pass found, the log end it
    read to, the verdict a fence written after it records (``through``: epoch -> last valid
    commit offset), and the bounds it applied; ``seed``: the epoch fenced before the
    replayed range (a local checkpoint's, when the pass replayed only the tail after it)."""

    found: ChangelogPass
    end: int
    through: dict[int, int]
    bounds: dict[int, int]
    seed: int = NO_EPOCH
    #: fence epochs read as if absent (:func:`~logmarshal.streams.task_restore.partial_fences`)
    ignore: frozenset[int] = frozenset()


def _restore_store(
    cluster: Cluster,
    topic: str,
    partition: int,
    store: KeyValueStore,
    apply: Callable[[bytes, bytes | None], None],
    *,
    use_local: bool = True,
    ignore: frozenset[int] = frozenset(),
) -> Restored:
    """Rebuild ``store`` to the valid commits of its changelog partition below the offset
    returned with the replay (the log end when it started); with ``ignore``, from the whole
    changelog, the fences of those epochs read as if absent
    (:func:`~logmarshal.streams.task_restore.partial_fences`)."""
    earliest = cluster.earliest_offset(topic, partition)
    end = cluster.latest_offset(topic, partition)
    local = store.local_checkpoint() if use_local and not ignore else None
    if local is not None and local[0] >= end:
        # (as Kafka Streams does when its checkpoint is past the changelog's end: the local
        # copy cannot be checked against fences the changelog no longer has)
        log.warning(
            "%s/%d ends at offset %d, but the local state was checkpointed at its commit at "
            "offset %d (input positions %s): the changelog lost records (deleted and created "
            "again, or cut back by an unclean leader election); the state is restored from "
            "what it holds, and the input before the committed positions that it does not "
            "reflect is not in the state",
            topic,
            partition,
            end,
            local[0],
            local[1],
        )
    if (
        local is not None
        and local[2] is not None
        and earliest <= local[0] < end
        and _marks_checkpoint(cluster, topic, partition, local, end)
    ):
        # the local file equals the valid state through local[0], judged by an owner of
        # epoch local[2] that had seen every record up to there: replay the rest, unless a
        # newer owner's fence reaches back into it (its restore did not see all of it). The
        # pass starts at the checkpoint's marker itself, so that a commit there is among the
        # pass's commits (task_restore.rollbacks looks at each store's last one)
        at, positions, _ = local
        epoch = local[2]
        found = _replay(cluster, topic, partition, apply, at, end, seed=epoch, last=positions)
        reaches_back = any(f[2] <= at for f in _effective(found.fences, epoch))
        bounds = epoch_bounds(found.commits, found.fences, epoch)
        if not reaches_back and found.agrees(bounds):
            through = {e: b - 1 for e, b in bounds.items() if b > 0}
            # the local epoch's commits before the tail were valid (the owner judged them)
            through[epoch] = max(through.get(epoch, at), at)
            return Restored(found, end, through, bounds, epoch)
        log.info(
            "%s/%d: the local state is not current with the changelog's fences; full replay",
            topic,
            partition,
        )
    store.clear()
    earliest = cluster.earliest_offset(topic, partition)
    found = _replay(cluster, topic, partition, apply, earliest, end, ignore=ignore)
    bounds = epoch_bounds(found.commits, found.fences)
    if not found.agrees(bounds):
        log.warning(
            "%s/%d: commits a later owner's restore judged invalid (stale: written after "
            "their writer was fenced; or taken back with the other stores of their task) "
            "are not applied",
            topic,
            partition,
        )
        store.clear()
        found = _replay(
            cluster, topic, partition, apply, earliest, end, bounds=bounds, ignore=ignore
        )
    through = {e: b - 1 for e, b in bounds.items() if b > 0}
    return Restored(found, end, through, bounds, ignore=ignore)


def read_changelog(
    cluster: Cluster, application_id: str, store: str, partition: int
) -> tuple[dict[Any, Any], dict[str, int] | None]:
    """The table a store's changelog partition restores to, and the input positions it
    reflects: what a task would start from (for tests, tools and the demo)."""
    mem = InMemoryStore(store)
    r = _restore_store(cluster, changelog_topic(application_id, store), partition, mem, mem.restore)
    return mem.all(), r.found.positions
