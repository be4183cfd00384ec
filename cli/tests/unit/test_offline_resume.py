"""The offline model's `resume` script: what it asks for, and what its finish reports from
the tool results it was given (the resume chaos test reads those details)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from nexus_cli.devstack import offline_model as om

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("read_file", "write_file", "run_shell", "finish")
]


class _Files:
    """A workspace in a dict, and the tools the script uses on it."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def run(self, name: str, args: dict[str, Any]) -> str:
        if name == "write_file":
            self.files[args["path"]] = args["content"]
            return f"wrote {len(args['content'])} characters to {args['path']}"
        if name == "read_file":
            return self.files.get(args["path"], f"{args['path']}: no such file")
        command = args["command"]
        if command.startswith("cat "):
            return self.files.get(om.RESUME_JOURNAL, "") + "\n[exit code 0]"
        line = command.split("echo '", 1)[1].split("'", 1)[0]
        self.files[om.RESUME_JOURNAL] = self.files.get(om.RESUME_JOURNAL, "") + line + "\n"
        return f"appended {line}\n[exit code 0]"


Tamper = Callable[[int, str, dict[str, Any], str], str]


def _drive(tamper: Tamper | None = None) -> tuple[list[str], dict[str, Any]]:
    """Play the script to its finish; `tamper(turn, tool, args, output)` may change what a
    tool said. Returns the tools called in order and the finish details."""
    files = _Files()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "[offline-model:resume] you test resumes"},
        {"role": "user", "content": "go"},
    ]
    names: list[str] = []
    for turn in range(20):
        reply = om.reply_for({"model": "m", "messages": messages, "tools": TOOLS})
        call = reply.calls[0]
        names.append(call.name)
        if call.name == "finish":
            return names, call.arguments["details"]
        call_id = f"c{turn}"
        messages.append(
            {
                "role": "assistant",
                "content": reply.text,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                    }
                ],
            }
        )
        output = files.run(call.name, call.arguments)
        if tamper is not None:
            output = tamper(turn, call.name, call.arguments, output)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
    raise AssertionError("the script never finished")


def test_the_resume_script_writes_reads_journals_and_reports() -> None:
    names, details = _drive()
    assert len(names) == 11  # ten tool turns, then finish: eleven model calls
    assert names.count("write_file") == 3
    assert names.count("read_file") == 3
    assert names.count("run_shell") == 4
    assert details == {
        "seen": dict.fromkeys(om.RESUME_FILES, True),
        "journal": ["step 2", "step 5", "step 8"],
        "interrupted": 0,
    }


def test_no_two_calls_of_the_script_are_alike() -> None:
    # The chaos checker counts a call of attempt 2 equal to one of attempt 1 as a repeat:
    # the script itself must never make the same call twice.
    calls = []
    messages: list[dict[str, Any]] = [{"role": "user", "content": "[offline-model:resume]"}]
    for turn in range(10):
        call = om.reply_for({"messages": messages, "tools": TOOLS}).calls[0]
        calls.append(json.dumps([call.name, call.arguments], sort_keys=True))
        messages += [
            {"role": "assistant", "content": "", "tool_calls": []},
            {"role": "tool", "tool_call_id": f"c{turn}", "content": "ok"},
        ]
    assert len(set(calls)) == len(calls) == 10


def test_a_lost_file_a_repeated_line_and_an_interruption_show_in_the_details() -> None:
    def tamper(turn: int, tool: str, args: dict[str, Any], output: str) -> str:
        if tool == "read_file" and args["path"] == "notes/beta.txt":
            return "notes/beta.txt: no such file"  # a workspace not restored
        if tool == "run_shell" and args["command"].startswith("cat "):
            return "step 2\nstep 5\nstep 5\nstep 8\n[exit code 0]"  # an append run twice
        if turn == 7:
            return "The call was interrupted by a runner restart; its effect is unknown."
        return output

    _, details = _drive(tamper)
    assert details["seen"] == {
        "notes/alpha.txt": True,
        "notes/beta.txt": False,
        "notes/gamma.txt": True,
    }
    assert details["journal"] == ["step 2", "step 5", "step 5", "step 8"]
    assert details["interrupted"] == 1
