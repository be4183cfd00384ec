"""Adding a service: every file outside the services' own packages that lists them all is
either derived from the service table (written by a command, checked by a test), a test that
enumerates them for its own checks, or one of the hand-edited registration points counted
here; docs/deploy.md ("Adding a service") names each of those points.

A file lists the services when it names each long-running one of `nexus_events.runtime.services` (by
module, package, quoted name, ``<name>.yaml``, ``<name>:`` key or ``name: <name>``). A new
such file fails `test_every_file_listing_the_services_is_accounted_for` until it is derived
from the table or counted; the count only goes down (`REGISTRATION_BUDGET`).
"""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

import pytest
from nexus_events.runtime import services
from nexus_events.runtime.settings import ConsumerPrefix, ServiceSettings
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parents[2]

# Edited by hand for a new service, with what it adds there (docs/deploy.md lists the same).
# The rest of what a service brings lives in its package (services/<name>/deploy/: its compose
# service, Kubernetes manifest and Secret, its row in the compose table), spliced into the
# deploy files by scripts/render_services.py (DERIVED below).
REGISTRATION_POINTS: dict[str, str] = {
    "libs/nexus_events/src/nexus_events/runtime/services.py": "its ServiceSpec",
    "libs/nexus_events/src/nexus_events/contract/roles.py": "its party and the events it"
    " publishes and consumes",
    "libs/nexus_events/src/nexus_events/runtime/nats_config.py": "its NATS user's Access",
}
# Files a new service adds outside its package by hand: none (its Kubernetes manifest
# deploy/k8s/base/<name>.yaml, with its NetworkPolicy for an ingress port, is written from
# services/<name>/deploy/k8s.yaml by scripts/render_services.py).
NEW_FILES: tuple[str, ...] = ()
# What the registration points and new files may number at most: lower it as points are
# derived from the table; never raise it.
REGISTRATION_BUDGET = 3

# Written from the table by a command; each file's test fails while it is stale.
DERIVED: dict[str, tuple[str, str]] = {
    "README.md": (
        "uv run python -m scripts.config_reference (its configuration tables)",
        "tests/docs/test_config_reference.py",
    ),
    "deploy/nats/nats.conf": (
        "uv run python deploy/nats/render.py",
        "tests/deploy/test_nats_conf.py",
    ),
    "deploy/nats/cluster.conf": (
        "uv run python deploy/nats/render.py",
        "tests/deploy/test_nats_cluster.py",
    ),
    "deploy/k8s/base/nats/nats.conf": (
        "uv run python deploy/nats/render.py",
        "tests/deploy/test_nats_conf.py",
    ),
    "deploy/k8s/overlays/prod/nats/nats.conf": (
        "uv run python deploy/nats/render.py",
        "tests/deploy/test_nats_cluster.py",
    ),
    "deploy/compose.yaml": (
        "make render-services (uv run python -m scripts.render_services)",
        "tests/deploy/test_rendered_services.py",
    ),
    "deploy/compose.cluster.yaml": (
        "make render-services (uv run python -m scripts.render_services)",
        "tests/deploy/test_rendered_services.py",
    ),
    "deploy/k8s/base/kustomization.yaml": (
        "make render-services (uv run python -m scripts.render_services)",
        "tests/deploy/test_rendered_services.py",
    ),
    "deploy/k8s/base/secrets.yaml": (
        "make render-services (uv run python -m scripts.render_services)",
        "tests/deploy/test_rendered_services.py",
    ),
    "cli/pyproject.toml": (
        "make render-services (uv run python -m scripts.render_services)",
        "tests/deploy/test_rendered_services.py",
    ),
    "docs/deploy.md": (
        "make render-services (uv run python -m scripts.render_services)",
        "tests/deploy/test_rendered_services.py",
    ),
    "docs/asyncapi.json": ("make asyncapi", "tests/contract/test_asyncapi.py"),
    "uv.lock": ("uv lock (the new workspace member)", "uv run --frozen (refuses a stale lock)"),
}
# Tests and test scripts that name every service for their own checks: a new service is
# covered by the table-driven checks without them; they list services to exercise them.
ENUMERATING_TESTS = frozenset(
    {
        "cli/tests/unit/test_dev_status.py",
        "deploy/compose-test/run.sh",
        "tests/contract/test_roles.py",
        "tests/deploy/test_compose_smoke.py",
    }
)


def _lists_every_service(text: str) -> bool:
    def names(name: str) -> bool:
        module, package = "nexus_" + name.replace("-", "_"), "nexus-" + name
        n = re.escape(name)
        forms = (
            re.escape(module),
            re.escape(package),
            rf'"{n}"',
            rf"\b{n}\.yaml\b",
            rf"^\s*{n}:\s*$",
            rf"name: {n}\b",
        )
        return any(re.search(form, text, re.M) for form in forms)

    return all(names(spec.name) for spec in services.LONG_RUNNING)


def _listing_files() -> set[str]:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    found = set()
    for path in tracked:
        # A service's own package, and this file (it names them all in its patterns' stead).
        if path.startswith("services/") or path == "tests/deploy/test_adding_a_service.py":
            continue
        try:
            text = (ROOT / path).read_text()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        if _lists_every_service(text):
            found.add(path)
    return found


def test_every_file_listing_the_services_is_accounted_for() -> None:
    accounted = set(REGISTRATION_POINTS) | set(DERIVED) | ENUMERATING_TESTS
    found = _listing_files()
    assert found - accounted == set(), (
        "these files list every service: derive them from nexus_events.runtime.services, or count"
        " them in REGISTRATION_POINTS (and in docs/deploy.md, 'Adding a service')"
    )
    assert accounted - found == set(), "no longer listing the services: take them off"


def test_the_registration_points_stay_within_the_budget() -> None:
    assert len(REGISTRATION_POINTS) + len(NEW_FILES) <= REGISTRATION_BUDGET


@pytest.mark.parametrize("path", sorted(DERIVED))
def test_each_derived_file_names_its_command_and_an_existing_check(path: str) -> None:
    command, check = DERIVED[path]
    assert command
    if check.startswith("tests/"):
        assert (ROOT / check).is_file(), check


def test_adding_a_service_in_the_docs_names_each_registration_point() -> None:
    text = (ROOT / "docs/deploy.md").read_text()
    section = text.split("## Adding a service", 1)[1].split("\n## ", 1)[0]
    missing = [p for p in (*REGISTRATION_POINTS, *NEW_FILES) if f"`{p}`" not in section]
    assert missing == [], "docs/deploy.md's 'Adding a service' does not name these"
    assert f"{len(REGISTRATION_POINTS) + len(NEW_FILES)} files" in section


# Long-running services whose settings are not a ServiceSettings, and why: the scheduler's
# drain and consumer settings have their own names and it has no database, so the shared
# fields would be new variables it does not read.
NOT_SERVICE_SETTINGS = {"scheduler"}


@pytest.mark.parametrize("spec", services.LONG_RUNNING, ids=lambda s: s.name)
def test_a_services_settings_extend_service_settings_and_change_only_defaults(
    spec: services.ServiceSpec,
) -> None:
    module, name = spec.settings[0].split(":")
    cls = getattr(importlib.import_module(module), name)
    if spec.name in NOT_SERVICE_SETTINGS:
        assert not issubclass(cls, ServiceSettings)
        return
    assert issubclass(cls, ServiceSettings)
    for field, base in ServiceSettings.model_fields.items():
        own = cls.model_fields[field]
        assert (own.annotation, own.metadata, own.description) == (
            base.annotation,
            base.metadata,
            base.description,
        ), f"{name}.{field} re-declares more than its default"
    assert cls.model_fields["health_port"].default == spec.health_port


def test_a_service_that_names_no_health_port_does_not_load() -> None:
    class Forgetful(ServiceSettings):
        consumer_prefix: ConsumerPrefix = "forgetful"

    with pytest.raises(ValidationError, match="health_port"):
        Forgetful()
