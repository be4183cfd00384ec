"""The committed contract snapshot matches the models, and `breaking_changes` sees what breaks."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from tests.contract import snapshot
from tests.contract.compat import breaking_changes, snapshot_breaking_changes

# --- the committed snapshot ---------------------------------------------------------------------


def test_snapshot_has_no_breaking_changes() -> None:
    committed = snapshot.load()
    assert committed, f"{snapshot.SNAPSHOT_PATH} is missing; run `make contract-snapshot`"
    problems = snapshot_breaking_changes(committed, snapshot.current_schemas())
    assert not problems, (
        "breaking contract changes (v1 may only gain optional fields; publish a new version "
        "instead, docs/design.md §4.2):\n" + "\n".join(f"  - {line}" for line in problems)
    )


def test_snapshot_is_up_to_date() -> None:
    committed = snapshot.load()
    current = snapshot.current_schemas()
    if snapshot_breaking_changes(committed, current):
        pytest.skip("breaking changes are reported by test_snapshot_has_no_breaking_changes")
    stale = snapshot.stale_keys(committed, current)
    assert not stale, (
        f"contract snapshot is out of date for: {', '.join(stale)}; "
        "run `make contract-snapshot` and commit tests/contract/schemas/v1.json"
    )


def test_snapshot_file_is_stably_formatted() -> None:
    text = snapshot.SNAPSHOT_PATH.read_text(encoding="utf-8")
    assert text == snapshot.dumps(snapshot.load()), "run `make contract-snapshot`"


def test_snapshot_covers_every_event_and_payload() -> None:
    from nexus_events.events import registered

    keys = set(snapshot.current_schemas())
    assert {model.schema_name() for model in registered().values()} <= keys
    assert {
        "payload:RunConfig/1",
        "payload:RunResult/1",
        "payload:MemorySearchRequest/1",
        "payload:MemorySearchReply/1",
    } <= keys
    assert "nexus.agent.run.completed/1" in keys


def test_check_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert snapshot.main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_check_and_write_refuse_breaking_changes(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "v1.json"
    old = snapshot.current_schemas()
    old["nexus.gone.event/1"] = {"type": "object", "properties": {}}
    path.write_text(snapshot.dumps(old), encoding="utf-8")

    assert snapshot.main(["--check", "--path", str(path)]) == 1
    assert "nexus.gone.event/1: schema removed" in capsys.readouterr().err
    assert snapshot.main(["--write", "--path", str(path)]) == 1
    assert "nexus.gone.event/1" in path.read_text(encoding="utf-8")
    assert snapshot.main(["--write", "--allow-breaking", "--path", str(path)]) == 0
    assert snapshot.load(path) == snapshot.current_schemas()


def test_check_reports_stale_snapshot(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "v1.json"
    old = snapshot.current_schemas()
    del old["payload:RunResult/1"]
    path.write_text(snapshot.dumps(old), encoding="utf-8")
    assert snapshot.main(["--check", "--path", str(path)]) == 2
    err = capsys.readouterr().err
    assert "payload:RunResult/1" in err
    assert "make contract-snapshot" in err


# --- breaking_changes on hand-built models ------------------------------------------------------


def schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema(mode="validation")


def changes(old: type[BaseModel], new: type[BaseModel]) -> list[str]:
    return breaking_changes(schema(old), schema(new))


class Base(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Done(Base):
    reason: str = Field(..., description="Reason code.")
    message: str = Field("", description="Detail.")
    cost_usd: float | None = Field(None, description="Cost.")
    status: Literal["ok", "failed", "lost"] = Field("ok", description="Outcome.")


def test_identical_models_have_no_breaking_changes() -> None:
    assert changes(Done, Done) == []


def test_removing_a_field_is_breaking() -> None:
    class DoneV1b(Base):
        reason: str = Field(..., description="Reason code.")
        cost_usd: float | None = Field(None, description="Cost.")
        status: Literal["ok", "failed", "lost"] = Field("ok", description="Outcome.")

    assert changes(Done, DoneV1b) == ["$.message: property removed"]


def test_renaming_a_field_is_breaking() -> None:
    class DoneV1b(Base):
        reason_code: str = Field(..., description="Reason code.")
        message: str = Field("", description="Detail.")
        cost_usd: float | None = Field(None, description="Cost.")
        status: Literal["ok", "failed", "lost"] = Field("ok", description="Outcome.")

    assert changes(Done, DoneV1b) == [
        "$.reason: property removed",
        "$.reason_code: new required property",
    ]


def test_renaming_an_optional_field_is_still_breaking() -> None:
    class DoneV1b(Base):
        reason: str = Field(..., description="Reason code.")
        detail: str = Field("", description="Detail.")
        cost_usd: float | None = Field(None, description="Cost.")
        status: Literal["ok", "failed", "lost"] = Field("ok", description="Outcome.")

    assert changes(Done, DoneV1b) == ["$.message: property removed"]


def test_str_to_int_is_breaking() -> None:
    class DoneV1b(Base):
        reason: int = Field(..., description="Reason code.")
        message: str = Field("", description="Detail.")
        cost_usd: float | None = Field(None, description="Cost.")
        status: Literal["ok", "failed", "lost"] = Field("ok", description="Outcome.")

    assert changes(Done, DoneV1b) == ["$.reason: type changed from string to integer"]


def test_optional_to_required_is_breaking() -> None:
    class DoneV1b(Base):
        reason: str = Field(..., description="Reason code.")
        message: str = Field(..., description="Detail.")
        cost_usd: float | None = Field(None, description="Cost.")
        status: Literal["ok", "failed", "lost"] = Field("ok", description="Outcome.")

    assert changes(Done, DoneV1b) == ["$.message: optional property became required"]


def test_dropping_none_from_an_optional_is_breaking() -> None:
    class DoneV1b(Base):
        reason: str = Field(..., description="Reason code.")
        message: str = Field("", description="Detail.")
        cost_usd: float = Field(0.0, description="Cost.")
        status: Literal["ok", "failed", "lost"] = Field("ok", description="Outcome.")

    assert changes(Done, DoneV1b) == [
        "$.cost_usd: no longer accepts null (was number | null, now number)"
    ]


def test_adding_an_optional_field_passes() -> None:
    class DoneV1b(Base):
        reason: str = Field(..., description="Reason code.")
        message: str = Field("", description="Detail.")
        cost_usd: float | None = Field(None, description="Cost.")
        status: Literal["ok", "failed", "lost"] = Field("ok", description="Outcome.")
        tokens_in: int = Field(0, description="Prompt tokens.")
        runner: str | None = Field(None, description="Runner.")

    assert changes(Done, DoneV1b) == []


def test_adding_a_required_field_is_breaking() -> None:
    class DoneV1b(Base):
        reason: str = Field(..., description="Reason code.")
        message: str = Field("", description="Detail.")
        cost_usd: float | None = Field(None, description="Cost.")
        status: Literal["ok", "failed", "lost"] = Field("ok", description="Outcome.")
        runner: str = Field(..., description="Runner.")

    assert changes(Done, DoneV1b) == ["$.runner: new required property"]


def test_literal_losing_a_value_is_breaking() -> None:
    class DoneV1b(Base):
        reason: str = Field(..., description="Reason code.")
        message: str = Field("", description="Detail.")
        cost_usd: float | None = Field(None, description="Cost.")
        status: Literal["ok", "failed"] = Field("ok", description="Outcome.")

    assert changes(Done, DoneV1b) == ["$.status: enum lost values ['lost'] (now ['ok', 'failed'])"]


def test_literal_down_to_one_value_is_breaking() -> None:
    class DoneV1b(Base):
        reason: str = Field(..., description="Reason code.")
        message: str = Field("", description="Detail.")
        cost_usd: float | None = Field(None, description="Cost.")
        status: Literal["ok"] = Field("ok", description="Outcome.")

    assert changes(Done, DoneV1b) == ["$.status: enum lost values ['failed', 'lost'] (now ['ok'])"]


def test_literal_gaining_a_value_and_doc_changes_pass() -> None:
    class DoneV1b(Base):
        reason: str = Field("succeeded", description="Another description.")
        message: str = Field("none", description="Other detail.", title="Msg")
        cost_usd: float | None = Field(None, description="Cost in USD.")
        status: Literal["ok", "failed", "lost", "timed_out"] = Field("failed")

    assert changes(Done, DoneV1b) == []


def test_widening_a_type_passes() -> None:
    class Old(Base):
        count: int = Field(..., description="Count.")
        name: str = Field(..., description="Name.")

    class New(Base):
        count: float = Field(..., description="Count.")
        name: str | None = Field(..., description="Name.")

    assert changes(Old, New) == []


# Nested models, as they appear in $defs behind $ref.


class ItemV1(Base):
    memory_id: str = Field(..., description="Id.")
    text: str = Field(..., description="Text.")
    score: float | None = Field(None, description="Score.")


class ItemV1b(Base):
    memory_id: str = Field(..., description="Id.")
    text: str = Field(..., description="Text.")


class Kind(Base):
    tag: Literal["a", "b"] = Field("a", description="Tag.")


def _holders(model: type[Base]) -> tuple[type[Base], type[Base], type[Base]]:
    class Holder(Base):
        item: model = Field(..., description="One item.")  # type: ignore[valid-type]

    class ListHolder(Base):
        items: list[model] = Field(default_factory=list, description="Items.")  # type: ignore[valid-type]

    class OptionalHolder(Base):
        item: model | None = Field(None, description="Maybe an item.")  # type: ignore[valid-type]

    return Holder, ListHolder, OptionalHolder


def test_nested_model_field_removal_is_breaking() -> None:
    old_holder, old_list, old_optional = _holders(ItemV1)
    new_holder, new_list, new_optional = _holders(ItemV1b)
    assert changes(old_holder, new_holder) == ["$.item.score: property removed"]
    assert changes(old_list, new_list) == ["$.items[].score: property removed"]
    assert changes(old_optional, new_optional) == ["$.item.score: property removed"]


def test_nested_model_gaining_an_optional_field_passes() -> None:
    old_holder, old_list, old_optional = _holders(ItemV1b)
    new_holder, new_list, new_optional = _holders(ItemV1)
    assert changes(old_holder, new_holder) == []
    assert changes(old_list, new_list) == []
    assert changes(old_optional, new_optional) == []


def test_nested_type_change_in_dict_values_is_breaking() -> None:
    class Old(Base):
        labels: dict[str, str] = Field(default_factory=dict, description="Labels.")

    class New(Base):
        labels: dict[str, int] = Field(default_factory=dict, description="Labels.")

    assert changes(Old, New) == ["$.labels{*}: type changed from string to integer"]


def test_tighter_constraints_are_breaking() -> None:
    class Old(Base):
        title: str = Field(..., max_length=255, description="Title.")
        limit: int = Field(8, gt=0, description="Limit.")

    class New(Base):
        title: str = Field(..., min_length=1, max_length=100, description="Title.")
        limit: int = Field(8, gt=0, le=50, description="Limit.")

    assert changes(Old, New) == [
        "$.title: minLength narrowed from None to 1",
        "$.title: maxLength narrowed from 255 to 100",
        "$.limit: maximum narrowed from None to 50",
    ]


def test_event_becoming_a_strict_command_is_breaking() -> None:
    class Strict(Base):
        model_config = ConfigDict(frozen=True, extra="forbid")

        text: str = Field(..., description="Text.")

    class Loose(Base):
        text: str = Field(..., description="Text.")

    assert changes(Loose, Strict) == ["$: extra properties are now forbidden"]
    assert changes(Strict, Loose) == []


def test_recursive_models_terminate() -> None:
    class Node(Base):
        name: str = Field(..., description="Name.")
        children: list[Node] = Field(default_factory=list, description="Children.")

    Node.model_rebuild()
    assert changes(Node, Node) == []


def test_snapshot_level_removal_and_addition() -> None:
    old = {"a/1": schema(Done), "gone/1": schema(Done)}
    new = {"a/1": schema(Done), "new/1": schema(Kind)}
    assert snapshot_breaking_changes(old, new) == ["gone/1: schema removed"]
    assert snapshot_breaking_changes(new, {**new, "more/1": schema(Done)}) == []
