"""Subject builders, filters and the parser: the only place subjects are made."""

from __future__ import annotations

import re

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.subjects import CatalogKind, Direction, Family, parse_subject
from nexus_events.errors import InvalidSubject

BAD_TOKENS = ["", "a.b", "*", ">", "a b", "x" * 129, "zoë", "run\t1", "日本"]

# (built subject, expected literal, family, ids, event)
BUILT = [
    (
        subjects.run_event("run_1", "completed"),
        "nexus.agent.run.v1.run_1.completed",
        Family.RUN,
        {"run_id": "run_1"},
        "completed",
    ),
    (subjects.run_log("run_1"), "nexus.agent.log.v1.run_1", Family.LOG, {"run_id": "run_1"}, None),
    (
        subjects.task_event("T-9", "moved"),
        "nexus.task.v1.T-9.moved",
        Family.TASK,
        {"task_id": "T-9"},
        "moved",
    ),
    (
        subjects.catalog_event("agent", "planner", "applied"),
        "nexus.catalog.v1.agent.planner.applied",
        Family.CATALOG,
        {"kind": "agent", "id": "planner"},
        "applied",
    ),
    (
        subjects.catalog_event(CatalogKind.SKILL, "python", "deleted"),
        "nexus.catalog.v1.skill.python.deleted",
        Family.CATALOG,
        {"kind": "skill", "id": "python"},
        "deleted",
    ),
    (subjects.inbox("run_1"), "agent.inbox.v1.run_1", Family.INBOX, {"run_id": "run_1"}, None),
    (
        subjects.route("reviewer"),
        "agent.route.v1.reviewer",
        Family.ROUTE,
        {"agent_id": "reviewer"},
        None,
    ),
    (
        subjects.schedule_event("nightly", "fired"),
        "nexus.schedule.v1.nightly.fired",
        Family.SCHEDULE,
        {"schedule_id": "nightly"},
        "fired",
    ),
    (
        subjects.memory_event("agent-planner", "recorded"),
        "nexus.memory.v1.agent-planner.recorded",
        Family.MEMORY,
        {"scope": "agent-planner"},
        "recorded",
    ),
    (
        subjects.channel_message("slack", "in"),
        "nexus.channel.v1.slack.in",
        Family.CHANNEL,
        {"channel": "slack"},
        "in",
    ),
    (
        subjects.channel_message("telegram", Direction.OUT),
        "nexus.channel.v1.telegram.out",
        Family.CHANNEL,
        {"channel": "telegram"},
        "out",
    ),
    (
        subjects.plane_event("task-1", "write_requested"),
        "nexus.plane.v1.task-1.write_requested",
        Family.PLANE,
        {"key": "task-1"},
        "write_requested",
    ),
    (
        subjects.flow_event("fr_1", "step_started"),
        "nexus.flow.v1.fr_1.step_started",
        Family.FLOW,
        {"flow_run_id": "fr_1"},
        "step_started",
    ),
    (subjects.dead_letter("core"), "nexus.dlq.v1.core", Family.DLQ, {"service": "core"}, None),
    (
        subjects.run_transcript("run_1"),
        "nexus.agent.transcript.v1.run_1",
        Family.TRANSCRIPT,
        {"run_id": "run_1"},
        None,
    ),
    (
        subjects.eval_event("ev_1", "case_graded"),
        "nexus.eval.v1.ev_1.case_graded",
        Family.EVAL,
        {"eval_run_id": "ev_1"},
        "case_graded",
    ),
    (
        subjects.budget_event("budget-ask-1", "ask_opened"),
        "nexus.budget.v1.budget-ask-1.ask_opened",
        Family.BUDGET,
        {"budget_key": "budget-ask-1"},
        "ask_opened",
    ),
]


def test_every_family_has_a_builder_case():
    assert {family for _, _, family, _, _ in BUILT} == set(Family)


@pytest.mark.parametrize(("built", "literal", "family", "ids", "event"), BUILT)
def test_builder_output_and_parse_round_trip(built, literal, family, ids, event):
    assert built == literal
    parsed = parse_subject(built)
    assert parsed.family is family
    assert parsed.ids == ids
    assert parsed.event == event
    assert parsed.run_id == ids.get("run_id")


@pytest.mark.parametrize("bad", BAD_TOKENS)
def test_validate_token_rejects(bad):
    with pytest.raises(InvalidSubject):
        subjects.validate_token(bad)


@pytest.mark.parametrize("good", ["a", "run_123", "A-b_9", "x" * 128])
def test_validate_token_accepts(good):
    assert subjects.validate_token(good) == good


@pytest.mark.parametrize("bad", BAD_TOKENS)
@pytest.mark.parametrize(
    "build",
    [
        lambda t: subjects.run_event(t, "completed"),
        lambda t: subjects.run_event("run_1", t),
        subjects.run_log,
        lambda t: subjects.task_event(t, "created"),
        lambda t: subjects.catalog_event("agent", t, "applied"),
        subjects.inbox,
        subjects.route,
        lambda t: subjects.schedule_event(t, "fired"),
        lambda t: subjects.memory_event(t, "recorded"),
        lambda t: subjects.channel_message(t, "in"),
        subjects.dead_letter,
    ],
)
def test_builders_reject_bad_tokens(build, bad):
    with pytest.raises(InvalidSubject):
        build(bad)


def test_catalog_kind_and_channel_direction_are_checked():
    with pytest.raises(InvalidSubject, match="catalog kind"):
        subjects.catalog_event("tool", "x", "applied")
    with pytest.raises(InvalidSubject, match="direction"):
        subjects.channel_message("slack", "sideways")


def test_filters():
    assert subjects.run_events_filter() == "nexus.agent.run.v1.*.*"
    assert subjects.run_events_filter("run_1") == "nexus.agent.run.v1.run_1.*"
    assert subjects.run_events_filter(event="completed") == "nexus.agent.run.v1.*.completed"
    assert subjects.run_logs_filter() == "nexus.agent.log.v1.*"
    assert subjects.task_events_filter("t1") == "nexus.task.v1.t1.*"
    assert subjects.catalog_events_filter("skill") == "nexus.catalog.v1.skill.*.*"
    assert subjects.family_filter(Family.INBOX) == "agent.inbox.v1.>"
    with pytest.raises(InvalidSubject):
        subjects.run_events_filter("a.b")


@pytest.mark.parametrize(
    "subject",
    [
        "",
        "nexus",
        "foo.bar.baz.qux",
        "nexus.agent.run.v2.run_1.completed",  # another version is another family
        "nexus.core.v1.runs.get",  # a query subject is not a stored family
        "agent.inbox.v2.run_1",
        "nats.agent.run.v1.run_1.completed",
    ],
)
def test_parse_rejects_unknown_prefixes(subject):
    with pytest.raises(InvalidSubject, match="no Nexus subject family"):
        parse_subject(subject)


@pytest.mark.parametrize(
    "subject",
    [
        "nexus.agent.run.v1.run_1",  # missing event
        "nexus.agent.run.v1.run_1.completed.extra",
        "nexus.agent.run.v1",
        "nexus.agent.log.v1.run_1.extra",
        "nexus.catalog.v1.agent.completed",  # missing id
        "agent.inbox.v1",
        "nexus.dlq.v1.core.more",
        "nexus.memory.v1.search",  # the query subject: one token short of an event
    ],
)
def test_parse_rejects_wrong_token_counts(subject):
    with pytest.raises(InvalidSubject, match="token"):
        parse_subject(subject)


@pytest.mark.parametrize(
    "subject",
    ["nexus.agent.run.v1.*.completed", "nexus.agent.run.v1.run_1.>", "agent.inbox.v1.a b"],
)
def test_parse_rejects_wildcards_and_bad_tokens(subject):
    with pytest.raises(InvalidSubject):
        parse_subject(subject)


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("nexus.agent.run.v1.*.requested", "nexus.agent.run.v1.r1.requested", True),
        ("nexus.agent.run.v1.*.requested", "nexus.agent.run.v1.r1.prepared", False),
        ("nexus.agent.run.v1.>", "nexus.agent.run.v1.r1.prepared", True),
        ("nexus.agent.run.v1.>", "nexus.agent.run.v1", False),
        ("nexus.task.v1.*.*", "nexus.task.v1.T-1.created", True),
        ("nexus.task.v1.*", "nexus.task.v1.T-1.created", False),
        ("a.b", "a.b.c", False),
    ],
)
def test_matches_follows_nats_wildcards(pattern: str, subject: str, expected: bool) -> None:
    assert subjects.matches(pattern, subject) is expected


@pytest.mark.parametrize(("length", "ok"), [(1, True), (128, True), (129, False)])
def test_parse_takes_tokens_up_to_the_longest_allowed(length, ok):
    run_id = "r" * length
    subject = f"nexus.agent.run.v1.{run_id}.completed"
    if ok:
        assert parse_subject(subject).run_id == run_id
    else:
        with pytest.raises(InvalidSubject, match="run_id"):
            parse_subject(subject)


@pytest.mark.parametrize(
    ("family", "event", "template", "built"),
    [
        (Family.RUN, "completed", "nexus.agent.run.v1.{run_id}.completed",
         subjects.run_event("p1", "completed")),
        (Family.LOG, "line", "nexus.agent.log.v1.{run_id}", subjects.run_log("p1")),
        (Family.CATALOG, "skill.deleted", "nexus.catalog.v1.skill.{id}.deleted",
         subjects.catalog_event("skill", "p1", "deleted")),
        (Family.CHANNEL, "out", "nexus.channel.v1.{channel}.out",
         subjects.channel_message("p1", "out")),
        (Family.DLQ, "dead_letter", "nexus.dlq.v1.{service}", subjects.dead_letter("p1")),
    ],
)  # fmt: skip
def test_address_template_is_the_builders_subject_with_placeholders(
    family: Family, event: str, template: str, built: str
) -> None:
    got = subjects.address_template(family, event)
    assert got == template
    # Filling each {name} gives exactly what the builder makes.
    assert "".join(p if not p.startswith("{") else "p1" for p in _split_keep(got)) == built


def _split_keep(template: str) -> list[str]:
    return re.split(r"(\{[^}]+\})", template)


@pytest.mark.parametrize(
    ("family", "event"), [(Family.RUN, None), (Family.CATALOG, "tool.applied"), (Family.RUN, "a.b")]
)
def test_address_template_rejects_bad_event_names(family: Family, event: str | None) -> None:
    with pytest.raises(InvalidSubject):
        subjects.address_template(family, event)
