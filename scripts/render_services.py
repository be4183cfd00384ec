"""Write the deploy files' service sections from the service table and each service's fragments.

    uv run python -m scripts.render_services      (make render-services)

Each long-running service of `nexus_events.runtime.services` keeps what is its own in its package,
``services/<name>/deploy/``: ``compose.yaml`` (its compose service), ``compose-table.md`` (its
row in docs/deploy.md's compose table), ``k8s.yaml`` (its Kubernetes manifest, copied to
deploy/k8s/base/<name>.yaml because kustomize reads nothing outside its root) and
``k8s-secret.yaml`` (its ``<name>-env`` Secret). What lists every service (the NATS
passwords, the cluster's clients, kustomize's resources, the `dev-stack` extra and the uv
sources) is written from the table and `nexus_events.runtime.nats_config`. The hand-written rest of
each file stays as it is: only the lines between a ``BEGIN GENERATED <section>`` comment and
its ``END GENERATED <section>`` are rewritten. tests/deploy/test_rendered_services.py fails
while a committed file differs from what this renders.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from nexus_events.runtime import services
from nexus_events.runtime.nats_config import AUTH_CALLOUT_ISSUER_VARIABLE, password_variable, users
from nexus_events.runtime.services import ServiceSpec

ROOT = Path(__file__).resolve().parents[1]

# The dev default of the auth callout issuer's public key: it pairs with the seed in
# services/scheduler/deploy/compose.yaml (docs/deploy.md, "The run credential").
DEV_ISSUER = "ACWL6UMQIXAUTPM4K32M3HUHK3YFLDSXJ6XFEWOVRIQ6GTR7FZZHHR4D"

_SECTION = re.compile(
    r"^(?P<begin>[ \t]*(?:#|<!--) BEGIN GENERATED (?P<name>[\w-]+)\b[^\n]*\n)"
    r"(?P<body>.*?)"
    r"^(?P<end>[ \t]*(?:#|<!--) END GENERATED (?P=name)\b[^\n]*)$",
    re.M | re.S,
)


class RenderError(Exception):
    """A file or fragment the render needs is missing or lacks its markers."""


def fragment(spec: ServiceSpec, name: str) -> str:
    """The text of one of a service's fragments (``services/<name>/deploy/<name>``)."""
    path = ROOT / "services" / spec.name / "deploy" / name
    if not path.is_file():
        raise RenderError(
            f"{path.relative_to(ROOT)} is missing: every long-running service of"
            " nexus_events.runtime.services keeps it (docs/deploy.md, 'Adding a service')"
        )
    return path.read_text()


def _indent(text: str, by: str) -> str:
    return "".join(by + line if line.strip() else line for line in text.splitlines(True))


def nats_passwords(value: Callable[[str, str], str], issuer_note: str) -> str:
    """Every NATS user's password variable, then the auth callout issuer's public key."""
    lines = [
        f"{password_variable(u)}: {value(password_variable(u), u + '-dev-password')}\n"
        for u in users()
    ]
    lines.append(issuer_note)
    lines.append(
        f"{AUTH_CALLOUT_ISSUER_VARIABLE}: {value(AUTH_CALLOUT_ISSUER_VARIABLE, DEV_ISSUER)}\n"
    )
    return _indent("".join(lines), "  ")


_COMPOSE_ISSUER_NOTE = (
    "# The auth callout issuer's public key; the scheduler holds its seed"
    " (NEXUS_AUTH_CALLOUT_SEED).\n"
)
_TEMPLATE_ISSUER_NOTE = (
    "# The auth callout issuer's public account nkey (A...); the scheduler holds its seed. The\n"
    '# server does not start without a valid key here (docs/deploy.md, "The run credential").\n'
)


def _compose_default(variable: str, default: str) -> str:
    return f"${{{variable}:-{default}}}"


def _template(_variable: str, _default: str) -> str:
    return "REPLACE_ME"


def compose_services() -> str:
    return "\n".join(_indent(fragment(s, "compose.yaml"), "  ") for s in services.LONG_RUNNING)


def cluster_clients() -> str:
    """Each service on the cluster: every node's URL and three replicas."""
    blocks = []
    for spec in services.LONG_RUNNING:
        note = (
            "  # Its runs inherit both variables (runner_env passes NEXUS_NATS_* and"
            " NEXUS_STREAMS_*).\n"
            if spec.spawns
            else ""
        )
        blocks.append(
            f"{note}  {spec.name}:\n    <<: *cluster-client\n    environment:\n"
            f'      NEXUS_NATS_URL: *cluster-nats-url\n      NEXUS_STREAMS_REPLICAS: "3"\n'
        )
    return "\n".join(blocks)


def k8s_resources() -> str:
    return "".join(f"  - {spec.name}.yaml\n" for spec in services.LONG_RUNNING)


def service_secrets() -> str:
    return "".join(fragment(s, "k8s-secret.yaml") + "---\n" for s in services.LONG_RUNNING)


def dev_stack() -> str:
    return "".join(f'  "{spec.package}",\n' for spec in services.SERVICES)


def uv_sources() -> str:
    return "".join(f"{spec.package} = {{ workspace = true }}\n" for spec in services.SERVICES)


def compose_table() -> str:
    rows = "".join(fragment(s, "compose-table.md") for s in services.LONG_RUNNING)
    return f"\n| service | what |\n|---|---|\n{rows}\n"


# Each file's generated sections, by the name its markers carry.
SECTIONS: dict[str, dict[str, Callable[[], str]]] = {
    "deploy/compose.yaml": {
        "nats-passwords": lambda: nats_passwords(_compose_default, _COMPOSE_ISSUER_NOTE),
        "services": compose_services,
    },
    "deploy/compose.cluster.yaml": {
        "nats-passwords": lambda: nats_passwords(_compose_default, _COMPOSE_ISSUER_NOTE),
        "services": cluster_clients,
    },
    "deploy/k8s/base/kustomization.yaml": {"resources": k8s_resources},
    "deploy/k8s/base/secrets.yaml": {
        "nats-users": lambda: nats_passwords(_template, _TEMPLATE_ISSUER_NOTE),
        "service-secrets": service_secrets,
    },
    "cli/pyproject.toml": {"dev-stack": dev_stack, "uv-sources": uv_sources},
    "docs/deploy.md": {"services": compose_table},
}


def splice(text: str, sections: dict[str, Callable[[], str]], where: str) -> str:
    """`text` with the body of each generated section replaced by what its renderer writes."""
    found: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in sections:
            raise RenderError(f"{where}: no renderer for the generated section {name!r}")
        found.add(name)
        return match["begin"] + sections[name]() + match["end"]

    spliced = _SECTION.sub(replace, text)
    if missing := sorted(set(sections) - found):
        raise RenderError(f"{where}: no BEGIN/END GENERATED markers for {missing}")
    return spliced


def manifest(spec: ServiceSpec) -> str:
    source = f"services/{spec.name}/deploy/k8s.yaml"
    return f"# Written by scripts/render_services.py from {source}: edit that file.\n" + fragment(
        spec, "k8s.yaml"
    )


def rendered() -> dict[Path, str]:
    """What each file this script writes should hold."""
    files = {
        ROOT / path: splice((ROOT / path).read_text(), sections, path)
        for path, sections in SECTIONS.items()
    }
    for spec in services.LONG_RUNNING:
        files[ROOT / f"deploy/k8s/base/{spec.name}.yaml"] = manifest(spec)
    return files


def main() -> int:
    try:
        files = rendered()
    except RenderError as error:
        print(f"render_services: {error}", file=sys.stderr)
        return 1
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
