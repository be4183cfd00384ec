"""The scripts the demo (`make demo`, examples/) follows: fix, planner, reviewer, tester."""

from __future__ import annotations

import re
from collections.abc import Callable

from .replies import Call, Reply, Step, Turn, finish

# A flow step's run id ends with -r<round>, or -r<round>-i<item> in a map (step_run_id).
ROUND = re.compile(r"[a-z0-9_]-r(\d+)(?:-i\d+)?(?![\w-])")

# The demo repo's bug and its fix (examples/demo-repo/calc.py).
BUG_FILE = "calc.py"
BUG_OLD = "return a - b  # BUG: should add"
BUG_NEW = "return a + b"
# What the scripted reviewer asks for in round 1, and the test the implementer adds for it.
REVIEW_FINDING = "add() has no test with negative numbers"
NEGATIVE_TEST_FILE = "test_calc_negative.py"
NEGATIVE_TEST = (
    "from calc import add\n\n\ndef test_add_negative() -> None:\n"
    "    assert add(-2, -3) == -5\n    assert add(-2, 3) == 1\n"
)
PLAN_STEPS = [
    "Read calc.py and test_calc.py to find why test_add fails.",
    "Change add() in calc.py to return a + b.",
    "Run the tests and check they all pass.",
]


def fix_steps(first: Turn) -> list[Step]:
    # A second round of a flow: the reviewer's finding is in the input; answer it too.
    asked = REVIEW_FINDING in first.prompt
    answer: list[Step] = [
        lambda t: Reply(
            f"The reviewer asked: {REVIEW_FINDING}; adding that test.",
            (Call("write_file", {"path": NEGATIVE_TEST_FILE, "content": NEGATIVE_TEST}),),
        )
    ]
    files = [BUG_FILE, NEGATIVE_TEST_FILE] if asked else [BUG_FILE]
    return [
        lambda t: Reply("Let me look at the project first.", (Call("list_files", {"path": "."}),)),
        lambda t: Reply(f"Reading {BUG_FILE}.", (Call("read_file", {"path": BUG_FILE}),)),
        lambda t: Reply("Running the tests to see what fails.", (Call("run_tests"),)),
        lambda t: Reply(
            "`add` subtracts instead of adding; fixing it.",
            (Call("edit_file", {"path": BUG_FILE, "old": BUG_OLD, "new": BUG_NEW}),),
        ),
        *(answer if asked else []),
        lambda t: Reply("Running the tests again.", (Call("run_tests"),)),
        lambda t: finish(
            "Fix add() in calc.py: it subtracted its arguments\n\n"
            "calc.add returned a - b; it now returns a + b and the test suite passes.",
            files=files,
            tests="passed" if "passed" in t.last_tool else "unknown",
        ),
    ]


def planner_steps(first: Turn) -> list[Step]:
    plan = "\n".join(f"{i}. {step}" for i, step in enumerate(PLAN_STEPS, 1))
    return [
        lambda t: Reply("Looking at the project before planning.", (Call("list_files"),)),
        lambda t: Reply(f"Reading {BUG_FILE}.", (Call("read_file", {"path": BUG_FILE}),)),
        lambda t: finish(plan, steps=list(PLAN_STEPS)),
    ]


def flow_round(text: str) -> int:
    """The flow round a conversation belongs to: the highest ``-r<round>`` of the step run ids
    (and branches named after them) it mentions; 1 when it names none."""
    return max((int(m.group(1)) for m in ROUND.finditer(text)), default=1)


def reviewer_steps(first: Turn) -> list[Step]:
    def verdict(t: Turn) -> Reply:
        if flow_round(t.prompt) >= 2:
            return finish(
                "The fix is right and the requested test is there; approved.",
                verdict="approve",
                findings=[],
            )
        return finish(
            f"add() is fixed, but {REVIEW_FINDING}; please add one.",
            verdict="request_changes",
            findings=[REVIEW_FINDING],
        )

    return [
        lambda t: Reply("Looking at the change.", (Call("list_files"),)),
        lambda t: Reply(f"Reading {BUG_FILE}.", (Call("read_file", {"path": BUG_FILE}),)),
        verdict,
    ]


def tester_steps(first: Turn) -> list[Step]:
    def report(t: Turn) -> Reply:
        passed = "[exit code 0]" in t.last_tool
        summary = "The test suite passes." if passed else "The test suite fails."
        return finish(summary, passed=passed)

    return [
        lambda t: Reply("Running the project's tests.", (Call("run_tests"),)),
        report,
    ]


# The demo's scripts by name; each gives a script's steps for the conversation's first turn.
DEMO_SCRIPTS: dict[str, Callable[[Turn], list[Step]]] = {
    "fix": fix_steps,
    "planner": planner_steps,
    "reviewer": reviewer_steps,
    "tester": tester_steps,
}
