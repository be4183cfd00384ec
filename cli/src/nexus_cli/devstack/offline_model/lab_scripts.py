"""The scripts the lab's tests follow (docs/lab.md): a deterministic multi-turn run a replay
reproduces, and two eval answerers whose pass rates are known in advance.

Each reply is a function of the request alone, so the same requests get the same replies
(a replay of an unchanged revision reproduces the run) and a changed request (a changed
skill's text in a tool result) changes the replies after it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .replies import Call, Reply, Step, Turn, finish

STEP1_FILE = "notes/step1.txt"
STEP1_TEXT = "step 1 of the lab script\n"
STEP3_FILE = "notes/step3.txt"
# A line naming where on-demand skills are listed (it mentions read_skill or "on demand"),
# then list items ``- NAME ...``, ``* `NAME` ...`` or ``1. NAME ...``: the first NAME is read.
_ON_DEMAND = re.compile(r"read_skill|on[ -]demand", re.IGNORECASE)
_ITEM = re.compile(r"^\s*(?:[-*]|\d+\.)\s+[*`]*([A-Za-z0-9_-]+)")
# `answer: X` in the task input; X runs to the end of the line or a `[`.
_ANSWER = re.compile(r"answer:\s*([^\[\n]*)", re.IGNORECASE)
EASY = "[easy]"
WRONG_ANSWER = "no idea"


def first_on_demand_skill(prompt: str) -> str | None:
    """The first skill listed as on demand in the system prompt, if any."""
    listing = False
    for line in prompt.splitlines():
        if listing:
            item = _ITEM.match(line)
            if item:
                return item.group(1)
            if line.strip().startswith("#"):
                listing = False
        if _ON_DEMAND.search(line):
            listing = True
    return None


def _read_something(t: Turn) -> Reply:
    skill = first_on_demand_skill(t.prompt)
    if skill is not None and "read_skill" in t.tools:
        return Reply(f"Reading the {skill} skill.", (Call("read_skill", {"name": skill}),))
    return Reply(f"Reading {STEP1_FILE} back.", (Call("read_file", {"path": STEP1_FILE}),))


def _write_step3(t: Turn) -> Reply:
    size = len(t.last_tool)
    content = f"step 3: the previous tool said {size} characters\n"
    return Reply(
        f"Writing {STEP3_FILE}.", (Call("write_file", {"path": STEP3_FILE, "content": content}),)
    )


def _lab_steps(first: Turn) -> list[Step]:
    return [
        lambda t: Reply(
            f"Writing {STEP1_FILE}.",
            (Call("write_file", {"path": STEP1_FILE, "content": STEP1_TEXT}),),
        ),
        _read_something,
        _write_step3,
        lambda t: finish("Wrote two notes and read one thing in between.", steps=3),
    ]


def answer_in(task: str) -> str:
    """The text after ``answer:`` in the task input ("" if it names none)."""
    found = _ANSWER.search(task)
    return found.group(1).strip() if found else ""


def _eval_steps(lenient: bool) -> Callable[[Turn], list[Step]]:
    def steps(first: Turn) -> list[Step]:
        def answer(t: Turn) -> Reply:
            right = lenient or EASY in t.task
            return finish("Answered.", answer=answer_in(t.task) if right else WRONG_ANSWER)

        return [answer]

    return steps


LAB_SCRIPTS: dict[str, Callable[[Turn], list[Step]]] = {
    "lab-steps": _lab_steps,
    "eval-strict": _eval_steps(lenient=False),
    "eval-lenient": _eval_steps(lenient=True),
}
