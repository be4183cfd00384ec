"""Who publishes and who consumes each event and query of the contract: one declarative table.

The AsyncAPI document (`nexus_events.contract.asyncapi`) turns each entry into `send`/`receive`
operations. `tests/contract/test_roles.py` keeps the table honest: every registered event and
query subject has an entry, and what it says of the deployed services agrees with their NATS
permissions (deploy/nats/render.py) and with the subjects their code builds.

A role of a service that docs/design.md §7 describes but the code does not implement yet is marked
`planned`: the document shows it (so the contract is complete) and says so, and the
permission cross-check skips it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from nexus_events.contract import subjects
from nexus_events.contract.subjects import Family


class Service(StrEnum):
    """A party on the bus: the Nexus services, the `nexus` CLI, its MCP server and operators."""

    CORE = "core"
    SCHEDULER = "scheduler"
    RUNNER = "runner"
    CLI = "cli"
    MEMORY = "memory"
    PLANE_SYNC = "plane-sync"
    CHANNEL_GATEWAY = "channel-gateway"
    FLOWS = "flows"
    # `nexus mcp serve` (docs/mcp.md): coding assistants and IDEs start and watch runs and
    # flows, answer approvals and search memory; deployed as the NATS users mcp-read and
    # mcp-operate (deploy/nats/render.py CLIENTS).
    MCP = "mcp"
    # The web console (docs/console.md): reads what it shows, does what its pages offer.
    CONSOLE = "console"
    # The lab (docs/lab.md): eval runs of suites over agent revisions, graded and reported.
    LAB = "lab"
    # Spend (docs/spend.md): usage rolled up, budgets reserved against before each model call.
    SPEND = "spend"
    # People with the `nats` CLI (admin user): a bare `nats pub` is a valid command
    # (docs/design.md §1.4).
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class Party:
    """One service in one role; `planned` when docs/design.md §7 gives it the role but no code
    does yet."""

    service: Service
    planned: bool = False


def planned(service: Service) -> Party:
    return Party(service, planned=True)


@dataclass(frozen=True, slots=True)
class EventRoles:
    """The publishers and consumers of one event (family, name)."""

    publishers: tuple[Party, ...]
    consumers: tuple[Party, ...]


@dataclass(frozen=True, slots=True)
class QueryRoles:
    """The service answering a request/reply subject and those that ask it."""

    server: Party
    clients: tuple[Party, ...]


CORE, SCHEDULER, RUNNER, CLI = Service.CORE, Service.SCHEDULER, Service.RUNNER, Service.CLI
MEMORY, PLANE = Service.MEMORY, Service.PLANE_SYNC
GATEWAY, OPERATOR = Service.CHANNEL_GATEWAY, Service.OPERATOR
FLOWS, MCP, CONSOLE = Service.FLOWS, Service.MCP, Service.CONSOLE
LAB, SPEND = Service.LAB, Service.SPEND

_CORE, _SCHEDULER, _RUNNER, _CLI = Party(CORE), Party(SCHEDULER), Party(RUNNER), Party(CLI)
_OPERATOR, _MEMORY = Party(OPERATOR), Party(MEMORY)
_PLANE, _GATEWAY = Party(PLANE), Party(GATEWAY)
_FLOWS, _MCP, _CONSOLE = Party(FLOWS), Party(MCP), Party(CONSOLE)
_LAB, _SPEND = Party(LAB), Party(SPEND)

# Core's poison sweeper (nexus_core.poison_sweeper) reads all of NEXUS_INBOX and NEXUS_CHANNELS,
# whose own readers may be absent, and dead-letters what does not decode.
_SWEEPER = _CORE

# Every run event lands in core's projections (agent_runs, board), in `nexus runs watch` and
# in the MCP server's follow_run and resource subscriptions; plane-sync mirrors the lifecycle
# to Plane's agent runs (docs/design.md §5.2 step 9).
_RUN_READERS = (_CORE, _CLI, _PLANE, _MCP, _CONSOLE)
# The scheduler's admission state (nexus_scheduler.service.WATCHED_EVENTS).
_ADMISSION = (*_RUN_READERS, _SCHEDULER)
# Terminal events also end a run's chat thread, feed memory extraction (docs/design.md §7)
# and finish the flow step whose run it was (docs/design.md §6); the lab grades an eval
# case's run on its ending (docs/lab.md).
# Spend settles a run's reservations on its ending (docs/spend.md).
_TERMINAL = (*_ADMISSION, _GATEWAY, _MEMORY, _FLOWS, _LAB, _SPEND)


def _run(publishers: tuple[Party, ...], consumers: tuple[Party, ...]) -> EventRoles:
    return EventRoles(publishers, consumers)


EVENT_ROLES: dict[tuple[Family, str], EventRoles] = {
    # -- runs (NEXUS_RUNS) ---------------------------------------------------------------
    (Family.RUN, "requested"): _run(
        # core re-publishes a `new` request under the id it generates; the scheduler fires
        # schedules; Plane and chat start runs too; a flow's run and map steps (the run id
        # derived from the step, `step_run_id`); an MCP client's start_run.
        # The lab requests its eval cases' runs and a reviewer grader's runs.
        (_CLI, _CORE, _SCHEDULER, _OPERATOR, _PLANE, _GATEWAY, _FLOWS, _MCP, _LAB),
        # The gateway reads `reply_to`: where the run's progress is posted. Spend reads a
        # flow's labels (flow, flow_run_id): the run's scopes.
        (*_RUN_READERS, _GATEWAY, _SPEND),
    ),
    # Spend reads the run's team, agent revision and model.
    (Family.RUN, "prepared"): _run((_CORE,), (*_ADMISSION, _RUNNER, _SPEND)),
    (Family.RUN, "queued"): _run((_SCHEDULER,), _ADMISSION),
    (Family.RUN, "dispatched"): _run((_SCHEDULER,), _ADMISSION),
    (Family.RUN, "started"): _run((_RUNNER,), (*_ADMISSION, _GATEWAY)),
    (Family.RUN, "heartbeat"): _run((_RUNNER,), _ADMISSION),
    # A replay or a fork reads its source run's turns, calls and results (docs/lab.md).
    # Spend settles each model call's reservation on its turn (docs/spend.md).
    (Family.RUN, "turn"): _run((_RUNNER,), (*_RUN_READERS, _RUNNER, _SPEND)),
    (Family.RUN, "tool_called"): _run((_RUNNER,), (*_RUN_READERS, _RUNNER)),
    (Family.RUN, "tool_result"): _run((_RUNNER,), (*_RUN_READERS, _RUNNER)),
    (Family.RUN, "egress"): _run((_RUNNER,), _RUN_READERS),
    # Approvals are relayed to chat and to Plane (elicitation) for a person to answer. A flow's
    # gate step asks the same way, on its gate's run id, and records the decision it read.
    # Spend asks a budget's approvers the same way, on the ask's id (docs/spend.md).
    (Family.RUN, "approval_requested"): _run((_RUNNER, _FLOWS, _SPEND), (*_RUN_READERS, _GATEWAY)),
    (Family.RUN, "approval_decided"): _run((_RUNNER, _FLOWS, _SPEND), (*_RUN_READERS, _GATEWAY)),
    # An answer the approver policy refused (docs/approvals.md), recorded by the surface that
    # refused it: the audit trail `nexus events RUN` shows.
    (Family.RUN, "approval_refused"): _run(
        (_GATEWAY, _PLANE, _CLI, _MCP, _CONSOLE), (_CORE, _CLI, _MCP, _CONSOLE)
    ),
    (Family.RUN, "cancel_requested"): _run(
        # The scheduler cancels the previous run of a schedule (overlap policy); the flows
        # service the live runs of a cancelled flow and a map's runs no longer needed.
        (_CLI, _SCHEDULER, _OPERATOR, _PLANE, planned(GATEWAY), _FLOWS, _MCP, _CONSOLE),
        (*_ADMISSION, _RUNNER),
    ),
    (Family.RUN, "cancelled"): _run((_RUNNER, _SCHEDULER), _TERMINAL),
    (Family.RUN, "completed"): _run((_RUNNER,), _TERMINAL),
    # core fails a run it cannot assemble, the scheduler one it cannot start.
    (Family.RUN, "failed"): _run((_RUNNER, _CORE, _SCHEDULER), _TERMINAL),
    (Family.RUN, "timed_out"): _run((_SCHEDULER,), _TERMINAL),
    (Family.RUN, "lost"): _run((_SCHEDULER,), _TERMINAL),
    # Resume (docs/resume.md): the scheduler starts attempt n+1 of a run whose runner died; the
    # runner of an older attempt that is still alive stops on it; chat says so in the thread.
    (Family.RUN, "resuming"): _run((_SCHEDULER,), (*_ADMISSION, _RUNNER, _GATEWAY)),
    (Family.RUN, "resumed"): _run((_RUNNER,), _RUN_READERS),
    # Attempt n+1 restores the last checkpoint and redoes the condensations (and the
    # transcript holds the same), so the runner reads its run's as well.
    (Family.RUN, "checkpointed"): _run((_RUNNER,), (*_RUN_READERS, _RUNNER)),
    (Family.RUN, "condensed"): _run((_RUNNER,), (*_RUN_READERS, _RUNNER, _SPEND)),
    # issue 35: an MCP server of the run that could not start, and why.
    (Family.RUN, "mcp_server_unavailable"): _run((_RUNNER,), _RUN_READERS),
    # The lab (docs/lab.md): a replay's first divergence from its recording; a person marks
    # a finished run golden (core's agent_runs shows it; the lab takes it as an eval case).
    (Family.RUN, "diverged"): _run((_RUNNER,), _RUN_READERS),
    (Family.RUN, "golden_marked"): _run((_CLI, _OPERATOR), (_CORE, _CLI, _CONSOLE)),
    # Budgets (docs/spend.md): a run paused on a reached budget gives its slot back to the
    # scheduler until it goes on.
    (Family.RUN, "budget_paused"): _run((_RUNNER,), _ADMISSION),
    (Family.RUN, "budget_resumed"): _run((_RUNNER,), _ADMISSION),
    # Sleep (docs/resume.md): an attempt that ended to sleep gives its runner and slot back;
    # the scheduler starts the next attempt at the wake time or on a wake; chat and Plane
    # say "sleeping until".
    (Family.RUN, "sleeping"): _run((_RUNNER,), (*_ADMISSION, _GATEWAY)),
    (Family.RUN, "wake_requested"): _run((_CLI, _OPERATOR, _MCP, _CONSOLE), (_SCHEDULER, _CORE)),
    # -- logs (NEXUS_LOGS) ----------------------------------------------------------------
    (Family.LOG, "line"): _run((_RUNNER,), (_CLI, _CONSOLE)),
    # -- transcripts (NEXUS_TRANSCRIPTS): written ahead of each model call, read on resume -
    # A replay or a fork reads its source run's (run_access.source_transcript_replay).
    (Family.TRANSCRIPT, "entry"): _run((_RUNNER,), (_RUNNER,)),
    # -- tasks (NEXUS_TASKS): the board projection ----------------------------------------
    # plane-sync mirrors every task to a work item, and files a work item that asks for a run
    # as a task (external_source "plane"). A subscription to the MCP server's nexus://board
    # is notified on each.
    (Family.TASK, "created"): _run((_CLI, _OPERATOR, _PLANE), (_CORE, _PLANE, _MCP, _CONSOLE)),
    # A person renaming or moving a Plane work item edits its task (updated_by/moved_by
    # "plane:<person>").
    (Family.TASK, "updated"): _run((_OPERATOR, _PLANE), (_CORE, _PLANE, _MCP, _CONSOLE)),
    (Family.TASK, "moved"): _run((_OPERATOR, _PLANE), (_CORE, _PLANE, _MCP, _CONSOLE)),
    (Family.TASK, "deleted"): _run((_OPERATOR, planned(PLANE)), (_CORE, _PLANE, _MCP)),
    # -- catalog (NEXUS_CATALOG): core's catalog projection; `nexus agents history` -------
    (Family.CATALOG, "agent.applied"): _run((_CLI, _OPERATOR), (_CORE, _CLI, _CONSOLE)),
    (Family.CATALOG, "agent.deleted"): _run((_OPERATOR,), (_CORE, _CLI, _CONSOLE)),
    (Family.CATALOG, "skill.applied"): _run((_CLI, _OPERATOR), (_CORE,)),
    (Family.CATALOG, "skill.deleted"): _run((_OPERATOR,), (_CORE,)),
    (Family.CATALOG, "flow.applied"): _run((_CLI, _OPERATOR), (_CORE, _CLI, _CONSOLE)),
    (Family.CATALOG, "flow.deleted"): _run((_CLI, _OPERATOR), (_CORE, _CLI, _CONSOLE)),
    # Core ends an agent's canary on its policy, then applies the agent's next revision.
    (Family.CATALOG, "agent.canary_decided"): _run((_CORE,), (_CORE, _CLI, _CONSOLE)),
    # Eval suites (docs/lab.md): revisioned like agents, read by the lab.
    (Family.CATALOG, "eval.applied"): _run((_CLI, _OPERATOR), (_LAB, _CLI, _CORE)),
    (Family.CATALOG, "eval.deleted"): _run((_CLI, _OPERATOR), (_LAB, _CLI, _CORE)),
    # Budgets (docs/spend.md): revisioned like agents, folded by spend.
    (Family.CATALOG, "budget.applied"): _run((_CLI, _OPERATOR), (_SPEND, _CLI, _CORE)),
    (Family.CATALOG, "budget.deleted"): _run((_CLI, _OPERATOR), (_SPEND, _CLI, _CORE)),
    # -- inbox and route (NEXUS_INBOX) -----------------------------------------------------
    # Peer agents message a run too (sender_kind "agent").
    # A comment on a work item with a running run reaches that run (plane-sync); so does a
    # reply in the run's chat thread (the gateway).
    # A message to a sleeping run wakes it (the scheduler, docs/resume.md "Sleep").
    (Family.INBOX, "message"): _run(
        (_OPERATOR, _PLANE, _GATEWAY, planned(RUNNER)), (_RUNNER, _SWEEPER, _SCHEDULER)
    ),
    # Chat and the CLI claim the decision first (nexus_events.transport.approvals): one answer wins.
    # The flows service reads the decisions on its gates' run ids (FlowWaiting.gate_run_id).
    # Spend reads the decisions on its budget asks' ids.
    (Family.INBOX, "approval_decision"): _run(
        (_CLI, _OPERATOR, _PLANE, _GATEWAY, _MCP, _CONSOLE), (_RUNNER, _SWEEPER, _FLOWS, _SPEND)
    ),
    # Delegation: a run or a chat hands work to an agent; core turns it into a run.
    # The runner's `delegate` tool asks; the gateway checks depth and cycles and requests the
    # child run, then sends the child's ending to the parent's inbox (correlation id).
    (Family.ROUTE, "delegation"): _run((_OPERATOR, _RUNNER), (_GATEWAY, _SWEEPER)),
    # -- schedules (NEXUS_SCHEDULES): the scheduler folds the whole stream ----------------
    # `nexus schedule` defines them and reads the stream back (ls, show).
    # The console pauses and resumes (re-defines) schedules and shows them live. The
    # scheduler defines and removes an agent's own, asked by its run's schedule_* tools.
    (Family.SCHEDULE, "defined"): _run(
        (_CLI, _OPERATOR, _CONSOLE, _SCHEDULER), (_SCHEDULER, _CLI, _CONSOLE)
    ),
    (Family.SCHEDULE, "removed"): _run((_CLI, _OPERATOR, _SCHEDULER), (_SCHEDULER, _CLI, _CONSOLE)),
    (Family.SCHEDULE, "fired"): _run((_SCHEDULER,), (_SCHEDULER, _CLI, _CONSOLE)),
    (Family.SCHEDULE, "missed"): _run((_SCHEDULER,), (_SCHEDULER, _CLI, _CONSOLE)),
    # -- memory (NEXUS_MEMORY) ---------------------------------------------------------------
    # The memory service writes every memory event (after its secret guard); an operator's
    # bare `nats pub` of a `recorded` is guarded too (blocked ones are erased,
    # docs/design.md §10.4).
    (Family.MEMORY, "recorded"): _run((_MEMORY, _OPERATOR), (_MEMORY,)),
    (Family.MEMORY, "forgotten"): _run((_MEMORY, _OPERATOR), (_MEMORY,)),
    (Family.MEMORY, "superseded"): _run((_MEMORY,), (_MEMORY,)),
    (Family.MEMORY, "accessed"): _run((_MEMORY,), (_MEMORY,)),
    (Family.MEMORY, "consolidated"): _run((_MEMORY,), (_MEMORY,)),
    (Family.MEMORY, "extracted"): _run((_MEMORY,), (_MEMORY,)),
    # -- chat channels (NEXUS_CHANNELS) --------------------------------------------------------
    # The gateway publishes verified inbound messages and consumes them (pairing, commands),
    # then sends its `out` intents and records each outcome (`sent`).
    (Family.CHANNEL, "in"): _run((_GATEWAY, _OPERATOR), (_GATEWAY, _SWEEPER)),
    (Family.CHANNEL, "out"): _run((_GATEWAY,), (_GATEWAY, _SWEEPER)),
    (Family.CHANNEL, "sent"): _run((_GATEWAY,), (_OPERATOR, _SWEEPER)),
    # Generic webhooks land here for whoever subscribes to their source (operators, agents);
    # a flow's event wait matches them by source and correlation id.
    (Family.CHANNEL, "webhook"): _run((_GATEWAY,), (_OPERATOR, _SWEEPER, _FLOWS)),
    # The allowlist is event-sourced: the gateway challenges, `nexus pair` decides.
    (Family.CHANNEL, "pairing_requested"): _run((_GATEWAY,), (_GATEWAY, _CLI, _SWEEPER)),
    (Family.CHANNEL, "pairing_approved"): _run((_CLI, _OPERATOR), (_GATEWAY, _CLI, _SWEEPER)),
    (Family.CHANNEL, "pairing_revoked"): _run((_CLI, _OPERATOR), (_GATEWAY, _CLI, _SWEEPER)),
    (Family.CHANNEL, "approval_relayed"): _run((_GATEWAY,), (_OPERATOR, _SWEEPER)),
    # Conversations (docs/channels.md): the gateway records each turn, answer and ending and
    # folds them back (its conversations table is rebuilt from them).
    (Family.CHANNEL, "conversation_turn"): _run((_GATEWAY,), (_GATEWAY, _SWEEPER)),
    (Family.CHANNEL, "conversation_answered"): _run((_GATEWAY,), (_GATEWAY, _SWEEPER)),
    (Family.CHANNEL, "conversation_ended"): _run((_GATEWAY,), (_GATEWAY, _SWEEPER)),
    # -- Plane (NEXUS_PLANE): plane-sync's webhooks in and its writes' intents/outcomes ------
    # Webhooks are filed as received (verified, deduped), then acted on by plane-sync's own
    # consumer; `nexus plane status` reads the write record.
    (Family.PLANE, "webhook_received"): _run((_PLANE,), (_PLANE, _CLI)),
    (Family.PLANE, "write_requested"): _run((_PLANE,), (_CLI, _OPERATOR)),
    (Family.PLANE, "write_succeeded"): _run((_PLANE,), (_CLI, _OPERATOR)),
    (Family.PLANE, "write_failed"): _run((_PLANE,), (_CLI, _OPERATOR)),
    # -- flows (NEXUS_FLOWS): the flows service folds the stream and decides each next step --
    # Started from the CLI, a bare `nats pub`, a schedule, a Plane label or a chat message.
    # plane-sync's mirror reads the request for the flow's task and requester; the gateway for
    # `reply_to`, the thread its progress goes to. Whoever answers a flow gate's approval
    # (the CLI, the MCP server) reads the request and the pinned definition (accepted) for
    # who may decide (nexus_events.transport.approvals).
    (Family.FLOW, "requested"): _run(
        (_CLI, _OPERATOR, _FLOWS, _SCHEDULER, _PLANE, _GATEWAY, _MCP),
        (_FLOWS, _PLANE, _GATEWAY, _MCP, _CONSOLE),
    ),
    # Removing a work item's `flow:<id>` label cancels the flow runs it started; the scheduler
    # cancels the previous flow run of a schedule (overlap cancel_previous).
    (Family.FLOW, "cancel_requested"): _run((_CLI, _OPERATOR, _PLANE, _SCHEDULER), (_FLOWS,)),
    (Family.FLOW, "resume_requested"): _run((_CLI, _OPERATOR), (_FLOWS,)),
    (Family.FLOW, "signal"): _run((_CLI, _OPERATOR), (_FLOWS,)),
    **{
        (Family.FLOW, name): _run((_FLOWS,), (_FLOWS, _CLI, _PLANE, _GATEWAY, _CONSOLE))
        for name in (
            "step_started",
            "step_finished",
            "waiting",
            "resumed",
            "escalated",
        )
    },
    (Family.FLOW, "accepted"): _run((_FLOWS,), (_FLOWS, _CLI, _PLANE, _GATEWAY, _MCP, _CONSOLE)),
    # The scheduler reads a flow schedule's previous flow run's end (overlap policies).
    **{
        (Family.FLOW, name): _run((_FLOWS,), (_FLOWS, _CLI, _SCHEDULER, _PLANE, _GATEWAY, _CONSOLE))
        for name in ("completed", "failed", "cancelled")
    },
    # -- eval runs (NEXUS_EVALS): the lab folds the stream into its reports -----------------
    # The lab re-publishes a request on the token `new` under the id it makes up.
    (Family.EVAL, "requested"): _run((_CLI, _OPERATOR, _LAB), (_LAB, _CLI)),
    **{
        (Family.EVAL, name): _run((_LAB,), (_LAB, _CLI, _CONSOLE))
        for name in ("accepted", "case_started", "case_graded", "completed", "failed")
    },
    # -- budgets (NEXUS_BUDGETS): spend's asks, extensions and thresholds (docs/spend.md) --
    # plane-sync comments on a task whose budget passed its warning share; the gateway reads
    # an ask's approvers from its ask_opened when someone answers it in chat (plane-sync does
    # not mirror asks: docs/plane.md).
    (Family.BUDGET, "ask_opened"): _run((_SPEND,), (_SPEND, _CLI, _CONSOLE, _GATEWAY)),
    **{
        (Family.BUDGET, name): _run((_SPEND,), (_SPEND, _CLI, _CONSOLE))
        for name in ("extended", "ask_closed")
    },
    (Family.BUDGET, "threshold_crossed"): _run((_SPEND,), (_SPEND, _CLI, _CONSOLE, _PLANE)),
    # -- dead letters (NEXUS_DLQ): every Bus consumer files its own; `nexus dlq` and the MCP
    # server's list_dead_letters read them.
    (Family.DLQ, "dead_letter"): _run(
        (
            _CORE,
            _SCHEDULER,
            _RUNNER,
            _MEMORY,
            _PLANE,
            _GATEWAY,
            _FLOWS,
            _LAB,
            _SPEND,
        ),
        (_CLI, _OPERATOR, _MCP, _CONSOLE),
    ),
}

_CORE_CLIENTS = (_CLI, _OPERATOR)
# The queries behind the MCP server's read tools and resources (deploy/nats/render.py).
_READERS = (*_CORE_CLIENTS, _MCP)

QUERY_ROLES: dict[str, QueryRoles] = {
    # The lab reads a graded run's totals and calls, and a golden run's request.
    subjects.CORE_RUNS_GET: QueryRoles(_CORE, (*_READERS, _CONSOLE, _LAB)),
    subjects.CORE_RUNS_LIST: QueryRoles(_CORE, (*_READERS, _CONSOLE)),
    subjects.CORE_RUNS_EVENTS: QueryRoles(_CORE, (*_READERS, _CONSOLE, _LAB)),
    subjects.CORE_BOARD_GET: QueryRoles(_CORE, (*_READERS, planned(PLANE), _CONSOLE)),
    subjects.CORE_CATALOG_AGENTS_LIST: QueryRoles(_CORE, (*_READERS, _CONSOLE)),
    subjects.CORE_CATALOG_AGENTS_GET: QueryRoles(_CORE, (*_READERS, _CONSOLE, _LAB)),
    subjects.CORE_CATALOG_SKILLS_LIST: QueryRoles(_CORE, (*_CORE_CLIENTS, _CONSOLE)),
    subjects.CORE_CATALOG_SKILLS_GET: QueryRoles(_CORE, (*_CORE_CLIENTS, _CONSOLE)),
    # Core rebuilds its own tables on request: the CLI never writes core's schema.
    subjects.CORE_PROJECTIONS_STATUS: QueryRoles(_CORE, (*_CORE_CLIENTS, _CONSOLE)),
    subjects.CORE_PROJECTIONS_REBUILD: QueryRoles(_CORE, _CORE_CLIENTS),
    # Run assembly asks memory for context (bounded wait, docs/design.md §5.2 steps 1-4).
    subjects.MEMORY_SEARCH: QueryRoles(_MEMORY, (_CORE, *_READERS)),
    # Every write goes through memory's secret guard; a run's `remember` tool writes too, and
    # the MCP server's add_memory (operate).
    subjects.MEMORY_RECORD: QueryRoles(_MEMORY, (*_CORE_CLIENTS, _RUNNER, _MCP)),
    subjects.MEMORY_FORGET: QueryRoles(_MEMORY, _CORE_CLIENTS),
    subjects.MEMORY_LIST: QueryRoles(_MEMORY, _CORE_CLIENTS),
    subjects.MEMORY_CONSOLIDATE: QueryRoles(_MEMORY, _CORE_CLIENTS),
    subjects.MEMORY_REBUILD: QueryRoles(_MEMORY, _CORE_CLIENTS),
    # `nexus plane status|resync`.
    subjects.PLANE_STATUS: QueryRoles(_PLANE, _CORE_CLIENTS),
    subjects.PLANE_RESYNC: QueryRoles(_PLANE, _CORE_CLIENTS),
    # `nexus pair ls|approve|revoke`: the gateway's tables outlive the stream's 7 days.
    subjects.CHANNEL_PAIRINGS: QueryRoles(_GATEWAY, _CORE_CLIENTS),
    # Flow definitions live in core's catalog; the flows service pins a run to a revision.
    subjects.CORE_CATALOG_FLOWS_LIST: QueryRoles(_CORE, (*_READERS, _CONSOLE)),
    subjects.CORE_CATALOG_FLOWS_GET: QueryRoles(_CORE, (*_READERS, _FLOWS, _CONSOLE)),
    subjects.FLOWS_GET: QueryRoles(_FLOWS, (*_CORE_CLIENTS, _CONSOLE)),
    subjects.FLOWS_LIST: QueryRoles(_FLOWS, (*_CORE_CLIENTS, _CONSOLE)),
    # The console's history and cost pages (issue 38).
    subjects.CORE_CATALOG_HISTORY: QueryRoles(_CORE, (*_CORE_CLIENTS, _CONSOLE)),
    subjects.CORE_USAGE_SUMMARY: QueryRoles(_CORE, (*_CORE_CLIENTS, _CONSOLE)),
    # The lab's eval reports (docs/lab.md), rebuilt from NEXUS_EVALS.
    subjects.LAB_EVALS_GET: QueryRoles(_LAB, (*_CORE_CLIENTS, _CONSOLE)),
    subjects.LAB_EVALS_LIST: QueryRoles(_LAB, (*_CORE_CLIENTS, _CONSOLE)),
    # Spend (docs/spend.md): usage and budgets for people; a run's reservation before each
    # model call (its own run id only, run_access); the scheduler's check before dispatch.
    subjects.SPEND_USAGE: QueryRoles(_SPEND, (*_READERS, _CONSOLE)),
    subjects.SPEND_BUDGETS_LIST: QueryRoles(_SPEND, (*_CORE_CLIENTS, _CONSOLE)),
    subjects.SPEND_BUDGETS_GET: QueryRoles(_SPEND, (*_CORE_CLIENTS, _CONSOLE)),
    subjects.SPEND_RUNS: QueryRoles(_SPEND, (*_CORE_CLIENTS, _CONSOLE)),
    subjects.SPEND_RESERVE: QueryRoles(_SPEND, (_RUNNER,)),
    subjects.SPEND_ADMIT: QueryRoles(_SPEND, (_SCHEDULER,)),
    # A run's agent's own schedules, with the schedule_* tools (docs/schedules.md).
    subjects.AGENT_SCHEDULES: QueryRoles(_SCHEDULER, (_RUNNER,)),
    # A warm runner pod answers the hand-off of its slot alone (docs/warm-starts.md).
    subjects.RUNNER_WARM: QueryRoles(_RUNNER, (_SCHEDULER,)),
}
