# The C reader of task vectors by sources (rationalizer/_vectors.c; see vectors.py).
def read(
    layout: tuple, value: bytes, at: int, /
) -> tuple[tuple[tuple[str, int], ...], int, int] | None: ...

# The C reader of a version 7 MemberHeartbeat's numbers (varint.read_varints in Python):
# ``count`` minimal varints of at most 2^63 at ``value[at:]`` and the position after them,
# or None for anything else.
def varints(value: bytes, at: int, count: int, /) -> tuple[list[int], int] | None: ...

# The C reader of a version 7 MemberHeartbeat, as codec.decode_v7_fields reads it: the
# group id, the heartbeat interval, the ids and each entry with its identity part
# (codec.BeatRow), or None for anything else.
def beat(
    key: bytes, value: bytes, /
) -> tuple[str, int, str, str, tuple[tuple[bytes, str, int, int, int], ...]] | None: ...
