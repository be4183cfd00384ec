"""Implementations of the built-in tools. Each takes the context and its validated arguments
and returns the text the model reads, or raises `ToolError` with a message it can act on."""

from __future__ import annotations

import asyncio
import errno
import fnmatch
import os
import re
import stat
from collections.abc import Awaitable, Callable, Generator, Iterator
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from nexus_runner.containment import is_secret_file, reads_outside
from nexus_runner.errors import ToolError
from nexus_runner.plan import READ_SKILL
from nexus_runner.process import run_process
from nexus_runner.safety import SECRET_REFUSAL
from nexus_runner.tools import args as a
from nexus_runner.tools.sleep import SLEEP, SleepArgs, sleep
from nexus_runner.tools.stepped import finish_in_thread

if TYPE_CHECKING:
    from nexus_runner.tools.context import ToolContext
    from nexus_runner.tools.schedules import RunSchedules

# Files larger than this are not read whole (the model gets a clear error instead).
MAX_READ_BYTES = 2_000_000
# search_files skips files larger than this (generated, vendored or binary blobs), and stops
# after reading this much in all: a search of a huge tree must not hold the run for minutes.
MAX_SEARCH_FILE_BYTES = 1_000_000
MAX_SEARCH_TOTAL_BYTES = 64_000_000

# The file tools below touch the disk (stat, walk, read, write): each runs in a worker thread,
# so a large tree or a slow disk never blocks the event loop (heartbeats, cancellation); a
# listing starts on the loop and goes on in a thread past a few steps (`list_files`). They
# open files only through the workspace (nexus_runner.beneath: atomically, beneath its root).
# A listing's steps on the event loop before the rest goes to a worker thread: a step is a
# directory entered or WALK_STEP_NAMES names matched, so the loop is held well under 1 ms.
INLINE_WALK_STEPS = 16
WALK_STEP_NAMES = 256


async def read_file(ctx: ToolContext, args: a.ReadFileArgs) -> str:
    return await asyncio.to_thread(_read_file, ctx, args)


def _read_file(ctx: ToolContext, args: a.ReadFileArgs) -> str:
    rel, data = ctx.workspace.read_bytes(args.path, MAX_READ_BYTES)
    content = data.decode(errors="replace")
    if is_secret_file(PurePosixPath(rel).name):
        ctx.secrets.add_text(content)  # the model reads it with its values redacted
    lines = content.splitlines(keepends=True)
    part = lines[args.offset : args.offset + args.limit]
    more = len(lines) - (args.offset + len(part))
    text = "".join(part)
    if more > 0:
        text += f"\n... [{more} more lines; use offset={args.offset + len(part)}]"
    return text


async def write_file(ctx: ToolContext, args: a.WriteFileArgs) -> str:
    return await asyncio.to_thread(_write_file, ctx, args)


def _write_file(ctx: ToolContext, args: a.WriteFileArgs) -> str:
    ctx.workspace.write_text(args.path, args.content)
    return f"wrote {len(args.content)} characters to {args.path}"


async def edit_file(ctx: ToolContext, args: a.EditFileArgs) -> str:
    return await asyncio.to_thread(_edit_file, ctx, args)


def _edit_file(ctx: ToolContext, args: a.EditFileArgs) -> str:
    counted: list[int] = []

    def change(text: str) -> str:
        count = text.count(args.old)
        if count == 0:
            raise ToolError(f"the text to replace was not found in {args.path}; read it again")
        if count > 1 and not args.replace_all:
            raise ToolError(
                f"the text to replace occurs {count} times in {args.path}; "
                "give more context or set replace_all"
            )
        counted.append(count)
        return text.replace(args.old, args.new)

    ctx.workspace.edit_text(args.path, change, MAX_READ_BYTES)
    return f"replaced {counted[0] if args.replace_all else 1} occurrence(s) in {args.path}"


async def list_files(ctx: ToolContext, args: a.ListFilesArgs) -> str:
    # A listing of a small tree takes well under a millisecond; handing it to a worker
    # thread cost 0.5 ms a call idle and several under CPU load (the thread's wake-up and the
    # GIL's hand-off), most of a turn's tool time (docs/performance.md, "The runner's marginal
    # turn"). So the walk starts here and moves to a thread only past INLINE_WALK_STEPS.
    return await finish_in_thread(_list_files(ctx, args), INLINE_WALK_STEPS)


def _walk(fd: int, base: str) -> Iterator[tuple[str, list[str], int]]:
    """(directory relative to the workspace, file names, its fd) under the directory `fd`,
    `.git` left out: `os.fwalk` opens each one from its parent's fd without following links,
    so the walk never leaves the directory it started from."""
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        inner = os.path.normpath(dirpath)
        rel = os.path.normpath(os.path.join(base, inner)) if base != "." else inner
        yield rel, sorted(filenames), dir_fd


def _joined(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


def _list_files(ctx: ToolContext, args: a.ListFilesArgs) -> Generator[None, None, str]:
    """The listing, one step per directory and per WALK_STEP_NAMES names looked at."""
    found: list[str] = []
    looked = 0
    with ctx.workspace.directory(args.path) as opened:
        for rel, filenames, _ in _walk(opened.fd, opened.rel):
            yield
            for name in filenames:
                looked += 1
                if looked % WALK_STEP_NAMES == 0:
                    yield
                if fnmatch.fnmatch(name, args.pattern):
                    found.append(_joined(rel, name))
                    if len(found) >= args.limit:
                        return "\n".join(found) + f"\n... [stopped at {args.limit} entries]"
    return "\n".join(found) if found else "(no files)"


async def search_files(ctx: ToolContext, args: a.SearchFilesArgs) -> str:
    try:
        regex = re.compile(args.pattern)
    except re.error as exc:
        raise ToolError(f"invalid regular expression: {exc}") from exc
    return await asyncio.to_thread(_search_files, ctx, args, regex)


def _search_files(ctx: ToolContext, args: a.SearchFilesArgs, regex: re.Pattern[str]) -> str:
    hits: list[str] = []
    skipped: list[str] = []
    scanned = 0
    with ctx.workspace.directory(args.path) as opened:
        for rel, filenames, dir_fd in _walk(opened.fd, opened.rel):
            for name in filenames:
                if not fnmatch.fnmatch(name, args.glob):
                    continue
                file = _joined(rel, name)
                try:
                    size, lines = _search_lines(name, dir_fd, MAX_SEARCH_TOTAL_BYTES - scanned)
                except _TooLargeError:
                    skipped.append(file)
                    continue
                except _OverBudgetError:
                    return _search_result(hits, skipped) + (
                        f"\n... [stopped after reading {scanned} bytes; narrow path or glob]"
                    )
                except (UnicodeDecodeError, OSError):
                    continue  # links, hard-linked files, non-text and vanished files
                scanned += size
                for number, line in enumerate(lines, 1):
                    if regex.search(line):
                        hits.append(f"{file}:{number}: {line[:300]}")
                        if len(hits) >= args.limit:
                            return _search_result(hits, skipped) + (
                                f"\n... [stopped at {args.limit} matches]"
                            )
    return _search_result(hits, skipped)


class _TooLargeError(Exception):
    """A file over MAX_SEARCH_FILE_BYTES: listed as not searched."""


class _OverBudgetError(Exception):
    """Reading the file would pass MAX_SEARCH_TOTAL_BYTES: the search stops."""


def _search_lines(name: str, dir_fd: int, budget: int) -> tuple[int, list[str]]:
    """A file of the walk, opened from its directory's fd without following a link; only a
    regular file with one link (a hard link may be an outside file's other name)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            raise OSError(errno.EPERM, "not a regular file with a single link")
        if info.st_size > MAX_SEARCH_FILE_BYTES:
            raise _TooLargeError
        if info.st_size > budget:
            raise _OverBudgetError
        data = file.read(MAX_SEARCH_FILE_BYTES + 1)
    if len(data) > MAX_SEARCH_FILE_BYTES:
        raise _TooLargeError
    return len(data), data.decode().splitlines()


def _search_result(hits: list[str], skipped: list[str]) -> str:
    text = "\n".join(hits) if hits else "(no matches)"
    if skipped:
        shown = ", ".join(skipped[:5]) + (
            f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        )
        text += f"\n[not searched, over {MAX_SEARCH_FILE_BYTES} bytes: {shown}; use read_file]"
    return text


async def _shell(ctx: ToolContext, command: str, cwd: str, timeout: float | None) -> str:
    where = ctx.workspace.resolve(cwd)
    argv, env = ctx.sandbox.shell(
        command, workspace=ctx.workspace.root, home=ctx.home, cwd=where, egress=ctx.egress
    )
    result = await run_process(
        argv, cwd=where, timeout=timeout or ctx.shell_timeout, output_cap=ctx.output_cap, env=env
    )
    ctx.last_exit_code = result.exit_code
    if reads_outside(command, ctx.workspace.root):
        # What a command read outside the workspace is secret, whatever it looks like.
        ctx.secrets.add_text(result.output)
    status = "timed out" if result.timed_out else f"exit code {result.exit_code}"
    tail = "\n[output truncated]" if result.truncated else ""
    text = f"{result.output}{tail}\n[{status}]"
    if not result.ok:
        raise ToolError(text)
    return text


async def run_shell(ctx: ToolContext, args: a.RunShellArgs) -> str:
    return await _shell(ctx, args.command, args.cwd, args.timeout)


async def git_status(ctx: ToolContext, args: a.GitStatusArgs) -> str:
    return await ctx.git.status() or "(clean)"


async def git_diff(ctx: ToolContext, args: a.GitDiffArgs) -> str:
    if args.path is not None:
        ctx.workspace.resolve(args.path)
    return await ctx.git.diff(args.staged, args.path) or "(no changes)"


async def git_commit(ctx: ToolContext, args: a.GitCommitArgs) -> str:
    for p in args.paths or []:
        ctx.workspace.resolve(p)
    sha = await ctx.git.commit(args.message, args.paths)
    withheld = ctx.git.withheld_note()
    if sha is None:
        return "nothing to commit" + withheld
    ctx.commits.append(sha)
    return f"committed {sha}" + withheld


async def run_tests(ctx: ToolContext, args: a.RunTestsArgs) -> str:
    # Only the configured (or detected) command: the model does not choose what runs here.
    command = ctx.test_command
    if command is None:
        raise ToolError(
            "no test command is configured for this agent and none was detected; "
            "the tests cannot be run with run_tests"
        )
    try:
        out = await _shell(ctx, command, ".", args.timeout)
    except ToolError:
        ctx.tests_passed = False
        raise
    ctx.tests_passed = True
    return out


def _refuse_secrets(
    ctx: ToolContext, args: a.RememberArgs | a.DelegateArgs | a.ScheduleCreateArgs
) -> None:
    """Memory and another agent's run are outside this run: what goes there passes the
    secret scanner here, whichever registry runs the call."""
    if ctx.secrets.holds_piece(args.model_dump_json()):
        raise ToolError(SECRET_REFUSAL)


async def remember(ctx: ToolContext, args: a.RememberArgs) -> str:
    _refuse_secrets(ctx, args)
    if ctx.memory is None:
        raise ToolError("memory is unavailable: this runner has no connection to it")
    return await ctx.memory.remember(args, ctx.call_id)


def _schedules(ctx: ToolContext) -> RunSchedules:
    if ctx.schedules is None:
        raise ToolError("schedules are unavailable: this runner has no connection to them")
    return ctx.schedules


async def schedule_create(ctx: ToolContext, args: a.ScheduleCreateArgs) -> str:
    _refuse_secrets(ctx, args)  # each future run's input is outside this run
    return await _schedules(ctx).create(args, ctx.call_id)


async def schedule_list(ctx: ToolContext, args: a.ScheduleListArgs) -> str:
    return await _schedules(ctx).list()


async def schedule_delete(ctx: ToolContext, args: a.ScheduleDeleteArgs) -> str:
    return await _schedules(ctx).delete(args)


async def delegate(ctx: ToolContext, args: a.DelegateArgs) -> str:
    _refuse_secrets(ctx, args)
    if ctx.delegate is None:
        raise ToolError("delegation is not available in this run")
    return await ctx.delegate(args)


# What an accepted `finish` answers: a resumed attempt recognises the dead one's by it.
async def read_skill(ctx: ToolContext, args: a.ReadSkillArgs) -> str:
    """An on-demand skill's content (no workspace access)."""
    content = ctx.skills.get(args.name)
    if content is None:
        known = ", ".join(sorted(ctx.skills)) or "none"
        raise ToolError(f"no on-demand skill named {args.name!r}; this run's: {known}")
    return content


FINISHED = "run finished"


async def finish(ctx: ToolContext, args: a.FinishArgs) -> str:
    ctx.finished = args
    return FINISHED


Handler = Callable[["ToolContext", Any], Awaitable[str]]

BUILTINS: dict[str, tuple[type[a.ToolArgs], Handler]] = {
    "read_file": (a.ReadFileArgs, read_file),
    "write_file": (a.WriteFileArgs, write_file),
    "edit_file": (a.EditFileArgs, edit_file),
    "list_files": (a.ListFilesArgs, list_files),
    "search_files": (a.SearchFilesArgs, search_files),
    "run_shell": (a.RunShellArgs, run_shell),
    "git_status": (a.GitStatusArgs, git_status),
    "git_diff": (a.GitDiffArgs, git_diff),
    "git_commit": (a.GitCommitArgs, git_commit),
    "run_tests": (a.RunTestsArgs, run_tests),
    "remember": (a.RememberArgs, remember),
    "delegate": (a.DelegateArgs, delegate),
    "schedule_create": (a.ScheduleCreateArgs, schedule_create),
    "schedule_list": (a.ScheduleListArgs, schedule_list),
    "schedule_delete": (a.ScheduleDeleteArgs, schedule_delete),
    "finish": (a.FinishArgs, finish),
    READ_SKILL: (a.ReadSkillArgs, read_skill),
    SLEEP: (SleepArgs, sleep),
}
