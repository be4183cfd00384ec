"""The guard's hard refusals of a built-in call, before any dial or hook: paths that leave the
workspace, commits the run may not make, pushes from the shell, reach beyond the run."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from nexus_events.events.specs import Permissions, ToolGrant

from nexus_runner.errors import ToolError
from nexus_runner.guard.shell import classify
from nexus_runner.tools.args import DelegateArgs, RememberArgs, ToolArgs

if TYPE_CHECKING:
    from nexus_runner.tools.context import ToolContext

# Argument fields holding workspace paths, checked before a call is even announced.
_PATH_FIELDS = ("path", "cwd")
_GIT_PUSH = re.compile(r"\bgit\b[^;&|]*\bpush\b")
_GIT_COMMIT = re.compile(r"\bgit\b[^;&|]*\bcommit\b")
NO_COMMIT = "this run is not permitted to commit"
NO_PUSH = "pushing is done by the runner when the run finishes, not from the shell"


def path_refusal(args: ToolArgs, ctx: ToolContext) -> str | None:
    """A path argument that does not resolve inside the workspace."""
    for attr in _PATH_FIELDS:
        value = getattr(args, attr, None)
        if isinstance(value, str):
            try:
                ctx.workspace.resolve(value)
            except ToolError as exc:  # PathEscape, or any failure on the way
                return str(exc)
    return None


def reach_refusal(args: ToolArgs, ctx: ToolContext, granted: dict[str, ToolGrant]) -> str | None:
    """Tools that reach beyond the run: only into its own memory scopes, only to the agents
    its definition allows."""
    if isinstance(args, RememberArgs) and ctx.memory is not None:
        try:  # a run writes only into its own scopes: refused before anything is sent
            ctx.memory.scopes.resolve(args.scope)
        except ToolError as exc:
            return str(exc)
    if isinstance(args, DelegateArgs):
        # The definition's allow-list: `tools: [{name: delegate, options: {agents: [..]}}]`.
        allowed = granted["delegate"].options.get("agents")
        if isinstance(allowed, list) and args.agent not in allowed:
            return f"this agent may delegate only to: {', '.join(map(str, allowed)) or 'none'}"
    return None


def shell_git_refusal(command: str, ctx: ToolContext, permissions: Permissions) -> str | None:
    """A shell command that pushes, or commits when the run may not."""
    # On the parse tree too: `gi''t push` is a push; the regexes catch what the parser cannot
    # parse.
    git = classify(command, ctx.workspace.root).git
    if _GIT_PUSH.search(command) or "push" in git:
        return NO_PUSH
    if (_GIT_COMMIT.search(command) or "commit" in git) and not permissions.can_commit:
        return NO_COMMIT
    return None


def hard_refusal(
    name: str,
    args: ToolArgs,
    ctx: ToolContext,
    permissions: Permissions,
    granted: dict[str, ToolGrant],
) -> str | None:
    """The first hard refusal of a validated built-in call, in this order: paths, commit
    permission, reach, then the shell's git."""
    refused = path_refusal(args, ctx)
    if refused is not None:
        return refused
    if name == "git_commit" and not permissions.can_commit:
        return NO_COMMIT
    refused = reach_refusal(args, ctx, granted)
    if refused is not None:
        return refused
    command = getattr(args, "command", None)
    if name == "run_shell" and isinstance(command, str):
        return shell_git_refusal(command, ctx, permissions)
    return None
