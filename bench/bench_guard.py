"""The guard's cost per tool call, beside the same calls without it, in one run.

- classify: the shell classifier (tree-sitter-bash parse + tree walk) over the guard corpus
  (services/runner/tests/unit/data/guard_corpus.tsv), mean per command;
- run_shell: the guard on a call (`decide`: parse, grant, dial, classifier, 10 before hook
  rules; then 2 after hook rules on the real output) beside `execute` alone (a real
  `git status` in a real repository);
- read_file: the same for a small file read, the cheapest tool call there is.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from nexus_events.events.specs import Hooks, Permissions, ToolGrant
from nexus_runner.git import Author, Git
from nexus_runner.guard import hooks as guard_hooks
from nexus_runner.guard.shell import classify
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.workspace import Workspace

CORPUS = Path(__file__).resolve().parents[1] / "services/runner/tests/unit/data/guard_corpus.tsv"
CALLS = 200
ROUNDS = 3
HOOKS = Hooks.model_validate(
    {
        "before_tool_call": [
            {"tool": "read_file", "path": f"secret{i}/*", "decision": "deny"} for i in range(5)
        ]
        + [
            {"tool": "run_shell", "args": {"command": f"re:^curl .*evil{i}"}, "decision": "deny"}
            for i in range(4)
        ]
        + [{"tool": "run_shell", "command_class": ["network"], "decision": "ask"}],
        "after_tool_call": [
            {"tool": "*", "decision": "redact", "redact": ["tok-[0-9]{6,}"]},
            {"tool": "read_file", "path": "private/*", "decision": "deny"},
        ],
    }
)


def _commands() -> list[str]:
    rows = [line.split("\t", 1)[1] for line in CORPUS.read_text().splitlines() if "\t" in line]
    return [r.replace("\\n", "\n") for r in rows if not r.startswith("#")]


def _repo(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "notes.txt").write_text("hello\n" * 20)


def _registry(root: Path, hooks: Hooks) -> ToolRegistry:
    ws = Workspace(root)
    ctx = ToolContext(
        workspace=ws, git=Git(ws.root, Author("b", "b@x")), shell_timeout=30, output_cap=20_000
    )
    grants = [ToolGrant(name=t) for t in ("read_file", "run_shell", "finish")]
    return ToolRegistry(grants, Permissions(auto_approve="curated"), ctx, hooks=hooks)


async def _per_call(fn: Callable[[], Awaitable[object]]) -> float:
    """Best of ROUNDS means, in microseconds."""
    means = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(CALLS):
            await fn()
        means.append((time.perf_counter() - start) / CALLS * 1e6)
    return min(means)


async def _pair(reg: ToolRegistry, tool: str, args: dict[str, str]) -> tuple[float, float]:
    """(the call without the guard, the guard on that call) per call, in microseconds.

    Measured apart, not as a difference of two timings of a whole call: a shell call's
    own spread (a process start) is larger than the guard's cost."""
    raw = json.dumps(args)
    decision = reg.decide(tool, raw)
    assert decision.action == "run", decision.reason
    output = (await reg.execute(decision)).output

    async def bare() -> object:
        return await reg._execute(decision)  # the tool call as it was, no guard at all

    async def guard() -> object:
        # What the guard adds to a call: the whole decide (parse, grant, dial, classifier,
        # before hooks) and the after hooks on the call's real output.
        classify.cache_clear()  # a run's commands differ call to call: no cache hits
        judged = reg.decide(tool, raw)
        return guard_hooks.after(reg.hooks, tool, judged.raw, None, output)

    return await _per_call(bare), await _per_call(guard)


async def run() -> list[tuple[str, float, str, float]]:
    commands = _commands()
    for command in commands:  # warm up: the first calls pay for imports and lazy set-up
        classify.__wrapped__(command)
    times: list[float] = []
    for command in commands:
        start = time.perf_counter()
        for _ in range(ROUNDS):
            classify.__wrapped__(command)  # uncached: each command parsed and walked
        times.append((time.perf_counter() - start) / ROUNDS * 1e6)
    times.sort()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _repo(root)
        reg = _registry(root, HOOKS)
        shell_bare, shell_guard = await _pair(reg, "run_shell", {"command": "git status"})
        read_bare, read_guard = await _pair(reg, "read_file", {"path": "notes.txt"})
        start = time.perf_counter()
        for _ in range(CALLS):
            guard_hooks.before(HOOKS, "run_shell", {"command": "git status"}, "read_only")
        hooks_only = (time.perf_counter() - start) / CALLS * 1e6
    return [
        (f"classify one command, median of {len(commands)} (corpus), us", times[len(times) // 2],
         "", 0.0),
        ("classify one command, slowest of the corpus, us", times[-1], "", 0.0),
        ("10 before_tool_call rules on one call, us", hooks_only, "", 0.0),
        ("run_shell 'git status' without the guard, us/call", shell_bare, "", 0.0),
        ("guard on that call (decide + after hooks), us", shell_guard, "bare",
         shell_guard / shell_bare),
        ("read_file without the guard, us/call", read_bare, "", 0.0),
        ("guard on that call (decide + after hooks), us", read_guard, "bare",
         read_guard / read_bare),
    ]  # fmt: skip
