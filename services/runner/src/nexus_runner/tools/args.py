"""Argument models of the built-in tools; their JSON Schemas are what the model is offered."""

from __future__ import annotations

from typing import Any

from nexus_events.events.memory import MAX_MEMORY_TEXT
from pydantic import BaseModel, ConfigDict, Field


class ToolArgs(BaseModel):
    """Base of tool arguments: a misspelt argument is an error the model can read."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ReadFileArgs(ToolArgs):
    """Read a text file of the workspace."""

    path: str = Field(..., description="Path relative to the workspace root.")
    offset: int = Field(0, ge=0, description="First line to return (0-based).")
    limit: int = Field(2000, gt=0, description="Most lines to return.")


class WriteFileArgs(ToolArgs):
    """Create or overwrite a file with the given content."""

    path: str = Field(..., description="Path relative to the workspace root.")
    content: str = Field(..., description="The whole new content of the file.")


class EditFileArgs(ToolArgs):
    """Replace an exact piece of text in a file (must occur exactly once unless replace_all)."""

    path: str = Field(..., description="Path relative to the workspace root.")
    old: str = Field(..., min_length=1, description="Exact text to replace.")
    new: str = Field(..., description="Replacement text.")
    replace_all: bool = Field(False, description="Replace every occurrence.")


class ListFilesArgs(ToolArgs):
    """List files under a directory (recursively, .git excluded)."""

    path: str = Field(".", description="Directory relative to the workspace root.")
    pattern: str = Field("*", description="Glob on file names, e.g. '*.py'.")
    limit: int = Field(500, gt=0, description="Most entries to return.")


class SearchFilesArgs(ToolArgs):
    """Search file contents with a regular expression."""

    pattern: str = Field(..., min_length=1, description="Python regular expression.")
    path: str = Field(".", description="Directory relative to the workspace root.")
    glob: str = Field("*", description="Only files whose name matches this glob.")
    limit: int = Field(200, gt=0, description="Most matching lines to return.")


class RunShellArgs(ToolArgs):
    """Run a shell command (bash -c) in the workspace."""

    command: str = Field(..., min_length=1, description="The command line.")
    cwd: str = Field(".", description="Working directory relative to the workspace root.")
    timeout: float | None = Field(None, gt=0, description="Seconds before it is killed.")


class GitStatusArgs(ToolArgs):
    """Show the work tree status (git status --short --branch)."""


class GitDiffArgs(ToolArgs):
    """Show the diff of the work tree (or of staged changes)."""

    staged: bool = Field(False, description="Diff of the index instead of the work tree.")
    path: str | None = Field(None, description="Limit to one path.")


class GitCommitArgs(ToolArgs):
    """Stage changes and commit them."""

    message: str = Field(..., min_length=1, description="Commit message.")
    paths: list[str] | None = Field(None, description="Paths to stage; all changes if omitted.")


class RunTestsArgs(ToolArgs):
    """Run the project's tests with the command configured for this agent (or detected from
    the project's files); it takes no command."""

    timeout: float | None = Field(None, gt=0, description="Seconds before it is killed.")


class RememberArgs(ToolArgs):
    """Remember something for later runs (long-term memory): a fact, decision or preference
    worth knowing next time. Never include secrets: a text holding one is refused."""

    text: str = Field(
        ..., min_length=1, max_length=MAX_MEMORY_TEXT, description="What to remember, briefly."
    )
    kind: str = Field(
        "fact",
        pattern=r"^[a-z][a-z0-9_-]{0,31}$",
        description="fact, decision, preference, ... (lower case).",
    )
    tags: list[str] = Field(default_factory=list, max_length=20, description="Tags.")
    key: str | None = Field(
        None,
        max_length=200,
        description="Topic key: a newer memory with the same key in the same scope replaces"
        " this one (e.g. 'test-command').",
    )
    scope: str | None = Field(
        None,
        description="Who it is for: 'agent' (default: this agent), 'task' (this run's task),"
        " 'repo' (this run's repository) or 'global'.",
    )


class ReadSkillArgs(ToolArgs):
    """Read in full one of the skills listed under "Skills on demand" in your instructions."""

    name: str = Field(..., min_length=1, description="The skill's name, as listed.")


class FinishArgs(ToolArgs):
    """End the run with a structured result. Call it once the work is done."""

    summary: str = Field(..., min_length=1, description="What was done, in a few sentences.")
    details: dict[str, Any] = Field(
        default_factory=dict, description="Role-specific output (e.g. review verdict)."
    )


class ScheduleCreateArgs(ToolArgs):
    """Schedule runs of this agent for later: a 5-field cron (UTC) or a fixed interval of at
    least 60 s, each run getting `input`. An operator can see, pause and remove it; this
    agent's schedules are capped (the refusal says the cap)."""

    cron: str | None = Field(
        None, max_length=200, description="When, as cron 'minute hour day month weekday' (UTC)."
    )
    interval_seconds: int | None = Field(
        None, ge=1, description="Or every this many seconds (60 or more)."
    )
    input: str = Field(..., min_length=1, max_length=20_000, description="What each run should do.")


class ScheduleListArgs(ToolArgs):
    """List the schedules this agent created, with their ids."""


class ScheduleDeleteArgs(ToolArgs):
    """Delete one of the schedules this agent created."""

    schedule_id: str = Field(..., max_length=128, description="Its id (from schedule_list).")


class DelegateArgs(ToolArgs):
    """Hand a piece of work to another agent: it runs as a child run of this one. With wait
    (the default) the child's result comes back as this call's output; without, it arrives
    later as a message."""

    agent: str = Field(
        ..., pattern=r"^[A-Za-z0-9_-]{1,128}$", description="Id of the agent to delegate to."
    )
    input: str = Field(..., min_length=1, description="What the other agent should do.")
    wait: bool = Field(True, description="Wait for the child's result (else fire and forget).")
    timeout: float = Field(
        900.0, gt=0, le=7200, description="Seconds to wait for the result when waiting."
    )
