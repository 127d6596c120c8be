# The C reader of task vectors by sources (rationalizer/_vectors.c; see vectors.py).
def read(
    layout: tuple, value: bytes, at: int, /
) -> tuple[tuple[tuple[str, int], ...], int, int] | None: ...
