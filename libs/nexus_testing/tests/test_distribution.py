"""The suite's grouping over xdist workers: a file whole, the dev-stack files one at a time."""

from __future__ import annotations

from nexus_testing.distribution import QUIET_STACK_GROUP, STACK_GROUP, group_of


def test_a_test_runs_with_the_rest_of_its_file() -> None:
    a = group_of("services/core/tests/unit/test_decide.py::test_one")
    b = group_of("services/core/tests/unit/test_decide.py::test_two[x::y]")
    assert a == b == "services/core/tests/unit/test_decide.py"
    assert group_of("services/core/tests/unit/test_other.py::test_one") != a


def test_files_that_start_a_dev_stack_share_one_group() -> None:
    for nodeid in (
        "tests/e2e/test_e2e.py::test_board_after_runs",
        "tests/e2e/containment/test_shapes.py::test_x",
    ):
        assert group_of(nodeid) == STACK_GROUP
    # Stacks for untimed checks: one at a time among themselves, beside the e2e group.
    for nodeid in (
        "cli/tests/integration/test_cli_stack.py::test_up",
        "cli/tests/integration/test_dev_nats_auth.py::test_x",
        "tests/deploy/test_compose_smoke.py::test_one_run_end_to_end_from_compose",
    ):
        assert group_of(nodeid) == QUIET_STACK_GROUP
    helpers = group_of("cli/tests/integration/test_cli_stack_helpers.py::test_x")
    assert helpers not in (STACK_GROUP, QUIET_STACK_GROUP)
