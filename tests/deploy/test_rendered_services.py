"""The deploy files' service sections: what scripts/render_services.py writes from the service
table and each service's fragments (services/<name>/deploy/), and a clear refusal when a
fragment or a marker is missing."""

from __future__ import annotations

import re

import pytest
from nexus_events.runtime import services

from scripts import render_services

RENDERED = {
    str(path.relative_to(render_services.ROOT)): text
    for path, text in render_services.rendered().items()
}


@pytest.mark.parametrize("path", sorted(RENDERED))
def test_the_committed_file_is_the_rendered_one(path: str) -> None:
    committed = (render_services.ROOT / path).read_text()
    assert committed == RENDERED[path], f"{path} is stale: run make render-services"


def test_each_long_running_service_has_its_manifest_in_the_kustomization() -> None:
    text = (render_services.ROOT / "deploy/k8s/base/kustomization.yaml").read_text()
    for spec in services.LONG_RUNNING:
        assert f"  - {spec.name}.yaml\n" in text


def test_a_section_is_rewritten_between_its_markers_only() -> None:
    text = "keep\n  # BEGIN GENERATED a: note\n  old\n  # END GENERATED a\nkeep too\n"
    spliced = render_services.splice(text, {"a": lambda: "  new\n"}, "x")
    assert spliced == "keep\n  # BEGIN GENERATED a: note\n  new\n  # END GENERATED a\nkeep too\n"


def test_a_file_without_its_markers_is_refused() -> None:
    with pytest.raises(render_services.RenderError, match=r"x: no BEGIN/END GENERATED .*'a'"):
        render_services.splice("nothing here\n", {"a": lambda: ""}, "x")


def test_a_service_without_its_fragment_is_refused() -> None:
    spec = services.ServiceSpec("nowhere", "nexus_nowhere", "nexus-nowhere", "", ())
    missing = re.escape("services/nowhere/deploy/compose.yaml is missing")
    with pytest.raises(render_services.RenderError, match=missing):
        render_services.fragment(spec, "compose.yaml")
