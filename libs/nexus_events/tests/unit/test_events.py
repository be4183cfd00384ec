"""Event models and the registry."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

import pytest
from nexus_events.contract.subjects import Family
from nexus_events.events import (
    Command,
    Event,
    RepoSpec,
    RunRequested,
    ScheduleDefined,
    SkillRef,
    ToolGrant,
    register,
    registered,
)
from nexus_events.events.base import lookup
from pydantic import BaseModel, ValidationError


def _models_reachable_from(model: type[BaseModel]) -> set[type[BaseModel]]:
    """The model and every pydantic model nested in its fields (lists, unions, ...)."""
    seen: set[type[BaseModel]] = set()
    todo = [model]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for info in current.model_fields.values():
            stack = [info.annotation]
            while stack:
                tp = stack.pop()
                if isinstance(tp, type) and issubclass(tp, BaseModel):
                    todo.append(tp)
                stack.extend(getattr(tp, "__args__", ()))
    return seen


def test_registry_is_not_empty_and_keys_match_classes():
    reg = registered()
    assert len(reg) >= 30
    for (family, name), model in reg.items():
        assert model.event_family is family
        assert model.event_name == name
        assert lookup(family, name) is model


def test_every_field_of_every_registered_model_has_a_description():
    missing = []
    models = set().union(*(_models_reachable_from(m) for m in registered().values()))
    for model in models:
        for name, info in model.model_fields.items():
            if not (info.description or "").strip():
                missing.append(f"{model.__name__}.{name}")
    assert missing == []


def test_events_are_frozen():
    event = RunRequested(agent_id="a")
    with pytest.raises(ValidationError):
        event.agent_id = "b"  # type: ignore[misc]


def test_run_requested_forbids_extra_fields():
    with pytest.raises(ValidationError) as info:
        RunRequested.model_validate({"agent_id": "a", "agnet": "typo"})
    assert info.value.errors()[0]["loc"] == ("agnet",)
    assert info.value.errors()[0]["type"] == "extra_forbidden"


def test_plain_events_ignore_extra_fields():
    from nexus_events.events import RunHeartbeat

    assert RunHeartbeat.model_validate({"seq": 1, "from_the_future": True}) == RunHeartbeat(seq=1)


@pytest.mark.parametrize("bad", ["a.b", "*", "", "a b"])
def test_run_requested_ids_are_subject_tokens(bad):
    with pytest.raises(ValidationError):
        RunRequested(agent_id=bad)
    with pytest.raises(ValidationError):
        RunRequested(agent_id="ok", task_id=bad)


def test_tool_grant_string_shorthand():
    assert ToolGrant.model_validate("run_shell") == ToolGrant(name="run_shell", options={})
    full = ToolGrant.model_validate({"name": "http", "options": {"hosts": ["x"]}})
    assert full.options == {"hosts": ["x"]}
    with pytest.raises(ValidationError):
        ToolGrant.model_validate("")


def test_skill_ref_string_shorthand():
    assert SkillRef.model_validate("python") == SkillRef(name="python", version=None)
    assert SkillRef.model_validate("git@2") == SkillRef(name="git", version="2")
    with pytest.raises(ValidationError):
        SkillRef.model_validate("bad.name@1")


def test_repo_spec_string_shorthand():
    assert RepoSpec.model_validate("https://example.com/r.git") == RepoSpec(
        url="https://example.com/r.git"
    )
    requested = RunRequested.model_validate({"agent_id": "a", "repo": "/src/repo"})
    assert requested.repo == RepoSpec(url="/src/repo")
    with pytest.raises(ValidationError):
        RepoSpec.model_validate({"url": "x", "brnach": "typo"})


@pytest.mark.parametrize(
    "trigger",
    [
        {"cron": "0 * * * *"},
        {"interval_seconds": 60},
        {"at": datetime(2030, 1, 1, tzinfo=UTC)},
    ],
)
def test_schedule_defined_accepts_exactly_one_trigger(trigger):
    assert ScheduleDefined(agent_id="a", **trigger).agent_id == "a"


@pytest.mark.parametrize(
    "triggers",
    [
        {},
        {"cron": "0 * * * *", "interval_seconds": 60},
        {"cron": "0 * * * *", "at": datetime(2030, 1, 1, tzinfo=UTC)},
        {"interval_seconds": 5, "at": datetime(2030, 1, 1, tzinfo=UTC)},
        {"cron": "* * * * *", "interval_seconds": 5, "at": datetime(2030, 1, 1, tzinfo=UTC)},
    ],
)
def test_schedule_defined_rejects_zero_or_several_triggers(triggers):
    with pytest.raises(ValidationError, match="exactly one"):
        ScheduleDefined(agent_id="a", **triggers)


def test_schema_name():
    assert RunRequested.schema_name() == "nexus.agent.run.requested/1"
    assert lookup(Family.CATALOG, "agent.applied").schema_name() == (
        "nexus.catalog.agent.applied/1"
    )


def test_duplicate_registration_raises_type_error():
    existing = lookup(Family.RUN, "completed")

    class Impostor(Event):
        event_family: ClassVar[Family] = Family.RUN
        event_name: ClassVar[str] = "completed"

    with pytest.raises(TypeError, match="registered twice"):
        register(Impostor)
    assert lookup(Family.RUN, "completed") is existing


def test_registering_the_same_class_again_is_harmless():
    model = lookup(Family.TASK, "created")
    assert register(model) is model
    assert lookup(Family.TASK, "created") is model


def test_commands_forbid_extras():
    assert Command.model_config["extra"] == "forbid"
    assert Event.model_config["extra"] == "ignore"
