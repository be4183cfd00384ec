"""Paths opened beneath the workspace (nexus_runner.beneath) through the file tools and the
sandbox's tokens: hard links refused, globs matched on the path actually opened, every
failure on the way a tool result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from nexus_events.events.specs import Permissions, SandboxTool, ToolGrant

from nexus_runner.git import Author, Git
from nexus_runner.sandbox import StateCap
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.workspace import Workspace

FILE_TOOLS = ["read_file", "write_file", "edit_file", "list_files", "search_files"]
JS_IO = """
async function run(args) {
  if (args.op === "read") return nexus.workspace.read(args.path);
  nexus.workspace.write(args.path, args.text || "");
  return "wrote";
}
"""


def registry(
    root: Path,
    caps: list[str] | None = None,
    tools: list[SandboxTool] | None = None,
    **ctx: Any,
) -> ToolRegistry:
    ws = Workspace(root)
    context = ToolContext(
        workspace=ws,
        git=Git(ws.root, Author("a", "a@x")),
        shell_timeout=5,
        output_cap=10_000,
        **ctx,
    )
    js = SandboxTool(
        name="js_io",
        description="reads or writes a file",
        parameters={"type": "object"},
        source=JS_IO,
        capabilities=caps or ["workspace:read:*", "workspace:write:*"],
    )
    return ToolRegistry(
        [ToolGrant(name=t) for t in FILE_TOOLS],
        Permissions(auto_approve="all_but_destructive"),
        context,
        sandbox_tools=tools or [js],
    )


async def call(reg: ToolRegistry, name: str, **args: Any) -> tuple[bool, str]:
    """(ok, what the model reads): a refusal before running counts as not ok."""
    decision = reg.decide(name, json.dumps(args))
    if decision.action != "run":
        return False, decision.reason
    outcome = await reg.execute(decision)
    return outcome.ok, outcome.output


def layout(tmp_path: Path) -> tuple[Path, Path]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "src").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("OUTSIDE SECRET\n")
    (ws / "secret.txt").write_text("workspace secret\n")
    (ws / "src" / "real.txt").write_text("real\n")
    return ws, outside


async def test_a_hard_link_to_an_outside_file_is_refused_by_file_tools_and_js(
    tmp_path: Path,
) -> None:
    ws, outside = layout(tmp_path)
    os.link(outside / "secret.txt", ws / "src" / "linked.txt")
    reg = registry(ws)
    attempts = [
        await call(reg, "read_file", path="src/linked.txt"),
        await call(reg, "write_file", path="src/linked.txt", content="overwritten\n"),
        await call(reg, "edit_file", path="src/linked.txt", old="OUTSIDE", new="PWNED"),
        await call(reg, "search_files", pattern="SECRET"),
        await call(reg, "js_io", op="read", path="src/linked.txt"),
        await call(reg, "js_io", op="write", path="src/linked.txt", text="overwritten\n"),
    ]
    for ok, output in attempts[:3] + attempts[4:]:
        assert not ok
        assert "2 hard links: refused" in output
    assert "OUTSIDE" not in attempts[3][1]  # search skips it
    assert (outside / "secret.txt").read_text() == "OUTSIDE SECRET\n"


async def test_a_read_token_cannot_reach_past_its_glob_by_a_link_or_dotdot(tmp_path: Path) -> None:
    ws, outside = layout(tmp_path)
    (ws / "src" / "to_secret.txt").symlink_to("../secret.txt")  # inside, outside the glob
    (ws / "src" / "out").symlink_to(outside)  # outside the workspace
    (ws / "src" / "abs.txt").symlink_to(outside / "secret.txt")
    (ws / "src" / "alias.txt").symlink_to("real.txt")  # inside the glob: followed
    reg = registry(ws, ["workspace:read:src/**"])
    ok, output = await call(reg, "js_io", op="read", path="src/to_secret.txt")
    assert not ok
    assert "missing capability workspace:read:secret.txt" in output
    for path, says in [
        ("src/../secret.txt", "'..' is not allowed"),
        ("src/out/secret.txt", "resolves outside the workspace"),
        ("src/abs.txt", "resolves outside the workspace"),
    ]:
        ok, output = await call(reg, "js_io", op="read", path=path)
        assert not ok
        assert says in output
        assert "SECRET" not in output
    assert await call(reg, "js_io", op="read", path="src/alias.txt") == (True, "real\n")


async def test_links_are_resolved_beneath_the_root_and_git_stays_off_limits(
    tmp_path: Path,
) -> None:
    ws, _ = layout(tmp_path)
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "gitdir").symlink_to(".git")
    (ws / "docs").symlink_to("src")
    reg = registry(ws)
    ok, output = await call(reg, "read_file", path="gitdir/config")
    assert not ok
    assert "inside .git" in output
    ok, output = await call(reg, "write_file", path="docs/new.txt", content="via link\n")
    assert ok, output
    assert (ws / "src" / "new.txt").read_text() == "via link\n"
    assert await call(reg, "read_file", path="docs/real.txt") == (True, "real\n")


async def test_list_and_search_never_follow_a_link_out(tmp_path: Path) -> None:
    ws, outside = layout(tmp_path)
    (ws / "src" / "out").symlink_to(outside)
    (ws / "src" / "secret_link.txt").symlink_to(outside / "secret.txt")
    reg = registry(ws)
    ok, listing = await call(reg, "list_files", path="src")
    assert ok
    assert "secret.txt" not in listing.replace("secret_link.txt", "")
    ok, found = await call(reg, "search_files", pattern="SECRET")
    assert ok
    assert found == "(no matches)"


async def test_every_os_error_on_the_way_is_a_tool_result(tmp_path: Path) -> None:
    ws, _ = layout(tmp_path)
    (ws / "loop").symlink_to("loop")
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    (ws / "fifo").mkdir()
    os.mkfifo(ws / "fifo" / "pipe")
    reg = registry(ws)
    cases = [
        ("read_file", {"path": "loop"}, "too many levels of symbolic links"),
        ("write_file", {"path": "a/x.txt", "content": "x"}, "too many levels of symbolic links"),
        ("read_file", {"path": "secret.txt/x"}, "not a directory"),
        ("write_file", {"path": "secret.txt/x", "content": "x"}, "not a directory"),
        ("list_files", {"path": "secret.txt"}, "not a directory"),
        ("read_file", {"path": "src"}, "is a directory"),
        ("write_file", {"path": "src", "content": "x"}, "is a directory"),
        ("read_file", {"path": "fifo/pipe"}, "not a regular file"),
        ("read_file", {"path": "nope/x.txt"}, "no such file or directory"),
        ("edit_file", {"path": "nope.txt", "old": "a", "new": "b"}, "no such file or directory"),
        ("js_io", {"op": "read", "path": "loop"}, "too many levels of symbolic links"),
        ("js_io", {"op": "read", "path": "secret.txt/x"}, "not a directory"),
    ]
    for tool, args, says in cases:
        ok, output = await call(reg, tool, **args)
        assert not ok, (tool, args, output)
        assert says in output, (tool, args, output)


def test_a_directory_without_permissions_is_a_tool_result(tmp_path: Path) -> None:
    """EACCES on a 000 directory. Root ignores modes (CAP_DAC_OVERRIDE), so as root the check
    runs in a child without capabilities (setpriv drops the bounding set)."""
    ws, _ = layout(tmp_path)
    (ws / "locked").mkdir()
    (ws / "locked" / "f.txt").write_text("x\n")
    (ws / "locked").chmod(0)
    script = textwrap.dedent(
        f"""
        import asyncio, json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_beneath import call, registry
        from pathlib import Path

        async def main():
            reg = registry(Path({str(ws)!r}))
            out = [await call(reg, "read_file", path="locked/f.txt"),
                   await call(reg, "write_file", path="locked/g.txt", content="x"),
                   await call(reg, "js_io", op="read", path="locked/f.txt")]
            print(json.dumps(out))

        asyncio.run(main())
        """
    )
    prefix = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"] if os.geteuid() == 0 else []
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        (ws / "locked").chmod(0o755)
    assert done.returncode == 0, done.stderr
    for ok, output in json.loads(done.stdout):
        assert not ok
        assert "permission denied" in output
    assert not (ws / "locked" / "g.txt").exists()


async def test_the_sandbox_state_is_capped_run_wide_in_keys_and_bytes(tmp_path: Path) -> None:
    source = """
    async function run(args) {
      for (let i = 0; i < args.n; i++) nexus.state.set(args.prefix + i, args.value);
      return "set";
    }
    """
    fill = SandboxTool(
        name="fill",
        description="fills the state",
        parameters={"type": "object"},
        source=source,
        capabilities=["state:write:*"],
    )
    ws, _ = layout(tmp_path)
    reg = registry(ws, tools=[fill], state_cap=StateCap(keys=10, bytes=2_000))
    # Across calls: 6 keys, then 6 more pass the run's 10 (each call is under its own limits).
    assert await call(reg, "fill", n=6, prefix="a", value="v") == (True, "set")
    ok, output = await call(reg, "fill", n=6, prefix="b", value="v")
    assert not ok
    assert "state limit of 10 keys reached" in output
    assert len(reg._host_env().state) == 10
    # Overwriting a key is not a new key; bytes are counted over the run (keys + JSON values).
    ok, output = await call(reg, "fill", n=3, prefix="a", value="x" * 700)
    assert not ok
    assert "state limit of 2000 bytes reached" in output
    env = reg._host_env()
    assert env.state_bytes == sum(len(k) + len(v) for k, v in env.state.items())
    assert env.state_bytes <= 2_000


async def test_a_token_tells_nothing_about_paths_outside_its_glob(tmp_path: Path) -> None:
    """Missing or not: outside the glob, the answer is the missing token, never whether the
    file exists."""
    ws, _ = layout(tmp_path)
    reg = registry(ws, ["workspace:read:src/**"])
    for path in ("secret.txt", "nope.txt", "nope/deeper.txt", "secret.txt/x"):
        ok, output = await call(reg, "js_io", op="read", path=path)
        assert not ok
        assert f"missing capability workspace:read:{path}" in output, output
    ok, output = await call(reg, "js_io", op="read", path="src/nope.txt")
    assert not ok
    assert "src/nope.txt: no such file or directory" in output


async def test_refused_and_failed_calls_hold_no_descriptor(tmp_path: Path) -> None:
    """An agent repeating a refused call must not run the runner out of file descriptors."""
    ws, outside = layout(tmp_path)
    (ws / "out").symlink_to(outside)
    reg = registry(ws)
    open_fds = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        for path in ("../x", "out/secret.txt", "secret.txt/x", "nope/x", ".git/config"):
            assert not (await call(reg, "read_file", path=path))[0]
            assert not (await call(reg, "js_io", op="read", path=path))[0]
    assert len(os.listdir("/proc/self/fd")) <= open_fds + 5  # the sandbox thread's own
