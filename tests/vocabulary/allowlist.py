"""The string literals that equal a run or flow vocabulary word but are not a use of it.

Each entry names (file, enclosing scope, word) and says why the word is something else
there: an output field, a command name, another state machine's state, prose. A new entry
needs the same: a literal that means a run or flow event or status uses the contract's enums
(`RunEvent`, `RunStatus`, `FlowStatus`, the event model classes) instead.
"""

from __future__ import annotations

_CLI = "cli/src/nexus_cli/"
_GATEWAY = "services/channel-gateway/src/nexus_channel_gateway/"
_CORE = "services/core/src/nexus_core/"
_PLANE = "services/plane-sync/src/nexus_plane_sync/"
_RUNNER = "services/runner/src/nexus_runner/"
_SCHEDULER = "services/scheduler/src/nexus_scheduler/"

_STACK = "the dev stack's own process states (devstack.state), not a run's"
_OUTBOX = "an outbox row's delivery state (pending/done/failed), not a run's"

ALLOWED: dict[tuple[str, str, str], str] = {
    # -- the CLI ------------------------------------------------------------------------------
    (_CLI + "flowview.py", "print_flow_run", "requested"): (
        "the label of the requested_at line in `nexus flow-runs show`, not the event"
    ),
    ("services/flows/src/nexus_flows/in_progress.py", "map_step", "succeeded"): (
        "a key of a map step's output (the count of items that succeeded), kept on the wire"
    ),
    ("services/flows/src/nexus_flows/in_progress.py", "map_step", "failed"): (
        "a key of a map step's output (the count of items that failed), kept on the wire"
    ),
    (_CLI + "commands/flow_runs.py", "cancel_cmd.body", "requested"): (
        "the key of the command's JSON output ({'requested': 'cancel'}): what was asked"
    ),
    (_CLI + "commands/flow_runs.py", "resume_cmd.body", "requested"): (
        "the key of the command's JSON output ({'requested': 'resume'}): what was asked"
    ),
    (_CLI + "commands/flow_runs.py", "signal_cmd", "signal"): (
        "the CLI command's name (`nexus flow signal`)"
    ),
    (_CLI + "commands/plane.py", "resync_cmd.body", "queued"): (
        "a field of plane-sync's resync reply (how many writes it queued)"
    ),
    (_CLI + "commands/run_control.py", "request_cancel", "cancel_requested"): (
        "a boolean field of `nexus cancel`'s JSON output (whether a cancel was sent)"
    ),
    (_CLI + "commands/run_control.py", "register.cancel_cmd.body", "cancel_requested"): (
        "a boolean field of `nexus cancel`'s JSON output (whether a cancel was sent)"
    ),
    (_CLI + "commands/schedules.py", "_set_enabled", "resumed"): (
        "a schedule's verb (paused/resumed), not the run event"
    ),
    (_CLI + "devstack/control.py", "wait_ready", "failed"): _STACK,
    (_CLI + "devstack/state.py", "", "failed"): _STACK,
    (_CLI + "devstack/state.py", "", "running"): _STACK,
    (_CLI + "devstack/supervisor.py", "Child.start", "running"): _STACK,
    (_CLI + "devstack/supervisor.py", "Supervisor.run", "failed"): _STACK,
    (_CLI + "devstack/supervisor.py", "Supervisor._start_postgres", "running"): _STACK,
    (_CLI + "devstack/offline_model/conversation.py", "extraction_answer", "completed"): (
        "the offline model is mounted alone into its container (deploy/compose.yaml) and "
        "imports nothing of Nexus: it reads the word from the extraction prompt's text"
    ),
    (_CLI + "resumelines.py", "resumed_line", "turn"): "the English word, pluralised",
    (_CLI + "resumelines.py", "checkpointed_line", "turn"): "the `turn` field of the body",
    (_CLI + "resumelines.py", "condensed_line", "turn"): "the `turn` field of the body",
    (_CLI + "runview.py", "RunView.apply", "turn"): "the `turn` field of the body",
    (_CLI + "runview.py", "RunView._apply_attempts", "turn"): "the `turn` field of the body",
    (_CLI + "runview.py", "describe", "turn"): "the `turn` field of the body",
    # -- the channel gateway ------------------------------------------------------------------
    (_GATEWAY + "delegation.py", "Delegator.route", "started"): (
        "a delegation metric's outcome label"
    ),
    (_GATEWAY + "flownotifier.py", "describe", "failed"): "prose of the chat line (a verb)",
    (_GATEWAY + "ingress.py", "Ingress._accept", "accepted"): (
        "an inbound message's dedupe outcome (accepted/duplicate), not the flow event"
    ),
    (_GATEWAY + "notifier.py", "", "failed"): (
        "prose of the chat line for each ending (`_ENDED_AS`), keyed by RunStatus"
    ),
    (_GATEWAY + "sender.py", "Sender._failed", "failed"): _OUTBOX,
    # -- core ---------------------------------------------------------------------------------
    (_CORE + "requests_store.py", "", "failed"): (
        "the outcome column of core's requests table (pending/prepared/failed)"
    ),
    (_CORE + "requests_store.py", "", "prepared"): (
        "the outcome column of core's requests table (pending/prepared/failed)"
    ),
    (_CORE + "handlers.py", "AssemblyHandler.handle", "failed"): (
        "the requests table's outcome (requests_store.Outcome) and the handler's metric label"
    ),
    (_CORE + "handlers.py", "AssemblyHandler.handle", "prepared"): (
        "the requests table's outcome (requests_store.Outcome) and the handler's metric label"
    ),
    # -- memory -------------------------------------------------------------------------------
    ("services/memory/src/nexus_memory/extraction.py", "Extractor.extract", "failed"): (
        "the outcome of memory's extraction of a run, not the run's"
    ),
    # -- plane-sync ---------------------------------------------------------------------------
    (_PLANE + "app.py", "PlaneSyncApp.status", "failed"): _OUTBOX,
    (_PLANE + "writer.py", "OutboxWriter._fail", "failed"): _OUTBOX,
    (_PLANE + "decisions.py", "run_writes", "started"): (
        "the kind of a Plane write (a comment kind stored in plane-sync's outbox)"
    ),
    (_PLANE + "decisions.py", "run_writes", "resumed"): (
        "the kind of a Plane write (a comment kind stored in plane-sync's outbox)"
    ),
    (_PLANE + "flowreports.py", "_turn", "escalated"): (
        "the kind of a Plane write (a comment kind stored in plane-sync's outbox)"
    ),
    (_PLANE + "flowreports.py", "_waiting", "waiting"): (
        "the kind of a Plane write (a comment kind stored in plane-sync's outbox)"
    ),
    (_PLANE + "flowreports.py", "flow_report", "failed"): "prose of the comment (a verb)",
    (_PLANE + "ingress/comments.py", "CommentCommands._agent_run_signal", "signal"): (
        "a field of Plane's agent-run webhook payload"
    ),
    (_PLANE + "webhooks.py", "WebhookServer.handle", "accepted"): (
        "the webhook server's delivery counter (accepted/rejected/...)"
    ),
    # -- the runner ---------------------------------------------------------------------------
    (_RUNNER + "egress/access.py", "", "egress"): (
        "the name of the runner's egress route (the proxy path), not the run event"
    ),
    (_RUNNER + "resume.py", "interrupted_note", "failed"): (
        "prose of the note the model reads about an interrupted tool call"
    ),
    (_RUNNER + "resume.py", "interrupted_note", "succeeded"): (
        "prose of the note the model reads about an interrupted tool call"
    ),
    (_RUNNER + "sandbox/host.py", "Host.__init__", "running"): (
        "the tool sandbox host's state (running/suspended), not the run's"
    ),
    (_RUNNER + "sandbox/host.py", "Host.approve", "running"): (
        "the tool sandbox host's state (running/suspended), not the run's"
    ),
    (_RUNNER + "tools/mcp_unavailable.py", "start_failure", "failed"): (
        "a reason of mcp_server_unavailable (McpUnavailableReason), not a status"
    ),
    # -- the scheduler ------------------------------------------------------------------------
    (_SCHEDULER + "admission.py", "Phase", "waiting"): (
        "an admission phase of the scheduler's own (prepared, not yet admitted): no run status"
    ),
    (_SCHEDULER + "admission.py", "after_loss", "failed"): (
        "prose of the message (`runner failed after n attempts`)"
    ),
    (_SCHEDULER + "admission.py", "after_loss", "lost"): (
        "prose of the message (`runner lost after n attempts`)"
    ),
    (_SCHEDULER + "app.py", "SchedulerApp._lead", "waiting"): (
        "a key of the rebuild's log record (how many runs wait for admission)"
    ),
    (_SCHEDULER + "runtime/base.py", "RuntimeState", "running"): (
        "the platform's view of a runner (RuntimeState), apart from the run's status"
    ),
    (_SCHEDULER + "runtime/base.py", "RuntimeState", "failed"): (
        "the platform's view of a runner (RuntimeState), apart from the run's status"
    ),
    (_SCHEDULER + "runtime/base.py", "RuntimeState", "timed_out"): (
        "the platform's view of a runner (RuntimeState), apart from the run's status"
    ),
}
