"""The scripts the end-to-end tests and chaos checks drive through the dev stack's model.

They are shipped with the demo's because the dev stack serves them: `nexus dev up
--offline-model` and `make compose-test` run the same server the tests talk to, and a run picks
its script by a keyword in its prompt (``[offline-model:NAME]``).
"""

from __future__ import annotations

from collections.abc import Callable

from .demo_scripts import fix_steps
from .replies import Call, Reply, Step, Turn, finish


def _steady_steps(first: Turn) -> list[Step]:
    work = "for i in 1 2 3 4 5 6; do echo working $i; sleep 1; done"
    return [
        lambda t: Reply("Warming up: some shell work.", (Call("run_shell", {"command": work}),)),
        lambda t: Reply("And a bit more.", (Call("run_shell", {"command": work}),)),
        *fix_steps(first),
    ]


def _slow_steps(first: Turn) -> list[Step]:
    return [
        lambda t: Reply(
            "This will take a while.",
            (Call("run_shell", {"command": "echo started; sleep 600", "timeout": 900}),),
        ),
        lambda t: finish("The long command ended."),
    ]


def _approval_steps(first: Turn) -> list[Step]:
    def decided(t: Turn) -> Reply:
        if "was not run" in t.last_tool:
            return finish("The command was not approved, so nothing was run.", approved=False)
        return finish("The approved command ran.", approved=True)

    return [
        lambda t: Reply(
            "I need to run one command; it needs a human's approval.",
            (Call("run_shell", {"command": "echo the gated command ran"}),),
        ),
        decided,
    ]


PLAN = "1. Change add() in calc.py to return a + b.\n2. Run the tests."


def _plan_steps(first: Turn) -> list[Step]:
    return [
        lambda t: Reply("Looking around before planning.", (Call("list_files", {"path": "."}),)),
        lambda t: Reply("Here is my plan.", (Call("exit_plan_mode", {"plan": PLAN}),)),
        lambda t: Reply(
            "The plan is approved; writing it down.",
            (Call("write_file", {"path": "PLAN.md", "content": PLAN + "\n"}),),
        ),
        lambda t: finish("Wrote the approved plan to PLAN.md.", files=["PLAN.md"]),
    ]


def _chat_steps(first: Turn) -> list[Step]:
    return [lambda t: finish("Hello from the offline model.")]


# The `resume` script's files: each written at one turn and read back at a later one.
RESUME_FILES = {
    "notes/alpha.txt": "alpha: the first note of the resume script\n",
    "notes/beta.txt": "beta: the second note, written after the first journal line\n",
    "notes/gamma.txt": "gamma: the third note, read back two turns later\n",
}
RESUME_JOURNAL = "journal.log"


def _append(step: int, pause: float = 0.0) -> Call:
    # A distinct line per step: a line twice in the journal is a side effect run twice.
    wait = f"sleep {pause}; " if pause else ""
    line = f"step {step}"
    command = f"{wait}echo '{line}' >> {RESUME_JOURNAL} && echo 'appended {line}'"
    return Call("run_shell", {"command": command})


def _resume_report(t: Turn) -> Reply:
    seen = dict.fromkeys(RESUME_FILES, False)
    journal: list[str] = []
    interrupted = 0
    for tool, arguments, output in t.results:
        if "interrupted" in output.lower():
            interrupted += 1
        if tool == "read_file" and arguments.get("path") in seen:
            path = str(arguments["path"])
            seen[path] = RESUME_FILES[path].strip() in output
        elif tool == "run_shell" and str(arguments.get("command", "")).startswith("cat "):
            journal = [x for x in output.splitlines() if x.startswith("step ")]
    ok = all(seen.values())
    return finish(
        "Wrote, read back and journaled; " + ("every read matched." if ok else "a read differed."),
        seen=seen,
        journal=journal,
        interrupted=interrupted,
    )


def _resume_steps(first: Turn, pauses: tuple[float, float, float] = (0.0, 0.3, 0.0)) -> list[Step]:
    """The `resume` script; `pauses`: seconds each of its three journal appends sleeps first."""
    alpha, beta, gamma = RESUME_FILES

    def write(path: str) -> Step:
        return lambda t: Reply(
            f"Writing {path}.", (Call("write_file", {"path": path, "content": RESUME_FILES[path]}),)
        )

    def read(path: str) -> Step:
        return lambda t: Reply(f"Reading {path} back.", (Call("read_file", {"path": path}),))

    def shell(call: Call) -> Step:
        return lambda t: Reply("Noting progress in the journal.", (call,))

    return [
        write(alpha),
        shell(_append(2, pause=pauses[0])),
        write(beta),
        read(alpha),
        # A short pause: a kill after this turn's event often lands inside the command.
        shell(_append(5, pause=pauses[1])),
        write(gamma),
        read(beta),
        shell(_append(8, pause=pauses[2])),
        read(gamma),
        lambda t: Reply(
            "Printing the journal.", (Call("run_shell", {"command": f"cat {RESUME_JOURNAL}"}),)
        ),
        _resume_report,
    ]


# The checks' scripts by name; each gives a script's steps for the conversation's first turn.
CHECK_SCRIPTS: dict[str, Callable[[Turn], list[Step]]] = {
    "steady": _steady_steps,
    "slow": _slow_steps,
    "approval": _approval_steps,
    "chat": _chat_steps,
    "plan": _plan_steps,
    "resume": _resume_steps,
    # Seconds in each journal append: five runs started together all still run when a NATS
    # node is killed a moment later (scripts/chaos_cluster.py).
    "paced": lambda first: _resume_steps(first, pauses=(2.0, 2.0, 2.0)),
}
