"""The `nexus` command: the root callback (shared options) and every command group."""

from __future__ import annotations

import logging
import os

import typer

from nexus_cli.commands import (
    agents,
    approvals,
    board,
    budgets,
    console,
    context,
    dev,
    dlq,
    doctor,
    evals,
    flow_runs,
    flows,
    lab_runs,
    mcp,
    memory,
    pair,
    plane,
    projections,
    run_control,
    run_diff,
    run_events,
    runs,
    schedules,
    skills,
    usage,
)
from nexus_cli.options import DEFAULT_TIMEOUT, ContextOpt, Globals, NatsUrlOpt, TimeoutOpt

# The bus logs reconnects and closes as warnings for services; a CLI user needs none of them:
# failures reach the user as one error line and an exit code.
logging.getLogger("nexus_events").setLevel(logging.ERROR)

app = typer.Typer(
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


app.add_typer(dev.app, name="dev")
app.add_typer(agents.app, name="agents")
app.add_typer(skills.app, name="skills")
app.add_typer(flows.app, name="flows")  # definitions; `flow` (singular) runs them
app.add_typer(board.task_app, name="task")
app.add_typer(dlq.app, name="dlq")
app.add_typer(memory.app, name="memory")
app.add_typer(mcp.app, name="mcp")
app.add_typer(console.app, name="console")
app.add_typer(projections.app, name="projections")
app.add_typer(context.app, name="context")
app.add_typer(plane.app, name="plane")
app.add_typer(pair.app, name="pair")
app.add_typer(approvals.app, name="approvals")
app.add_typer(flow_runs.app, name="flow")
app.add_typer(schedules.app, name="schedule")
app.add_typer(evals.app, name="eval")
app.add_typer(budgets.app, name="budgets")
# `nexus --help` lists commands in registration order: run, ps, attach, events, logs,
# cancel, approve, deny, then the lab's replay, fork, golden and diff.
runs.register(app)
run_events.register(app)
run_control.register(app)
lab_runs.register(app)
run_diff.register(app)
board.register(app)
doctor.register(app)
usage.register(app)
