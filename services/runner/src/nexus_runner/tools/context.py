"""What a run's tools act on (workspace, git, sandbox, egress) and what they record."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nexus_events.runtime.clock import SYSTEM_CLOCK, Clock

from nexus_runner import safety
from nexus_runner.egress.access import EgressAccess
from nexus_runner.git import Git
from nexus_runner.sandbox import StateCap
from nexus_runner.sandbox.host import RecordEgress
from nexus_runner.tool_sandbox import UNSANDBOXED, ToolSandbox
from nexus_runner.tools.args import DelegateArgs, FinishArgs
from nexus_runner.tools.sleep import SleepPlan
from nexus_runner.workspace import Workspace

if TYPE_CHECKING:
    from nexus_runner.tools.memory import RunMemory
    from nexus_runner.tools.schedules import RunSchedules


@dataclass
class ToolContext:
    """What tools act on, and what they record for the result."""

    workspace: Workspace
    git: Git
    shell_timeout: float
    output_cap: int
    test_command: str | None = None
    commits: list[str] = field(default_factory=list)
    tests_passed: bool | None = None
    last_exit_code: int | None = None
    finished: FinishArgs | None = None
    # An accepted `sleep` of this turn (nexus_runner.tools.sleep): the loop ends the attempt.
    slept: SleepPlan | None = None
    # The `sleep` tool's bound (the agent's resume.max_sleep_seconds; 0 = may not sleep) and
    # the clock it reads the time from.
    max_sleep_seconds: int = 0
    clock: Clock = SYSTEM_CLOCK
    # Long-term memory of the run (the `remember` tool); None: no connection to it.
    memory: RunMemory | None = None
    # The agent's own schedules (the schedule_* tools); None: no connection to the scheduler.
    schedules: RunSchedules | None = None
    # The run's on-demand skills' content by name (the `read_skill` tool reads them).
    skills: dict[str, str] = field(default_factory=dict)
    # Id of the tool call being executed (calls run one at a time): what makes a call's
    # side effect idempotent, e.g. the id a `remember` records under.
    call_id: str = ""
    # The `delegate` tool's way out (nexus_runner.delegation); None: not available.
    delegate: Callable[[DelegateArgs], Awaitable[str]] | None = None
    # Values read from secret places: kept out of tool output, events, commits and pushes.
    secrets: safety.SecretRegistry = field(default_factory=safety.SecretRegistry)
    # HOME of shell commands: a directory of the run's own, not the runner's (its ~/.ssh).
    home: Path | None = None
    # How a sandboxed tool's `nexus.approve(reason)` asks a human (tool, reason) -> granted;
    # None: not wired, such a call fails (closed).
    approve: Callable[[str, str], Coroutine[Any, Any, bool]] | None = None
    # The run's egress proxy (nexus_runner.egress), when its agent has egress grants: what the
    # tools' sandbox binds in (`egress.net_dir`), wraps commands in (`egress.relay_argv()`)
    # and sets (`egress.env()`). None: the tools have no network at all.
    egress: EgressAccess | None = None
    # Records a sandboxed tool's `nexus.http.fetch` as an `egress` event; None: unrecorded.
    record_egress: RecordEgress | None = None
    # Run-wide bounds of the sandboxed tools' key/value state (settings sandbox_state_*).
    state_cap: StateCap = field(default_factory=StateCap)
    # Where shell commands run (run_shell, run_tests, acceptance): the tools' own sandbox.
    sandbox: ToolSandbox = UNSANDBOXED
