import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rationalizer import coordination_partition

GOLDEN = [
    ("orders", 0, 8, 3),
    ("orders", 3, 8, 2),
    ("payments", 17, 8, 5),
    ("orders", 3, 1, 0),
    ("t", 2147483647, 1000, 261),
]


@pytest.mark.parametrize(("topic", "p", "n", "expected"), GOLDEN)
def test_golden(topic, p, n, expected):
    assert coordination_partition(topic, p, n) == expected


@given(
    st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True),
    st.integers(0, 2**31 - 1),
    st.integers(1, 500),
)
def test_matches_architecture_formula(topic, p, n):
    expected = mmh3.hash(f"{topic}/{p}".encode(), 0, signed=False) % n
    assert coordination_partition(topic, p, n) == expected
    assert 0 <= expected < n


@pytest.mark.parametrize("n", [0, -1, 1.0])
def test_bad_n(n):
    with pytest.raises(ValueError):
        coordination_partition("t", 0, n)
