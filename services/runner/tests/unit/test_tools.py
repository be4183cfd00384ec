"""The built-in tools on a real directory: confinement, edits, shell, grants, approvals."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from nexus_events.events.specs import Permissions, ToolGrant
from nexus_testing import eventually

from nexus_runner.errors import PathEscape
from nexus_runner.git import Author, Git
from nexus_runner.process import run_process
from nexus_runner.tools import ToolContext, ToolRegistry, detect_test_command
from nexus_runner.workspace import Workspace

ALL = [
    "read_file", "write_file", "edit_file", "list_files", "search_files", "run_shell",
    "git_status", "git_diff", "git_commit", "run_tests", "finish",
]  # fmt: skip


def make_registry(
    root: Path, tools: list[str] = ALL, permissions: Permissions | None = None
) -> ToolRegistry:
    ws = Workspace(root)
    ctx = ToolContext(
        workspace=ws, git=Git(ws.root, Author("a", "a@x")), shell_timeout=10, output_cap=1000
    )
    return ToolRegistry(
        [ToolGrant(name=t) for t in tools], permissions or Permissions(can_commit=True), ctx
    )


async def call(reg: ToolRegistry, name: str, **args: object) -> tuple[str, bool, str]:
    decision = reg.decide(name, json.dumps(args))
    if decision.action != "run":
        return decision.action, False, decision.reason
    outcome = await reg.execute(decision)
    return "run", outcome.ok, outcome.output


def test_workspace_refuses_escapes(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "secret").write_text("x")
    (tmp_path / "ws" / "link").symlink_to(tmp_path / "secret")
    (tmp_path / "ws" / "dirlink").symlink_to(tmp_path)
    ws = Workspace(tmp_path / "ws")
    for bad in ["../secret", "/etc/passwd", "link", "dirlink/secret", "a/../../x", "~/x"]:
        with pytest.raises(PathEscape):
            ws.resolve(bad)
    with pytest.raises(PathEscape, match=r"\.git"):
        ws.resolve(".git/config")
    assert ws.resolve("new/file.txt") == (tmp_path / "ws" / "new" / "file.txt").resolve()


async def test_file_tools_roundtrip(tmp_path: Path) -> None:
    reg = make_registry(tmp_path)
    assert (await call(reg, "write_file", path="src/a.py", content="x = 1\ny = 2\n"))[1]
    assert (await call(reg, "read_file", path="src/a.py"))[2] == "x = 1\ny = 2\n"
    assert (await call(reg, "edit_file", path="src/a.py", old="y = 2", new="y = 3"))[1]
    assert "y = 3" in (tmp_path / "src/a.py").read_text()
    _, ok, msg = await call(reg, "edit_file", path="src/a.py", old="nope", new="z")
    assert not ok
    assert "not found" in msg
    assert (await call(reg, "list_files", pattern="*.py"))[2] == "src/a.py"
    assert "src/a.py:2: y = 3" in (await call(reg, "search_files", pattern=r"y = \d"))[2]


async def test_file_tools_run_off_the_event_loop(tmp_path: Path, monkeypatch) -> None:
    """A walk of a huge tree or a slow disk must not stall heartbeats and cancellation: a
    search runs in a worker thread, a listing moves there past its first few steps."""
    import threading

    from nexus_runner.tools import builtin

    threads: list[str] = []
    real_walk = os.fwalk

    def recording_walk(*a: Any, **kw: Any) -> Any:
        for entry in real_walk(*a, **kw):
            threads.append(threading.current_thread().name)  # where each directory is read
            yield entry

    monkeypatch.setattr(builtin.os, "fwalk", recording_walk)
    reg = make_registry(tmp_path)
    await call(reg, "write_file", path="a.txt", content="hello\n")
    assert (await call(reg, "search_files", pattern="hello"))[2] == "a.txt:1: hello"
    assert threads == [threads[0]]
    assert threads[0] != threading.main_thread().name

    # A small tree: listed on the loop, without a worker thread's hop (docs/performance.md).
    threads.clear()
    assert (await call(reg, "list_files", pattern="*"))[2] == "a.txt"
    assert threads == [threading.main_thread().name]

    # A tree of more directories than the inline steps: the rest of the walk in a thread,
    # and the listing whole.
    dirs = builtin.INLINE_WALK_STEPS * 2
    for n in range(dirs):
        (tmp_path / f"d{n:03}").mkdir()
        (tmp_path / f"d{n:03}" / "f.txt").write_text("x")
    threads.clear()
    listed = (await call(reg, "list_files", pattern="f.txt"))[2].splitlines()
    assert listed == [f"d{n:03}/f.txt" for n in range(dirs)]
    on_loop = [t for t in threads if t == threading.main_thread().name]
    assert 0 < len(on_loop) <= builtin.INLINE_WALK_STEPS
    assert len(threads) - len(on_loop) >= dirs - builtin.INLINE_WALK_STEPS


async def test_a_listing_of_many_names_in_one_directory_leaves_the_loop(tmp_path: Path) -> None:
    """One directory of many files is many steps too (a step per WALK_STEP_NAMES names)."""
    import threading

    from nexus_runner.tools import builtin, stepped

    names = builtin.WALK_STEP_NAMES * (builtin.INLINE_WALK_STEPS + 2)
    for n in range(names):
        (tmp_path / f"f{n:05}.txt").touch()
    hops: list[str] = []
    real_to_thread = stepped.asyncio.to_thread

    async def recording_to_thread(fn: Any, /, *args: Any) -> Any:
        hops.append(threading.current_thread().name)
        return await real_to_thread(fn, *args)

    reg = make_registry(tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stepped.asyncio, "to_thread", recording_to_thread)
        out = (await call(reg, "list_files", pattern="*.txt", limit=names + 1))[2].splitlines()
    assert out == [f"f{n:05}.txt" for n in range(names)]
    assert len(hops) == 1


async def test_search_files_skips_huge_files_and_says_so(tmp_path: Path) -> None:
    from nexus_runner.tools.builtin import MAX_SEARCH_FILE_BYTES

    reg = make_registry(tmp_path)
    (tmp_path / "big.log").write_text("needle\n" * (MAX_SEARCH_FILE_BYTES // 7 + 1))
    (tmp_path / "small.txt").write_text("a needle here\n")
    _, ok, out = await call(reg, "search_files", pattern="needle")
    assert ok
    assert "small.txt:1: a needle here" in out
    assert "big.log:" not in out
    assert "not searched" in out
    assert "big.log" in out


async def test_path_escapes_are_refused_before_running(tmp_path: Path) -> None:
    reg = make_registry(tmp_path)
    action, _, reason = await call(reg, "read_file", path="../../etc/passwd")
    assert action == "refuse"
    assert "'..'" in reason
    action, _, _ = await call(reg, "run_shell", command="ls", cwd="/")
    assert action == "refuse"


async def test_ungranted_tools_and_bad_arguments(tmp_path: Path) -> None:
    reg = make_registry(tmp_path, ["read_file"], Permissions())
    names = [s["function"]["name"] for s in reg.specs()]
    assert names == ["read_file", "finish"]
    action, _, reason = await call(reg, "write_file", path="a", content="b")
    assert action == "refuse"
    assert "not granted" in reason
    assert reg.decide("read_file", "{not json").action == "invalid"
    bad = reg.decide("read_file", json.dumps({"path": "a", "bogus": 1}))
    assert bad.action == "invalid"
    assert "bogus" in bad.reason


async def test_schemas_come_from_the_models(tmp_path: Path) -> None:
    spec = make_registry(tmp_path, ["edit_file"]).specs()[0]["function"]
    assert spec["parameters"]["required"] == ["path", "old", "new"]
    assert spec["parameters"]["additionalProperties"] is False
    assert "exact" in spec["description"]


async def test_commit_and_push_permissions(tmp_path: Path) -> None:
    reg = make_registry(tmp_path, ALL, Permissions(can_commit=False))
    assert (await call(reg, "git_commit", message="m"))[0] == "refuse"
    assert (await call(reg, "run_shell", command="git commit -am x"))[0] == "refuse"
    assert (await call(reg, "run_shell", command="git push origin HEAD"))[0] == "refuse"


async def test_destructive_and_gated_calls_need_approval(tmp_path: Path) -> None:
    reg = make_registry(tmp_path, ALL, Permissions(approval_required_tools=["write_file"]))
    assert reg.decide("run_shell", json.dumps({"command": "rm -rf /"})).action == "approve"
    gated = reg.decide("write_file", json.dumps({"path": "a", "content": ""}))
    assert gated.action == "approve"


async def test_shell_output_cap_exit_code_and_timeout(tmp_path: Path) -> None:
    reg = make_registry(tmp_path)
    _, ok, out = await call(reg, "run_shell", command="echo hi; exit 3")
    assert not ok
    assert "hi" in out
    assert "exit code 3" in out
    _, ok, out = await call(reg, "run_shell", command="yes | head -c 5000")
    assert ok
    assert "[output truncated]" in out
    started = time.monotonic()
    _, ok, out = await call(reg, "run_shell", command="sleep 30", timeout=0.3)
    assert not ok
    assert "timed out" in out
    assert time.monotonic() - started < 5


async def test_shell_env_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    _, ok, out = await call(make_registry(tmp_path), "run_shell", command="env")
    assert ok
    assert "sk-secret" not in out


def _dead(pid: int) -> bool:
    """Gone, or a zombie (dead for our purposes; it may be reaped between the two looks)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except (ProcessLookupError, FileNotFoundError):
        return True


async def _start_shell_with_child(tmp_path: Path) -> tuple[asyncio.Task[Any], int]:
    """run_process a shell that leaves `sleep 60` running in the background; return the task
    and the background child's pid once the shell has written it."""
    pidfile = tmp_path / "pid"
    task = asyncio.create_task(
        run_process(
            ["bash", "-c", f"sleep 60 & echo $! > {pidfile}; wait"],
            cwd=tmp_path,
            timeout=60,
            output_cap=100,
        )
    )
    await eventually(
        lambda: pidfile.exists() and pidfile.read_text().strip(),
        interval=0.01,
        what="the grandchild's pid written",
    )
    return task, int(pidfile.read_text())


async def _until_dead(pid: int) -> None:
    await eventually(lambda: _dead(pid), within=5, what="the grandchild dead after cancellation")


async def test_cancel_while_the_process_is_being_started_kills_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # asyncio may still be connecting the pipes when the task is cancelled; the process
    # already runs by then. Hold the start there, as a busy machine does.
    hold = asyncio.Event()
    create = asyncio.create_subprocess_exec

    async def slow_start(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        proc = await create(*args, **kwargs)
        await hold.wait()
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", slow_start)
    task, child = await _start_shell_with_child(tmp_path)
    task.cancel()
    await asyncio.sleep(0)  # the cancellation reaches run_process while the start is held
    hold.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until_dead(child)


async def test_cancel_kills_the_process_group(tmp_path: Path) -> None:
    task, child = await _start_shell_with_child(tmp_path)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until_dead(child)


async def test_a_tool_has_its_own_group_in_the_runners_session(tmp_path: Path) -> None:
    # Its own group, so cancelling it reaches only it; the runner's session, so that when the
    # runner dies the runtime still finds (and kills) it and its children by session id.
    task, child = await _start_shell_with_child(tmp_path)
    try:
        assert os.getsid(child) == os.getsid(0)
        assert os.getpgid(child) != os.getpgid(0)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await _until_dead(child)


def test_test_command_detection(tmp_path: Path) -> None:
    assert detect_test_command(tmp_path) is None
    (tmp_path / "go.mod").write_text("module x")
    assert detect_test_command(tmp_path) == "go test ./..."
    (tmp_path / "pyproject.toml").write_text("")
    assert detect_test_command(tmp_path) == "python -m pytest -q"
    (tmp_path / "Makefile").write_text("test:\n\ttrue\n")
    assert detect_test_command(tmp_path) == "make test"


async def test_git_tools(tmp_path: Path) -> None:
    reg = make_registry(tmp_path)
    await reg.ctx.git.run("init", "-q", "-b", "main")
    (tmp_path / "a.txt").write_text("one\n")
    _, ok, out = await call(reg, "git_commit", message="first")
    assert ok, out
    assert reg.ctx.commits
    (tmp_path / "a.txt").write_text("two\n")
    assert "+two" in (await call(reg, "git_diff"))[2]
    assert "a.txt" in (await call(reg, "git_status"))[2]
