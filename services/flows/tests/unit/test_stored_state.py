"""The typed state keeps the stored document: states written by the dict-based fold (before
`FlowState`, kept in data/states_before_typing.json with the events that made them) load,
write back as the same JSON, and the typed fold of the same events writes that JSON too."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from nexus_events.contract.subjects import Family
from nexus_events.events.base import registered

from nexus_flows.records import FlowState
from nexus_flows.state import fold

GOLDEN: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "states_before_typing.json").read_text()
)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def stored_at(n: int) -> datetime:
    # As the golden states were made: some times with microseconds, some without.
    return T0 + timedelta(seconds=n, microseconds=0 if n % 2 else 123456)


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_an_old_stored_state_loads_and_writes_back_the_same(case: str) -> None:
    stored = GOLDEN[case]["state"]
    state = FlowState.load(json.dumps(stored))
    assert json.loads(json.dumps(state.document(), sort_keys=True)) == stored


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_the_typed_fold_writes_what_the_dict_fold_wrote(case: str) -> None:
    events = registered()
    state: FlowState | None = None
    for n, raw in enumerate(GOLDEN[case]["events"]):
        event = events[(Family.FLOW, raw["name"])].model_validate(raw["body"])
        state = fold(state, "f", event, stored_at(n))
    assert state is not None
    assert json.loads(json.dumps(state.document(), sort_keys=True)) == GOLDEN[case]["state"]


def test_ended_at_is_written_only_once_the_flow_ended() -> None:
    ended = {k: v for k, v in GOLDEN.items() if "ended_at" in v["state"]}
    live = {k: v for k, v in GOLDEN.items() if "ended_at" not in v["state"]}
    assert ended
    assert live
    for case in live.values():
        assert "ended_at" not in FlowState.load(json.dumps(case["state"])).document()
