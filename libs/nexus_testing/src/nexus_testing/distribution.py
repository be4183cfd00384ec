"""How the suite spreads over pytest-xdist workers (``make test`` runs ``-n`` workers with
``--dist loadgroup``): each test file runs whole on one worker, so its module-scoped fixtures
(a dev stack, a cluster) start once; the e2e files, which share a dev stack and run chaos
against it, form one group and so run one after another, since two of them at once on a
two-core machine would starve each other's timing-bound checks (heartbeats, elections); the
few other files that start a stack for untimed checks form a second group beside it."""

from __future__ import annotations

import os
from typing import Any

import pytest

# Test files (paths from the repository root, or a folder ending in "/") that start a whole
# dev stack or a NATS cluster with chaos: one at a time.
ONE_AT_A_TIME = ("tests/e2e/",)
STACK_GROUP = "dev-stack"
# Files that start a stack of their own for checks that time nothing (the CLI against a
# stack, its NATS users, the compose services): one at a time among themselves, beside the
# e2e group, whose worker would otherwise run them after it (the run's longest unit).
QUIET_STACKS = (
    "cli/tests/integration/test_cli_stack.py",
    "cli/tests/integration/test_dev_nats_auth.py",
    "tests/deploy/test_compose_smoke.py",
)
QUIET_STACK_GROUP = "quiet-stacks"


def _in(path: str, paths: tuple[str, ...]) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in paths)


def group_of(nodeid: str) -> str:
    """The group a test runs in: its file's, or `STACK_GROUP` / `QUIET_STACK_GROUP` for the
    files above."""
    path = nodeid.split("::", 1)[0]
    if _in(path, ONE_AT_A_TIME):
        return STACK_GROUP
    if _in(path, QUIET_STACKS):
        return QUIET_STACK_GROUP
    return path


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Before any conftest imports the CLI. pytest-xdist gives each worker COLUMNS (the
    # controller's terminal width, 80 when it has none). A rich Console made at import pins a
    # COLUMNS it finds then, so the CLI's tables would be cut at 80 columns in a worker,
    # where a plain run follows each test's own.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.pop("COLUMNS", None)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """For ``--dist loadgroup``, groups by `group_of` (the nodeid alone): xdist's own
    loadgroup names a test's group by rewriting its nodeid from its `xdist_group` mark, which
    pytest 9 no longer reads, so every test went alone to any worker."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class GroupedByFile(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            # The dev-stack group is the longest unit by far and runs on one worker: given
            # first, it runs beside everything else instead of after it (xdist orders the
            # queue by test count, which put it late and made it the run's tail).
            if STACK_GROUP in self.workqueue:
                self.workqueue.move_to_end(STACK_GROUP, last=False)
            super()._assign_work_unit(node)

    return GroupedByFile(config, log)
