"""plane-sync's flow label setting: its default, and no overlap with the agent label prefix."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from nexus_plane_sync.config import PlaneSyncSettings

REQUIRED: dict[str, Any] = {
    "plane_url": "http://plane.example",
    "plane_api_key": "k",
    "plane_workspace": "w",
    "plane_project_id": "p",
    "plane_webhook_secret": "s",
}


def test_the_flow_prefix_defaults_to_flow() -> None:
    assert PlaneSyncSettings(**REQUIRED).plane_flow_prefix == "flow:"


@pytest.mark.parametrize(("agent", "flow"), [("agent:", "agent:"), ("x:", "x:flow:"), ("run", "r")])
def test_overlapping_prefixes_are_refused(agent: str, flow: str) -> None:
    with pytest.raises(ValidationError, match="overlap"):
        PlaneSyncSettings(**REQUIRED, plane_trigger_prefix=agent, plane_flow_prefix=flow)
