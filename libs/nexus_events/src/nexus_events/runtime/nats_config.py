"""The NATS server config of every deployment: one user per service, permissions derived from
nexus_events.

The users are those of the service table (`nexus_events.runtime.services`), in its order; `SERVICES`
below says what each may do, and rendering fails while the two name different services. Then
`CLIENTS`: users that no service of the table runs as, the MCP server's identities
(`nexus mcp serve`, docs/mcp.md), and last the operators' `admin`.

`render()` gives a single server's config, or one node's of a JetStream cluster (`Cluster`):
a cluster node's config adds its server name (taken from the node's environment), a `cluster`
block with a route to every node, and lame-duck timings. Compose and Kubernetes mount what
deploy/nats/render.py writes with it; `nexus dev up` renders the same text into its stack home
(nexus_cli.devstack.nats_auth), so the dev stack authenticates as they do.

Passwords are never written here: each is an environment variable of the nats-server process
(``$NEXUS_<USER>_NATS_PASSWORD``, `password_variable`), which nats-server resolves when it
loads the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import (
    BUDGETS,
    CATALOG,
    CHANNELS,
    CHECKPOINTS_BUCKET,
    DLQ,
    EVALS,
    FLOWS,
    INBOX,
    LOGS,
    MEMORY,
    PLANE,
    RUNS,
    SCHEDULES,
    STREAM_OF_FAMILY,
    TASKS,
    TRANSCRIPTS,
)
from nexus_events.contract.subjects import Family
from nexus_events.events.flows import FlowEvent
from nexus_events.runtime import services
from nexus_events.transport.approvals import APPROVALS_BUCKET

ALL_STREAMS = tuple(sorted(set(STREAM_OF_FAMILY.values())))
SCHEDULER_LEASE_BUCKET = "nexus_scheduler"  # SchedulerSettings.lease_bucket
SCHEDULER_SNAPSHOT_BUCKET = "nexus_scheduler_snapshot"  # SchedulerSettings.snapshot_bucket
# The leases that let one of two core (memory) replicas run the projections (docs/cluster.md).
CORE_LEASE_BUCKET = "nexus_core_lease"  # CoreSettings.core_lease_bucket
MEMORY_LEASE_BUCKET = "nexus_memory_lease"  # MemorySettings.memory_lease_bucket
FLOWS_LEASE_BUCKET = "nexus_flows_lease"  # FlowsSettings.flows_lease_bucket
LAB_LEASE_BUCKET = "nexus_lab_lease"  # LabSettings.lab_lease_bucket
SPEND_LEASE_BUCKET = "nexus_spend_lease"  # SpendSettings.spend_lease_bucket
# nats-server's auth callout requests (nexus_scheduler.auth_callout.AUTH_SUBJECT).
AUTH_CALLOUT_SUBJECT = "$SYS.REQ.USER.AUTH"
# The environment variable of the nats-server process holding the callout issuer's public
# account nkey (the scheduler holds its seed: NEXUS_AUTH_CALLOUT_SEED).
AUTH_CALLOUT_ISSUER_VARIABLE = "NEXUS_AUTH_CALLOUT_ISSUER"
# Service users with no static user: they connect through the auth callout.
CALLOUT_USERS = frozenset({"runner"})
# The port routes between cluster nodes use (NATS' default, the Helm chart's too).
CLUSTER_PORT = 6222


@dataclass(frozen=True)
class Access:
    """What one service does on NATS."""

    publishes: tuple[str, ...]  # subjects it publishes events on (stored in streams)
    reads: tuple[str, ...]  # streams it consumes or replays
    ensures_streams: bool = False  # calls nexus_events.contract.streams.ensure_streams at start-up
    serves: tuple[str, ...] = ()  # request/reply subjects it answers (nats.micro)
    requests: tuple[str, ...] = ()  # request/reply subjects it asks
    kv_buckets: tuple[str, ...] = ()
    object_buckets: tuple[str, ...] = ()  # JetStream object stores it reads and writes
    watches_all: bool = False  # lists consumers / stream state of every stream (metrics)
    push_consumers: bool = False  # ordered push consumers (flow control replies)
    erases_from: tuple[str, ...] = ()  # streams it erases single messages from (secret guard)
    # Answers nats-server's auth callout requests (not a query of the contract's table).
    answers_auth_callout: bool = False


def _run(*events: RunEvent) -> tuple[str, ...]:
    return tuple(subjects.run_events_filter(event=e) for e in events)


def _flow(*events: FlowEvent) -> tuple[str, ...]:
    return tuple(subjects.flow_events_filter(event=e) for e in events)


# Families a dead letter's original may be on, which the console's replay publishes to: every
# family a Bus consumer reads (not the DLQ itself, logs or transcripts, which nothing consumes
# through a Bus consumer).
CONSOLE_REPLAYS: tuple[Family, ...] = (
    Family.RUN,
    Family.TASK,
    Family.CATALOG,
    Family.ROUTE,
    Family.MEMORY,
    Family.CHANNEL,
    Family.PLANE,
    Family.FLOW,
)


SERVICES: dict[str, Access] = {
    # Assembly (prepared/failed, re-published requested), catalog apply, projections, queries,
    # and the system metrics (RunMetrics) that core hosts.
    "core": Access(
        publishes=(
            *_run(RunEvent.REQUESTED, RunEvent.PREPARED, RunEvent.FAILED),
            subjects.family_filter(Family.CATALOG),
            subjects.dead_letter("core"),
        ),
        # INBOX and CHANNELS: the poison sweeper (nexus_core.poison_sweeper).
        reads=(RUNS, TASKS, CATALOG, INBOX, CHANNELS),
        ensures_streams=True,
        serves=tuple(s for s in subjects.QUERY_SUBJECTS if s.startswith("nexus.core.")),
        requests=(subjects.MEMORY_SEARCH,),
        watches_all=True,
        kv_buckets=(CORE_LEASE_BUCKET,),  # which replica projects (nexus_events.runtime.leadership)
    ),
    # Admission and dispatch, terminal events it decides, schedule fires, and the cancel
    # request of a schedule's previous run (overlap policy cancel_previous).
    "scheduler": Access(
        publishes=(
            *_run(
                RunEvent.REQUESTED,
                RunEvent.QUEUED,
                RunEvent.DISPATCHED,
                RunEvent.CANCELLED,
                RunEvent.FAILED,
                RunEvent.TIMED_OUT,
                RunEvent.LOST,
            ),
            *_run(RunEvent.CANCEL_REQUESTED, RunEvent.RESUMING),
            *(
                subjects.flow_events_filter(event=e)
                for e in (FlowEvent.REQUESTED, FlowEvent.CANCEL_REQUESTED)
            ),
            subjects.family_filter(Family.SCHEDULE),
            subjects.dead_letter("scheduler"),
        ),
        reads=(RUNS, SCHEDULES, FLOWS, INBOX),  # INBOX: a message wakes a sleeping run
        ensures_streams=True,
        # A run's budgets before it is dispatched (docs/spend.md); a warm pod's hand-off.
        requests=(subjects.SPEND_ADMIT, subjects.RUNNER_WARM),
        # A run's agent's own schedules, asked with the schedule_* tools (docs/schedules.md).
        serves=(subjects.AGENT_SCHEDULES,),
        kv_buckets=(SCHEDULER_LEASE_BUCKET, SCHEDULER_SNAPSHOT_BUCKET),
        answers_auth_callout=True,  # run credentials (nexus_scheduler.auth_callout)
    ),
    # The agent loop. No static user is rendered for it (`CALLOUT_USERS`): each run's runner
    # connects with its run's own credential, which the scheduler's auth callout turns into
    # permissions on that run's subjects alone (nexus_events.contract.run_access). This entry is the
    # union of what any run may do, checked against the contract by tests/deploy.
    "runner": Access(
        publishes=(
            subjects.family_filter(Family.RUN),
            subjects.family_filter(Family.LOG),
            subjects.family_filter(Family.ROUTE),  # the `delegate` tool
            # Its transcript, written ahead of each model call (docs/resume.md).
            subjects.family_filter(Family.TRANSCRIPT),
            subjects.dead_letter("runner"),
        ),
        reads=(RUNS, INBOX, TRANSCRIPTS),
        # The `remember` tool; the reservation before each model call (docs/spend.md); the
        # schedule_* tools (docs/schedules.md).
        requests=(subjects.MEMORY_RECORD, subjects.SPEND_RESERVE, subjects.AGENT_SCHEDULES),
        # A warm pod's hand-off, on its own slot only (run_access.warm_slot_permissions).
        serves=(subjects.RUNNER_WARM,),
        push_consumers=True,
        object_buckets=(CHECKPOINTS_BUCKET,),  # workspace checkpoints
    ),
    # Memory: its projection and secret guard read NEXUS_MEMORY, extraction reads finished
    # runs; it writes every memory event and erases a guarded event someone published by hand.
    "memory": Access(
        publishes=(
            subjects.family_filter(Family.MEMORY),
            subjects.dead_letter("memory"),
        ),
        reads=(MEMORY, RUNS),
        ensures_streams=True,
        serves=tuple(s for s in subjects.QUERY_SUBJECTS if s.startswith("nexus.memory.")),
        erases_from=(MEMORY,),
        kv_buckets=(
            MEMORY_LEASE_BUCKET,
        ),  # which replica projects (nexus_events.runtime.leadership)
    ),
    # plane-sync: mirrors tasks and runs to Plane (reads both), files Plane's webhooks and
    # its writes' intents/outcomes (NEXUS_PLANE), and turns webhooks into run requests,
    # cancel requests, tasks and inbox messages.
    "plane-sync": Access(
        publishes=(
            *_run(RunEvent.REQUESTED, RunEvent.CANCEL_REQUESTED, RunEvent.APPROVAL_REFUSED),
            *(
                subjects.flow_events_filter(event=e)
                for e in (FlowEvent.REQUESTED, FlowEvent.CANCEL_REQUESTED)
            ),
            *(subjects.task_events_filter(event=e) for e in ("created", "updated", "moved")),
            subjects.family_filter(Family.INBOX),
            subjects.family_filter(Family.PLANE),
            subjects.dead_letter("plane-sync"),
        ),
        reads=(RUNS, TASKS, PLANE, FLOWS, BUDGETS),  # BUDGETS: a task's budget warning
        ensures_streams=True,
        serves=(subjects.PLANE_STATUS, subjects.PLANE_RESYNC),
        kv_buckets=(APPROVALS_BUCKET,),  # `/approve` claims the decision like every surface
    ),
    # The channel gateway: verified chat messages and webhooks in, run requests and inbox
    # messages out, replies (intent, outcome) and the pairing challenges; it follows runs it
    # started for their progress and claims approval decisions in the shared KV bucket.
    "channel-gateway": Access(
        publishes=(
            *_run(RunEvent.REQUESTED, RunEvent.APPROVAL_REFUSED),
            *_flow(FlowEvent.REQUESTED),
            subjects.family_filter(Family.INBOX),
            *(
                subjects.channel_events_filter(event=e)
                for e in (
                    "in",
                    "out",
                    "sent",
                    "webhook",
                    "pairing_requested",
                    "approval_relayed",
                    "conversation_turn",
                    "conversation_answered",
                    "conversation_ended",
                )
            ),
            subjects.dead_letter("channel-gateway"),
        ),
        reads=(RUNS, CHANNELS, INBOX, FLOWS, BUDGETS),  # INBOX: delegations; BUDGETS: asks
        ensures_streams=True,
        serves=(subjects.CHANNEL_PAIRINGS,),
        kv_buckets=(APPROVALS_BUCKET,),
    ),
    # Flows: folds NEXUS_FLOWS and decides each next step; requests the runs of run and map
    # steps (and cancels them), asks for a gate's approval on its gate run id and records the
    # decision it reads on that run's inbox; finishes steps on the runs' terminal events and
    # ends event waits on channel webhooks. It pins a flow run to the catalog's definition
    # (core's query) and answers nexus.flows.v1.get|list.
    "flows": Access(
        publishes=(
            subjects.family_filter(Family.FLOW),
            *_run(
                RunEvent.REQUESTED,
                RunEvent.CANCEL_REQUESTED,
                RunEvent.APPROVAL_REQUESTED,
                RunEvent.APPROVAL_DECIDED,
            ),
            subjects.dead_letter("flows"),
        ),
        reads=(FLOWS, RUNS, INBOX, CHANNELS),
        ensures_streams=True,
        serves=(subjects.FLOWS_GET, subjects.FLOWS_LIST),
        requests=(subjects.CORE_CATALOG_FLOWS_GET,),
        kv_buckets=(FLOWS_LEASE_BUCKET,),  # which replica decides (nexus_events.runtime.leadership)
    ),
    # The lab (docs/lab.md): eval runs (NEXUS_EVALS), the runs of their cases and of reviewer
    # graders, suites from the catalog; a graded run's totals and calls, a golden run's
    # request and an agent's revisions from core.
    "lab": Access(
        publishes=(
            subjects.family_filter(Family.EVAL),
            *_run(RunEvent.REQUESTED),
            subjects.dead_letter("lab"),
        ),
        reads=(EVALS, RUNS, CATALOG),
        ensures_streams=True,
        serves=(subjects.LAB_EVALS_GET, subjects.LAB_EVALS_LIST),
        requests=(
            subjects.CORE_RUNS_GET,
            subjects.CORE_RUNS_EVENTS,
            subjects.CORE_CATALOG_AGENTS_GET,
        ),
        kv_buckets=(LAB_LEASE_BUCKET,),  # which replica decides (nexus_events.runtime.leadership)
    ),
    # The web console (docs/console.md): reads every stream it shows (ordered consumers,
    # replays of the DLQ, catalog and schedules) and core's and flows' queries; publishes what
    # its pages offer: a run's cancel and wake, an approval's decision (the claim in the
    # shared bucket, the decision on the run's inbox) or its recorded refusal, a schedule's
    # pause and resume, and the replay of a dead letter to its original subject, which may be
    # on any family a consumer dead-letters from (the console republishes the stored letter's
    # bytes only).
    "console": Access(
        publishes=(
            *_run(RunEvent.CANCEL_REQUESTED, RunEvent.WAKE_REQUESTED, RunEvent.APPROVAL_REFUSED),
            subjects.family_filter(Family.INBOX),
            subjects.family_filter(Family.SCHEDULE),
            *(subjects.family_filter(f) for f in CONSOLE_REPLAYS),
            subjects.dead_letter("console"),
        ),
        reads=(RUNS, LOGS, TASKS, CATALOG, SCHEDULES, FLOWS, DLQ, EVALS, BUDGETS),
        ensures_streams=True,
        requests=(
            *(
                s
                for s in subjects.QUERY_SUBJECTS
                if s.startswith("nexus.core.") and s not in (subjects.CORE_PROJECTIONS_REBUILD,)
            ),
            subjects.FLOWS_GET,
            subjects.FLOWS_LIST,
            subjects.LAB_EVALS_GET,
            subjects.LAB_EVALS_LIST,
            subjects.SPEND_USAGE,
            subjects.SPEND_BUDGETS_LIST,
            subjects.SPEND_BUDGETS_GET,
            subjects.SPEND_RUNS,
        ),
        push_consumers=True,
        kv_buckets=(APPROVALS_BUCKET,),
    ),
    # Spend (docs/spend.md): folds runs (usage, settlement), budgets (catalog) and its own
    # record (NEXUS_BUDGETS); answers reservations, admission checks and usage queries; asks a
    # budget's approvers on the ask's pseudo-run (approval_requested), reads the decision on
    # its inbox, records it (approval_decided) and closes an expired ask (claiming it first).
    "spend": Access(
        publishes=(
            subjects.family_filter(Family.BUDGET),
            *_run(RunEvent.APPROVAL_REQUESTED, RunEvent.APPROVAL_DECIDED),
            subjects.dead_letter("spend"),
        ),
        reads=(RUNS, CATALOG, BUDGETS, INBOX),
        ensures_streams=True,
        serves=tuple(s for s in subjects.QUERY_SUBJECTS if s.startswith("nexus.spend.")),
        kv_buckets=(SPEND_LEASE_BUCKET, APPROVALS_BUCKET),
    ),
}

# What the MCP server may do with a `read` bearer token: core's and memory's read queries, and
# the streams it follows (a run's events for follow_run and resource subscriptions, tasks for
# the board's, flows for a gate approval's requester, dead letters for list_dead_letters).
_MCP_READ_QUERIES = (
    subjects.CORE_RUNS_GET,
    subjects.CORE_RUNS_LIST,
    subjects.CORE_RUNS_EVENTS,
    subjects.CORE_BOARD_GET,
    subjects.CORE_CATALOG_AGENTS_LIST,
    subjects.CORE_CATALOG_AGENTS_GET,
    subjects.CORE_CATALOG_FLOWS_LIST,
    subjects.CORE_CATALOG_FLOWS_GET,
    subjects.MEMORY_SEARCH,
    subjects.SPEND_USAGE,
)
_MCP_READS = (RUNS, TASKS, FLOWS, DLQ)

# Users of the MCP server (docs/mcp.md): each bearer token of its tokens file names the one it
# acts as (`nats_user`). They are no service of the table (nothing runs `python -m` as them)
# and file no dead letters: the server consumes nothing durably. Both are the party `mcp` of
# nexus_events.contract.roles.
CLIENTS: dict[str, Access] = {
    "mcp-read": Access(
        publishes=(),
        reads=_MCP_READS,
        requests=_MCP_READ_QUERIES,
        push_consumers=True,  # ordered consumers on a run's subject (follow, subscriptions)
    ),
    # `operate` also starts runs and flows, cancels and wakes runs, answers approvals (the
    # claim in the shared KV bucket, the decision on the run's inbox, or the refusal the
    # approver policy records) and adds memories through memory's guarded query.
    "mcp-operate": Access(
        publishes=(
            *_run(
                RunEvent.REQUESTED,
                RunEvent.CANCEL_REQUESTED,
                RunEvent.WAKE_REQUESTED,
                RunEvent.APPROVAL_REFUSED,
            ),
            *_flow(FlowEvent.REQUESTED),
            subjects.family_filter(Family.INBOX),
        ),
        reads=_MCP_READS,
        requests=(*_MCP_READ_QUERIES, subjects.MEMORY_RECORD),
        push_consumers=True,
        kv_buckets=(APPROVALS_BUCKET,),
    ),
}
# The party of nexus_events.contract.roles each client user is (tests/contract/test_roles.py).
CLIENT_ROLES: dict[str, str] = {"mcp-read": "mcp", "mcp-operate": "mcp"}


def _stream_api(stream: str) -> list[str]:
    return [
        f"$JS.API.CONSUMER.CREATE.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.INFO.{stream}.>",
        f"$JS.API.CONSUMER.DELETE.{stream}.>",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.>",
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}.>",
        f"$JS.ACK.{stream}.>",
    ]


def permissions(access: Access) -> tuple[list[str], list[str]]:
    """(publish allow, subscribe allow) of one service."""
    # $JS.API.INFO: the account's own limits and usage; readiness asks it to learn whether
    # JetStream has a meta leader (nexus_events.runtime.health.JetStreamProbe).
    pub: list[str] = [*access.publishes, *access.requests, "$JS.API.STREAM.NAMES", "$JS.API.INFO"]
    sub: list[str] = ["_INBOX.>"]
    for stream in access.reads:
        pub += _stream_api(stream)
        sub.append(f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.>")
    if access.ensures_streams:
        for stream in ALL_STREAMS:
            pub += [f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.STREAM.CREATE.{stream}"]
            pub.append(f"$JS.API.STREAM.UPDATE.{stream}")
    if access.watches_all:
        for stream in ALL_STREAMS:
            pub += [f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.CONSUMER.LIST.{stream}"]
    for bucket in access.kv_buckets:
        kv = f"KV_{bucket}"
        pub += [
            f"$KV.{bucket}.>",
            f"$JS.API.STREAM.INFO.{kv}",
            f"$JS.API.STREAM.CREATE.{kv}",
            # Its replicas follow NEXUS_STREAMS_REPLICAS (nexus_events.transport.bucket_replicas).
            f"$JS.API.STREAM.UPDATE.{kv}",
            f"$JS.API.STREAM.MSG.GET.{kv}",
            f"$JS.API.DIRECT.GET.{kv}.>",
            # The lease watches its key: an ordered push consumer, flow-controlled.
            f"$JS.API.CONSUMER.CREATE.{kv}",
            f"$JS.API.CONSUMER.CREATE.{kv}.>",
            f"$JS.API.CONSUMER.DELETE.{kv}.>",
            f"$JS.API.CONSUMER.INFO.{kv}.>",
            "$JS.FC.>",
        ]
    for bucket in access.object_buckets:
        obj = f"OBJ_{bucket}"
        pub += [
            f"$O.{bucket}.>",
            f"$JS.API.STREAM.INFO.{obj}",
            f"$JS.API.STREAM.CREATE.{obj}",
            f"$JS.API.STREAM.MSG.GET.{obj}",
            f"$JS.API.DIRECT.GET.{obj}.>",
            # A put replacing an object purges the old chunks; a get reads them through an
            # ordered push consumer.
            f"$JS.API.STREAM.PURGE.{obj}",
            f"$JS.API.CONSUMER.CREATE.{obj}",
            f"$JS.API.CONSUMER.CREATE.{obj}.>",
            f"$JS.API.CONSUMER.DELETE.{obj}.>",
            "$JS.FC.>",
        ]
    if access.serves:
        sub += list(access.serves)
        sub += ["$SRV.>"]  # nats.micro discovery: PING/INFO/STATS, `nats micro ls`
    if access.answers_auth_callout:
        sub.append(AUTH_CALLOUT_SUBJECT)
    if access.push_consumers:
        pub.append("$JS.FC.>")
    for stream in access.erases_from:
        pub.append(f"$JS.API.STREAM.MSG.DELETE.{stream}")
    # Dead letters are published by every Bus consumer: its own DLQ subject only.
    return sorted(dict.fromkeys(pub)), sorted(dict.fromkeys(sub))


def password_variable(user: str) -> str:
    """``NEXUS_<USER>_NATS_PASSWORD`` with dashes as underscores (channel-gateway ->
    NEXUS_CHANNEL_GATEWAY_NATS_PASSWORD): an environment variable name a shell can set."""
    return f"NEXUS_{user.upper().replace('-', '_')}_NATS_PASSWORD"


def _list(items: list[str], indent: str) -> str:
    return "[\n" + "".join(f'{indent}  "{i}"\n' for i in items) + f"{indent}]"


def table_users() -> list[tuple[str, Access]]:
    """(NATS user, what it may do) of every service of the table, in the table's order."""
    table = [spec.nats_user for spec in services.SERVICES]
    if set(table) != set(SERVICES):
        raise ValueError(
            f"nexus_events.runtime.nats_config: the service table has NATS users {sorted(table)}"
            " but"
            f" SERVICES gives permissions to {sorted(SERVICES)}: add or remove the Access entry"
        )
    return [(user, SERVICES[user]) for user in table]


# The operators' user: every permission (the nats CLI, `nexus` commands, stream admin).
ADMIN = "admin"


def users() -> list[str]:
    """Every user `render` writes, in its order: the services' (not `CALLOUT_USERS`, whose
    clients the auth callout admits), the clients', then `ADMIN` (each needs its password
    variable set where nats-server loads the file)."""
    return [*(user for user, _ in table_users() if user not in CALLOUT_USERS), *CLIENTS, ADMIN]


@dataclass(frozen=True)
class Cluster:
    """The JetStream cluster a rendered config makes its node part of."""

    name: str
    # nats://<host>:6222 of every node, this one included: a node ignores the route to itself,
    # so one file serves every node.
    routes: tuple[str, ...]
    # The environment variable holding this node's server name (unique in the cluster; the
    # Raft groups know peers by it, so it must survive restarts: the pod or service name).
    server_name_variable: str
    max_file_store: str
    # Where the server writes its pid, for `nats-server --signal ldm=<file>` (lame duck) from
    # a preStop hook; None when the stop signal itself asks for lame duck (compose: SIGUSR2).
    pid_file: str | None = None


# Lame duck: on a stop the node first stops accepting clients, waits this grace period, then
# closes its clients over the duration (spread out, so they reconnect to the other nodes without
# a stampede) and hands its Raft leaderships over before it exits. The Helm chart's values; the
# stop grace period (compose) and terminationGracePeriodSeconds (Kubernetes) are longer.
LAME_DUCK_GRACE_PERIOD = "10s"
LAME_DUCK_DURATION = "30s"


def _cluster_head(cluster: Cluster) -> str:
    pid = f'pid_file: "{cluster.pid_file}"\n' if cluster.pid_file else ""
    return f"""server_name: ${cluster.server_name_variable}
port: 4222
http_port: 8222
{pid}lame_duck_grace_period: {LAME_DUCK_GRACE_PERIOD}
lame_duck_duration: {LAME_DUCK_DURATION}
"""


def _cluster_block(cluster: Cluster) -> str:
    return f"""
# Three nodes: JetStream's meta group and every R3 stream keep working with one node down.
# Routes carry no credentials (a route URL cannot take a password from the environment): the
# cluster port is reachable from the other nodes only (compose does not publish it; the
# NetworkPolicy nats-routes on Kubernetes). no_advertise: clients use the URLs they are given
# (NEXUS_NATS_URL names every node) rather than addresses gossiped from inside the cluster.
cluster {{
  name: "{cluster.name}"
  port: {CLUSTER_PORT}
  no_advertise: true
  routes: {_list(list(cluster.routes), "  ")}
}}
"""


def render(cluster: Cluster | None = None) -> str:
    """The config of a single server, or of one node of `cluster`."""
    blocks = []
    static = [(n, a) for n, a in table_users() if n not in CALLOUT_USERS]
    for name, access in [*static, *CLIENTS.items()]:
        pub, sub = permissions(access)
        answers = access.serves or access.answers_auth_callout
        responses = "\n        allow_responses: true" if answers else ""
        blocks.append(
            f"""    {{
      user: "{name}"
      password: ${password_variable(name)}
      permissions: {{
        publish: {{ allow: {_list(pub, "        ")} }}
        subscribe: {{ allow: {_list(sub, "        ")} }}{responses}
      }}
    }}"""
        )
    blocks.append(
        """    {
      # Operators: the nats CLI and `nexus` CLI (nats pub/sub, dlq replay, stream admin).
      user: "admin"
      password: $NEXUS_ADMIN_NATS_PASSWORD
    }"""
    )
    body = "\n".join(blocks)
    auth_users = [name for name, _ in static] + [*CLIENTS, "admin"]
    if cluster is None:
        head, tail, max_file_store = "port: 4222\nhttp_port: 8222\n", "", "10G"
        what = ""
    else:
        head, tail = _cluster_head(cluster), _cluster_block(cluster)
        max_file_store = cluster.max_file_store
        what = f"# A node of the JetStream cluster `{cluster.name}` (docs/deploy.md).\n"
    return f"""# GENERATED by deploy/nats/render.py from nexus_events; do not edit.
{what}# One user per service, each allowed only its own subjects (docs/design.md §10.1), then the
# MCP server's users (mcp-read, mcp-operate: docs/mcp.md) and the operators' admin.
# Passwords come from the server's environment: NEXUS_<USER>_NATS_PASSWORD. Runners have no
# user here: the auth callout gives each run its own (issuer: NEXUS_AUTH_CALLOUT_ISSUER).
{head}
# The store directory is a command-line flag (-sd), so tests can point it elsewhere.
jetstream {{
  max_file_store: {max_file_store}
}}
{tail}
authorization {{
  users: [
{body}
  ]
  # Every other client (a run's runner: user run:<run_id> and its token) is authorised by the
  # scheduler's responder on $SYS.REQ.USER.AUTH, which answers with a user JWT signed by the
  # issuer below, holding that run's permissions (docs/deploy.md, "The run credential").
  auth_callout {{
    issuer: ${AUTH_CALLOUT_ISSUER_VARIABLE}
    auth_users: {_list(auth_users, "    ")}
  }}
}}
"""
