"""Every subject and stream name of the contract: builders, filters and one parser.

Nothing else in Nexus builds a subject by hand. Identifiers that become subject tokens
(run ids, task ids, agent ids, ...) match ``[A-Za-z0-9_-]{1,128}``: a dot would add a token,
``*``/``>`` would turn a publish into a wildcard, so both are rejected before anything is sent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING, TypeAlias

from nexus_events.contract.runstate import RunEvent
from nexus_events.errors import InvalidSubject

if TYPE_CHECKING:
    from nexus_events.events.base import Event
    from nexus_events.events.flows import FlowEvent

TOKEN_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,128}")

# A `requested` event published on this run-id token asks core to generate the run id.
NEW_RUN_TOKEN = "new"  # noqa: S105 - a subject token, not a secret


class Family(StrEnum):
    """A subject family: one shape of subject, stored in one stream."""

    RUN = "run"
    LOG = "log"
    TASK = "task"
    CATALOG = "catalog"
    INBOX = "inbox"
    ROUTE = "route"
    SCHEDULE = "schedule"
    MEMORY = "memory"
    CHANNEL = "channel"
    PLANE = "plane"
    FLOW = "flow"
    TRANSCRIPT = "transcript"
    EVAL = "eval"
    BUDGET = "budget"
    DLQ = "dlq"


class CatalogKind(StrEnum):
    AGENT = "agent"
    SKILL = "skill"
    FLOW = "flow"
    EVAL = "eval"  # evaluation suites (docs/lab.md)
    BUDGET = "budget"  # budgets (docs/spend.md)


class Direction(StrEnum):
    IN = "in"
    OUT = "out"


@dataclass(frozen=True)
class _Shape:
    prefix: tuple[str, ...]
    ids: tuple[str, ...]  # names of the id tokens after the prefix, in order
    has_event: bool  # whether the last token is the event name


_SHAPES: dict[Family, _Shape] = {
    Family.RUN: _Shape(("nexus", "agent", "run", "v1"), ("run_id",), True),
    Family.LOG: _Shape(("nexus", "agent", "log", "v1"), ("run_id",), False),
    Family.TASK: _Shape(("nexus", "task", "v1"), ("task_id",), True),
    Family.CATALOG: _Shape(("nexus", "catalog", "v1"), ("kind", "id"), True),
    Family.INBOX: _Shape(("agent", "inbox", "v1"), ("run_id",), False),
    Family.ROUTE: _Shape(("agent", "route", "v1"), ("agent_id",), False),
    Family.SCHEDULE: _Shape(("nexus", "schedule", "v1"), ("schedule_id",), True),
    Family.MEMORY: _Shape(("nexus", "memory", "v1"), ("scope",), True),
    Family.CHANNEL: _Shape(("nexus", "channel", "v1"), ("channel",), True),
    Family.DLQ: _Shape(("nexus", "dlq", "v1"), ("service",), False),
    # plane-sync's record: webhooks received, Plane writes intended and their outcomes. The
    # key is the Nexus task id (writes) or the Plane work item id (webhooks).
    Family.PLANE: _Shape(("nexus", "plane", "v1"), ("key",), True),
    # A flow run's lifecycle (services/flows); ``nexus.flows.v1.*`` are its queries.
    Family.FLOW: _Shape(("nexus", "flow", "v1"), ("flow_run_id",), True),
    # A run's model-visible transcript, written ahead of each model call so that attempt n+1
    # of the run sends the model exactly the same context (docs/resume.md).
    Family.TRANSCRIPT: _Shape(("nexus", "agent", "transcript", "v1"), ("run_id",), False),
    # An eval run of the lab (docs/lab.md); ``nexus.lab.v1.*`` are the lab's queries.
    Family.EVAL: _Shape(("nexus", "eval", "v1"), ("eval_run_id",), True),
    # The spend service's record of budget asks, extensions and thresholds (docs/spend.md):
    # the key is the ask's id or the budget's; ``nexus.spend.v1.*`` are the service's
    # requests and queries.
    Family.BUDGET: _Shape(("nexus", "budget", "v1"), ("budget_key",), True),
}

# Request/reply query subjects (not stored in any stream).
CORE_RUNS_GET = "nexus.core.v1.runs.get"
CORE_RUNS_LIST = "nexus.core.v1.runs.list"
CORE_BOARD_GET = "nexus.core.v1.board.get"
CORE_RUNS_EVENTS = "nexus.core.v1.runs.events"
CORE_CATALOG_AGENTS_LIST = "nexus.core.v1.catalog.agents.list"
CORE_CATALOG_AGENTS_GET = "nexus.core.v1.catalog.agents.get"
CORE_CATALOG_SKILLS_LIST = "nexus.core.v1.catalog.skills.list"
CORE_CATALOG_SKILLS_GET = "nexus.core.v1.catalog.skills.get"
CORE_PROJECTIONS_STATUS = "nexus.core.v1.projections.status"
CORE_PROJECTIONS_REBUILD = "nexus.core.v1.projections.rebuild"
MEMORY_SEARCH = "nexus.memory.v1.search"
MEMORY_RECORD = "nexus.memory.v1.record"
MEMORY_FORGET = "nexus.memory.v1.forget"
MEMORY_LIST = "nexus.memory.v1.list"
MEMORY_CONSOLIDATE = "nexus.memory.v1.consolidate"
MEMORY_REBUILD = "nexus.memory.v1.rebuild"
# One token after the prefix: NEXUS_PLANE stores `nexus.plane.v1.*.*` only, never these.
PLANE_STATUS = "nexus.plane.v1.status"
PLANE_RESYNC = "nexus.plane.v1.resync"
# Outside `nexus.channel.v1.>` (NEXUS_CHANNELS stores all of it): the gateway's own prefix.
CHANNEL_PAIRINGS = "nexus.channels.v1.pairings"
# Flow definitions in core's catalog, and flow runs in the flows service (plural `flows`:
# NEXUS_FLOWS captures `nexus.flow.v1.>`).
CORE_CATALOG_FLOWS_LIST = "nexus.core.v1.catalog.flows.list"
CORE_CATALOG_FLOWS_GET = "nexus.core.v1.catalog.flows.get"
FLOWS_GET = "nexus.flows.v1.get"
FLOWS_LIST = "nexus.flows.v1.list"
# Every revision of a catalog item, and run totals grouped by day/agent/flow/task/origin.
CORE_CATALOG_HISTORY = "nexus.core.v1.catalog.history"
CORE_USAGE_SUMMARY = "nexus.core.v1.usage.summary"
# The lab's eval reports (docs/lab.md).
LAB_EVALS_GET = "nexus.lab.v1.evals.get"
LAB_EVALS_LIST = "nexus.lab.v1.evals.list"
# The spend service (docs/spend.md): usage, budgets and each run's spend. A run's reservation
# and admission check carry the run id as a last token (`spend_reserve`, `spend_admit`).
SPEND_USAGE = "nexus.spend.v1.usage"
SPEND_BUDGETS_LIST = "nexus.spend.v1.budgets.list"
SPEND_BUDGETS_GET = "nexus.spend.v1.budgets.get"
SPEND_RUNS = "nexus.spend.v1.runs"
SPEND_RESERVE_PREFIX = "nexus.spend.v1.reserve"
SPEND_ADMIT_PREFIX = "nexus.spend.v1.admit"
SPEND_RESERVE = f"{SPEND_RESERVE_PREFIX}.*"
SPEND_ADMIT = f"{SPEND_ADMIT_PREFIX}.*"
# A run's agent's own schedules (docs/schedules.md, "Agent schedules"): the scheduler's leader
# answers, for the run named by the last token (a run's credential may ask for its own only).
AGENT_SCHEDULES_PREFIX = "nexus.scheduler.v1.agent_schedules"
AGENT_SCHEDULES = f"{AGENT_SCHEDULES_PREFIX}.*"
# A warm runner pod's hand-off on Kubernetes (docs/warm-starts.md): the scheduler sends a
# `WarmHandoff` to one slot, the one pod holding that slot's credential answers a `WarmClaim`.
RUNNER_WARM_PREFIX = "nexus.runner.v1.warm"
RUNNER_WARM = f"{RUNNER_WARM_PREFIX}.*"
QUERY_SUBJECTS = (
    CORE_RUNS_GET,
    CORE_RUNS_LIST,
    CORE_RUNS_EVENTS,
    CORE_BOARD_GET,
    CORE_CATALOG_AGENTS_LIST,
    CORE_CATALOG_AGENTS_GET,
    CORE_CATALOG_SKILLS_LIST,
    CORE_CATALOG_SKILLS_GET,
    CORE_PROJECTIONS_STATUS,
    CORE_PROJECTIONS_REBUILD,
    MEMORY_SEARCH,
    MEMORY_RECORD,
    MEMORY_FORGET,
    MEMORY_LIST,
    MEMORY_CONSOLIDATE,
    MEMORY_REBUILD,
    PLANE_STATUS,
    PLANE_RESYNC,
    CHANNEL_PAIRINGS,
    CORE_CATALOG_FLOWS_LIST,
    CORE_CATALOG_FLOWS_GET,
    FLOWS_GET,
    FLOWS_LIST,
    CORE_CATALOG_HISTORY,
    CORE_USAGE_SUMMARY,
    LAB_EVALS_GET,
    LAB_EVALS_LIST,
    SPEND_USAGE,
    SPEND_BUDGETS_LIST,
    SPEND_BUDGETS_GET,
    SPEND_RUNS,
    SPEND_RESERVE,
    SPEND_ADMIT,
    AGENT_SCHEDULES,
    RUNNER_WARM,
)


def validate_token(value: str, what: str = "token") -> str:
    """Return `value` if it is a valid subject token, else raise `InvalidSubject`."""
    if not isinstance(value, str) or TOKEN_PATTERN.fullmatch(value) is None:
        raise InvalidSubject(
            f"invalid {what} {value!r}: must match [A-Za-z0-9_-]{{1,128}} "
            "(no dots, spaces or wildcards)"
        )
    return value


# How a builder names an event: the run event enum member or the event's model class (its
# ``event_name``), never a bare string, so a misspelt name fails type checking instead of
# publishing on a subject nobody consumes. Other families' builders still take names as
# strings until their own vocabulary enums exist.
RunEventRef: TypeAlias = "RunEvent | type[Event]"
FlowEventRef: TypeAlias = "FlowEvent | type[Event]"


def event_name(event: StrEnum | type[Event] | str) -> str:
    """The wire name of `event`: an enum member's value or a model class's ``event_name``."""
    if isinstance(event, type):
        return event.event_name
    return str(event)


def run_event_named(name: str) -> RunEvent:
    """The run event called `name` (input from outside: a CLI argument, a subject token);
    `InvalidSubject` if the contract has no run event of that name."""
    try:
        return RunEvent(name)
    except ValueError:
        raise InvalidSubject(f"unknown run event {name!r}: one of {', '.join(RunEvent)}") from None


def _build(family: Family, ids: tuple[str, ...], event: str | None) -> str:
    shape = _SHAPES[family]
    tokens = [validate_token(v, n) for n, v in zip(shape.ids, ids, strict=True)]
    if shape.has_event:
        if event is None:
            raise InvalidSubject(f"{family} subjects need an event name")
        tokens.append(validate_token(event, "event name"))
    return ".".join((*shape.prefix, *tokens))


def _filter(family: Family, ids: tuple[str | None, ...], event: str | None) -> str:
    shape = _SHAPES[family]
    tokens = [
        "*" if v is None else validate_token(v, n) for n, v in zip(shape.ids, ids, strict=True)
    ]
    if shape.has_event:
        tokens.append("*" if event is None else validate_token(event, "event name"))
    return ".".join((*shape.prefix, *tokens))


# -- builders (concrete subjects to publish on) -------------------------------------------


def run_event(run_id: str, event: RunEventRef) -> str:
    """``nexus.agent.run.v1.<run_id>.<event>``: `event` is a `RunEvent` or a run model class."""
    return _build(Family.RUN, (run_id,), event_name(event))


def run_log(run_id: str) -> str:
    """``nexus.agent.log.v1.<run_id>``."""
    return _build(Family.LOG, (run_id,), None)


def run_transcript(run_id: str) -> str:
    """``nexus.agent.transcript.v1.<run_id>``."""
    return _build(Family.TRANSCRIPT, (run_id,), None)


def task_event(task_id: str, event: str) -> str:
    """``nexus.task.v1.<task_id>.<event>``."""
    return _build(Family.TASK, (task_id,), event)


def catalog_event(kind: CatalogKind | str, item_id: str, event: str) -> str:
    """``nexus.catalog.v1.<kind>.<id>.<event>``; kind is ``agent``, ``skill`` or ``flow``."""
    try:
        kind = CatalogKind(kind)
    except ValueError:
        raise InvalidSubject(
            f"invalid catalog kind {kind!r}: must be agent, skill or flow"
        ) from None
    return _build(Family.CATALOG, (kind.value, item_id), event)


def inbox(run_id: str) -> str:
    """``agent.inbox.v1.<run_id>``: messages and approval decisions for a running run."""
    return _build(Family.INBOX, (run_id,), None)


def route(agent_id: str) -> str:
    """``agent.route.v1.<agent_id>``: delegation of work to an agent."""
    return _build(Family.ROUTE, (agent_id,), None)


def schedule_event(schedule_id: str, event: str) -> str:
    """``nexus.schedule.v1.<id>.<event>``."""
    return _build(Family.SCHEDULE, (schedule_id,), event)


def memory_event(scope: str, event: str) -> str:
    """``nexus.memory.v1.<scope>.<event>``."""
    return _build(Family.MEMORY, (scope,), event)


def channel_message(channel: str, direction: Direction | str) -> str:
    """``nexus.channel.v1.<channel>.<in|out>``."""
    try:
        direction = Direction(direction)
    except ValueError:
        raise InvalidSubject(
            f"invalid channel direction {direction!r}: must be in or out"
        ) from None
    return _build(Family.CHANNEL, (channel,), direction.value)


def plane_event(key: str, event: str) -> str:
    """``nexus.plane.v1.<key>.<event>``: plane-sync's webhooks and write intents/outcomes."""
    return _build(Family.PLANE, (key,), event)


def channel_event(channel: str, event: str) -> str:
    """``nexus.channel.v1.<channel>.<event>``: a channel fact other than a message in or out
    (``sent``, ``webhook``, ``pairing_requested``, ``approval_relayed``, ...)."""
    return _build(Family.CHANNEL, (channel,), event)


def flow_event(flow_run_id: str, event: FlowEventRef) -> str:
    """``nexus.flow.v1.<flow_run_id>.<event>``: a flow run's lifecycle."""
    return _build(Family.FLOW, (flow_run_id,), event_name(event))


def spend_reserve(run_id: str) -> str:
    """``nexus.spend.v1.reserve.<run_id>``: a run's reservation before a model call."""
    return f"{SPEND_RESERVE_PREFIX}.{validate_token(run_id, 'run id')}"


def agent_schedules(run_id: str) -> str:
    """``nexus.scheduler.v1.agent_schedules.<run_id>``: a run's agent's own schedules."""
    return f"{AGENT_SCHEDULES_PREFIX}.{validate_token(run_id, 'run id')}"


def runner_warm(slot: str) -> str:
    """``nexus.runner.v1.warm.<slot>``: where the one warm pod of `slot` waits for its run."""
    return f"{RUNNER_WARM_PREFIX}.{validate_token(slot, 'warm slot')}"


def spend_admit(run_id: str) -> str:
    """``nexus.spend.v1.admit.<run_id>``: the scheduler's budget check before dispatch."""
    return f"{SPEND_ADMIT_PREFIX}.{validate_token(run_id, 'run id')}"


def budget_event(key: str, event: str) -> str:
    """``nexus.budget.v1.<key>.<event>`` (a `BudgetEvent` name; key: ask id or budget id)."""
    return _build(Family.BUDGET, (key,), event_name(event))


def budget_events_filter(key: str | None = None, event: str | None = None) -> str:
    return _filter(Family.BUDGET, (key,), event)


def eval_event(eval_run_id: str, event: str) -> str:
    """``nexus.eval.v1.<eval_run_id>.<event>`` (an `EvalEvent` name)."""
    return _build(Family.EVAL, (eval_run_id,), event_name(event))


def eval_events_filter(eval_run_id: str | None = None, event: str | None = None) -> str:
    return _filter(Family.EVAL, (eval_run_id,), event)


def dead_letter(service: str) -> str:
    """``nexus.dlq.v1.<service>``."""
    return _build(Family.DLQ, (service,), None)


# -- filters (wildcard subjects to subscribe or consume with) -----------------------------


def run_events_filter(run_id: str | None = None, event: RunEventRef | None = None) -> str:
    """All run events, or those of one run and/or one event."""
    return _filter(Family.RUN, (run_id,), None if event is None else event_name(event))


def run_logs_filter(run_id: str | None = None) -> str:
    return _filter(Family.LOG, (run_id,), None)


def run_transcripts_filter(run_id: str | None = None) -> str:
    return _filter(Family.TRANSCRIPT, (run_id,), None)


def task_events_filter(task_id: str | None = None, event: str | None = None) -> str:
    return _filter(Family.TASK, (task_id,), event)


def memory_events_filter(scope: str | None = None, event: str | None = None) -> str:
    return _filter(Family.MEMORY, (scope,), event)


def plane_events_filter(key: str | None = None, event: str | None = None) -> str:
    return _filter(Family.PLANE, (key,), event)


def channel_events_filter(channel: str | None = None, event: str | None = None) -> str:
    """Channel events: all, those of one channel, and/or one direction or event name."""
    return _filter(Family.CHANNEL, (channel,), event)


def flow_events_filter(flow_run_id: str | None = None, event: FlowEventRef | None = None) -> str:
    return _filter(Family.FLOW, (flow_run_id,), None if event is None else event_name(event))


def catalog_events_filter(kind: CatalogKind | str | None = None) -> str:
    if kind is not None:
        kind = CatalogKind(kind).value
    return _filter(Family.CATALOG, (kind, None), None)


def family_filter(family: Family) -> str:
    """Every subject of one family, e.g. ``nexus.agent.run.v1.>``."""
    return ".".join((*_SHAPES[family].prefix, ">"))


def schema_prefix(family: Family) -> str:
    """Prefix of a family's ``Nexus-Schema`` names, e.g. ``nexus.agent.run``."""
    return ".".join(_SHAPES[family].prefix[:-1])


def has_event_token(family: Family) -> bool:
    """Whether the family's last subject token names the event."""
    return _SHAPES[family].has_event


def address_template(family: Family, event: str | None = None) -> str:
    """The subject of one event as a template with ``{name}`` per id token (AsyncAPI style).

    ``address_template(Family.RUN, "completed")`` is ``nexus.agent.run.v1.{run_id}.completed``.
    A catalog event name carries its kind (``agent.applied``), so the kind token is literal.
    Families without an event token ignore `event`. Raises `InvalidSubject` for a missing or
    malformed event name.
    """
    shape = _SHAPES[family]
    tokens = [f"{{{name}}}" for name in shape.ids]
    if shape.has_event:
        if event is None:
            raise InvalidSubject(f"{family} subjects need an event name")
        if family is Family.CATALOG:
            kind, _, event = event.partition(".")
            try:
                tokens[0] = CatalogKind(kind).value
            except ValueError:
                raise InvalidSubject(f"catalog event {kind}.{event}: unknown kind") from None
        tokens.append(validate_token(event, "event name"))
    return ".".join((*shape.prefix, *tokens))


def matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` matches one token, a final ``>`` one or more."""
    want, have = pattern.split("."), subject.split(".")
    for i, part in enumerate(want):
        if part == ">":
            return len(have) > i
        if i >= len(have) or (part not in ("*", have[i])):
            return False
    return len(want) == len(have)


# -- parsing ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParsedSubject:
    """A subject split into its family, id tokens and (if the family has one) event name."""

    family: Family
    ids: dict[str, str] = field(default_factory=dict)
    event: str | None = None
    # A field, not a property: projections read it several times per event.
    run_id: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_id", self.ids.get("run_id"))


_BY_PREFIX = {shape.prefix: fam for fam, shape in _SHAPES.items()}


_VALID_TOKEN = TOKEN_PATTERN.fullmatch


def _fast_pattern(shape: _Shape) -> Callable[[str], re.Match[str] | None]:
    tokens = len(shape.ids) + (1 if shape.has_event else 0)
    token = f"({TOKEN_PATTERN.pattern})"
    return re.compile(re.escape(".".join(shape.prefix)) + rf"\.{token}" * tokens).fullmatch


# One match per family, run events first (the bulk of every replay): a well-formed subject
# parses with one regex match instead of a split and a match per token.
_FAST_PATTERNS = sorted(
    ((family, _fast_pattern(shape)) for family, shape in _SHAPES.items()),
    key=lambda item: item[0] is not Family.RUN,
)


@lru_cache(maxsize=8192)
def parse_subject(subject: str) -> ParsedSubject:
    """Split a concrete subject of any family; raise `InvalidSubject` if it fits none.

    Cached: a run's subjects repeat for every event, and parsing is on the hot path.
    Treat the result as read-only.
    """
    for fast_family, pattern in _FAST_PATTERNS:
        match = pattern(subject)
        if match is not None:
            *id_values, last = match.groups()
            fast = _SHAPES[fast_family]
            if fast.has_event:
                return ParsedSubject(fast_family, dict(zip(fast.ids, id_values, strict=True)), last)
            return ParsedSubject(fast_family, dict(zip(fast.ids, (*id_values, last), strict=True)))
    # No family's well-formed shape: find out what is wrong, for the error.
    tokens = subject.split(".")
    for size in (4, 3):
        family = _BY_PREFIX.get(tuple(tokens[:size]))
        if family is not None:
            break
    else:
        raise InvalidSubject(f"subject {subject!r} belongs to no Nexus subject family")
    shape = _SHAPES[family]
    rest = tokens[size:]
    expected = len(shape.ids) + (1 if shape.has_event else 0)
    if len(rest) != expected:
        raise InvalidSubject(
            f"subject {subject!r}: a {family} subject has {expected} token(s) after "
            f"{'.'.join(shape.prefix)}, got {len(rest)}"
        )
    for token in rest:
        if _VALID_TOKEN(token) is None:
            # Name the offending part: validate_token raises with the token's role.
            for name, value in zip(shape.ids, rest, strict=False):
                validate_token(value, name)
            validate_token(rest[-1], "event name")
    ids = dict(zip(shape.ids, rest, strict=False))
    return ParsedSubject(family, ids, rest[-1] if shape.has_event else None)
