"""The simulator's rule tables without some of the protocol's properties (its experiments).

Each property a later protocol version added to the rules (PROTOCOL.md: a, b, c from
version 4, e from version 5, f and g from version 6, h from version 7, i from version 8, j
from version 9) is one method of ``rationalizer._rules.Rules``; :class:`RulesWithout` overrides the ones an
experiment drops (``python -m scenarios.sim --without takeover_position`` and the like), so
that the simulator shows which bug each property prevents. The production modules know nothing of
these variants: a world is handed one (``WorldState(rules=rules_without(...))``).
"""

from __future__ import annotations

from rationalizer._rules import RULES, Rules
from rationalizer._state import PartitionEntry, Sender

__all__ = ["PROPERTIES", "RulesWithout", "rules_without"]

#: ``--without`` name -> the property it drops (the ``Rules`` method)
PROPERTIES = {
    "takeover_position": "carries_position",  # a: a restart takeover carries the position
    "release_floor": "gives_back",  # b: a release gives back only its own reservations
    "reservation_start": "starts_at_resume",  # c: a reservation starts at the resume point
    "fenced_lease": "lease_runs",  # e: a claim waits out a lease the log took away early
    "release_tenure": "names_tenure",  # f: a release ends only the tenure it names
    "late_heartbeat": "keeps_position",  # g: a late heartbeat does not move the position
    "member_tenure": "beats_in_tenure",  # h: a member heartbeat's entry (renewal, takeover) names its tenure
    "task_tenure": "task_beats_in_tenure",  # i: a task's heartbeat (renewal, takeover) names its tenure
    "own_tenure": "names_own_tenure",  # j: the holder names a tenure without a name
}


class RulesWithout(Rules):
    """The protocol's rules without the properties named in ``without`` (keys of
    :data:`PROPERTIES`): each dropped property admits what it refused."""

    __slots__ = ("without",)

    def __init__(self, without: frozenset[str]) -> None:
        unknown = set(without) - set(PROPERTIES)
        if unknown:
            raise ValueError(f"unknown rule switches {sorted(unknown)}")
        self.without = frozenset(without)

    def __repr__(self) -> str:
        return f"RulesWithout({sorted(self.without)})"

    def carries_position(self, part: PartitionEntry, last_offset: int) -> bool:
        return "takeover_position" in self.without or super().carries_position(part, last_offset)

    def gives_back(self, part: PartitionEntry, last_offset: int) -> int:
        if "release_floor" in self.without:
            return last_offset  # every reservation beyond it, an earlier tenure's too
        return super().gives_back(part, last_offset)

    def starts_at_resume(self, part: PartitionEntry, first: int) -> bool:
        # (a version 4 reservation is then judged as a version 1 one)
        return "reservation_start" in self.without or super().starts_at_resume(part, first)

    def lease_runs(self, part: PartitionEntry, now: int) -> bool:
        return "fenced_lease" not in self.without and super().lease_runs(part, now)

    def names_tenure(self, part: PartitionEntry, tenure: int) -> bool:
        return "release_tenure" in self.without or super().names_tenure(part, tenure)

    def keeps_position(self, part: PartitionEntry, last_offset: int) -> bool:
        return "late_heartbeat" not in self.without and super().keeps_position(part, last_offset)

    def beats_in_tenure(self, part: PartitionEntry, tenure: int) -> bool:
        # (an entry, a restart takeover's too, is then judged as its sender's Heartbeat,
        # whichever tenure it names)
        return "member_tenure" in self.without or super().beats_in_tenure(part, tenure)

    def task_beats_in_tenure(self, part: PartitionEntry, tenure: int) -> bool:
        # (a version 8 task heartbeat, a restart takeover's too, is then judged as its
        # sender's version 3 one, whichever tenure it names)
        return "task_tenure" in self.without or super().task_beats_in_tenure(part, tenure)

    def names_own_tenure(self, part: PartitionEntry, sender: Sender) -> bool:
        # (every NamingTenure is then refused: a tenure without a name keeps none)
        return "own_tenure" not in self.without and super().names_own_tenure(part, sender)


def rules_without(without: frozenset[str]) -> Rules:
    """The rule table without the properties ``without`` names (the production table,
    ``rules.RULES``, when it names none)."""
    return RulesWithout(without) if without else RULES
