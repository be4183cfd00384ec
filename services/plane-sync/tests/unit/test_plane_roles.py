"""Plane's workspace role numbers as ``plane:role:`` principals name them."""

from __future__ import annotations

from nexus_events.contract.approver_policy import ApproverPolicy, may_decide

from nexus_plane_sync.answers import plane_answer
from nexus_plane_sync.plane_api import role_names


def test_role_numbers_map_to_their_names_and_the_number() -> None:
    assert role_names(20) == {"admin", "20"}
    assert role_names(15) == {"member", "15"}
    assert role_names(5) == {"guest", "5"}
    assert role_names("20") == {"admin", "20"}
    assert role_names(7) == {"7"}  # a role this version does not know: only its number
    assert role_names(None) == frozenset()  # not a member
    assert role_names(True) == frozenset()
    assert role_names("owner") == frozenset()


def test_an_admin_matches_by_name_or_number_and_a_member_does_not() -> None:
    for principal in ("plane:role:admin", "plane:role:20"):
        policy = ApproverPolicy(principals=(principal,))
        admin = plane_answer({"id": "u1", "display_name": "carol"}, "carol", role_names(20))
        member = plane_answer({"id": "u2", "display_name": "bob"}, "bob", role_names(15))
        assert may_decide(policy, admin).allowed
        assert not may_decide(policy, member).allowed
