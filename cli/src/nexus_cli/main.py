"""The `nexus` command: the root callback (shared options) and every command group."""

from __future__ import annotations

import logging
import os

import typer
from typer import _click

from nexus_cli.lazy_group import LazyCommand, LazyGroup, load_command
from nexus_cli.options import DEFAULT_TIMEOUT, ContextOpt, Globals, NatsUrlOpt, TimeoutOpt

# The bus logs reconnects and closes as warnings for services; a CLI user needs none of them:
# failures reach the user as one error line and an exit code.
logging.getLogger("nexus_events").setLevel(logging.ERROR)

# Every command of `nexus`, in the order `nexus --help` lists them: the top-level commands
# (run, ps, attach, events, logs, cancel, approve, deny, the lab's replay, fork, golden and
# diff, ...), then the command groups. A command's module is imported when the command runs,
# so `nexus --help` and `nexus ps` load only what they use (issue 41);
# cli/tests/unit/test_lazy_commands.py checks this table against the commands themselves.
COMMANDS = (
    LazyCommand(
        "run",
        "runs",
        "register",
        "Request a run of AGENT and print its id; --follow shows it live (the default on a\n"
        "terminal) and exits 0 if it completed, 1 if it failed, was cancelled or timed out.",
    ),
    LazyCommand("ps", "runs", "register", "Runs, newest first: the live ones, or all with --all."),
    LazyCommand(
        "attach",
        "runs",
        "register",
        "A snapshot of the run: status, phase, timings, last decision, recent events, result.",
    ),
    LazyCommand(
        "events",
        "run_events",
        "register",
        "The run's events from NEXUS_RUNS; -f keeps following until the run ends.",
    ),
    LazyCommand(
        "logs",
        "run_events",
        "register",
        "The run's log lines from NEXUS_LOGS; -f follows them until the run ends.",
    ),
    LazyCommand(
        "cancel",
        "run_control",
        "register",
        "Ask the run to stop (cancel_requested); --wait until it has (exit 0 once ended).",
    ),
    LazyCommand(
        "approve", "run_control", "register", "Approve a gated tool call the run is waiting on."
    ),
    LazyCommand("deny", "run_control", "register", "Deny a gated tool call the run is waiting on."),
    LazyCommand(
        "replay",
        "lab_runs",
        "register",
        "Run RUN's task again, served RUN's recorded replies while the requests match;\n"
        "prints the new run id, and with --wait its first divergence (exit 0 once completed).",
    ),
    LazyCommand(
        "fork",
        "lab_runs",
        "register",
        "A new run with RUN's conversation and workspace up to turn N, then live; prints its\n"
        "id, and with --wait follows it to its end (exit 0 if it completed).",
    ),
    LazyCommand(
        "golden",
        "lab_runs",
        "register",
        "Mark a completed run golden (an eval case, docs/lab.md), or --unmark it.",
    ),
    LazyCommand(
        "diff",
        "run_diff",
        "register",
        "Two runs side by side: per turn the tool calls and whether their results match, then\n"
        "turns, tool calls, tokens, cost, wall time and outcome with B's difference from A.",
    ),
    LazyCommand(
        "board",
        "board",
        "register",
        "The board: one column per state, each task with its current run and its flow run\n"
        "(flow and current step; a note instead when the flows service is not running).",
    ),
    LazyCommand(
        "doctor", "doctor", "register", "Check everything a run needs; exit 4 if anything failed."
    ),
    LazyCommand(
        "usage",
        "usage",
        "register",
        "Runs, calls, tokens, cost and wall time grouped by one key, costliest first (by\n"
        "day: oldest first), and the total of every run the filters keep.",
    ),
    LazyCommand(
        "dev",
        "dev",
        "app",
        "The embedded dev stack: nats-server, PostgreSQL, core, memory, scheduler.",
    ),
    LazyCommand(
        "agents", "agents", "app", "Agent definitions: apply from YAML, list, show, history."
    ),
    LazyCommand("skills", "skills", "app", "Skills: apply from markdown, list, show."),
    # definitions; `flow` (singular) runs them
    LazyCommand(
        "flows", "flows", "app", "Flow definitions: apply from YAML, list, show, history, remove."
    ),
    LazyCommand("task", "board", "task_app", "Tasks on the board: create, list."),
    LazyCommand(
        "dlq", "dlq", "app", "Dead letters: list, show, replay onto their original subject."
    ),
    LazyCommand(
        "memory", "memory", "app", "Long-term memory: add, search, forget, list, consolidate."
    ),
    LazyCommand(
        "mcp",
        "mcp",
        "app",
        "Nexus as an MCP server: `serve` (stdio or HTTP), `token` (a bearer token for HTTP).",
    ),
    LazyCommand("console", "console", "app", "The web console: `token` (a sign-in token)."),
    LazyCommand(
        "projections",
        "projections",
        "app",
        "Projections (agent_runs and board of core; memory): lag, and rebuild from the stream.",
    ),
    LazyCommand(
        "context", "context", "app", "Contexts: where the CLI talks to (the dev stack by default)."
    ),
    LazyCommand(
        "plane", "plane", "app", "Plane, the human-facing board: plane-sync's status and a resync."
    ),
    LazyCommand(
        "pair",
        "pair",
        "app",
        "Chat pairing: who may talk to agents from Slack, Telegram, webhooks.",
    ),
    LazyCommand(
        "approvals", "approvals", "app", "Approvals waiting for a person, and who may decide each."
    ),
    LazyCommand(
        "flow",
        "flow_runs",
        "app",
        "Flow runs: start one (and follow it), list, show, cancel, resume, signal. Flow "
        "definitions: `nexus flows`.",
    ),
    LazyCommand(
        "schedule",
        "schedules",
        "app",
        "Schedules: start an agent run or a flow on a cron, an interval or once.",
    ),
    LazyCommand(
        "eval",
        "evals",
        "app",
        "Evaluations: suites (apply, delete, ls, history) and the lab's eval runs (run, show, "
        "ls-runs).",
    ),
    LazyCommand(
        "budgets", "budgets", "app", "Budgets: apply, delete, ls, show, history (docs/spend.md)."
    ),
)


# `nexus run wake RUN`: `run` is a command taking an AGENT, so its verbs are routed by the
# root group (an agent named like a verb runs with `nexus run -- wake`).
RUN_VERBS = {
    "wake": LazyCommand(
        "wake",
        "run_control",
        "register_wake",
        "Wake a sleeping run now (wake_requested); exit 1 if it does not sleep.",
    ),
}


class _NexusGroup(LazyGroup):
    entries = COMMANDS

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        if len(args) > 1 and args[0] == "run" and args[1] in RUN_VERBS:
            return f"run {args[1]}", load_command(RUN_VERBS[args[1]]), args[2:]
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_NexusGroup,
    name="nexus",
    help="Operate Nexus: the dev stack, agents and skills, runs, the board, memory, dead letters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def root(
    ctx: typer.Context,
    context_name: ContextOpt = None,
    nats_url: NatsUrlOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Config comes from flags, then env (NEXUS_*), then the context file (dev stack default)."""
    ctx.obj = Globals(
        context=context_name,
        nats_url=nats_url or os.environ.get("NEXUS_NATS_URL") or None,
        timeout=timeout,
    )
