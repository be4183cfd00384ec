"""JSON Schema snapshot of the whole event contract (docs/design.md §4.2).

Every registered event is keyed by its ``Nexus-Schema`` name (``nexus.agent.run.completed/1``);
the payload models that travel inside events or over request/reply are keyed
``payload:<Model>/<version>``. The snapshot is committed in ``schemas/v1.json``.

    python -m tests.contract.snapshot --write   # (make contract-snapshot) refresh the file
    python -m tests.contract.snapshot --check   # exit 1 on breaking changes, 2 if only stale

``--write`` refuses to record a breaking change over the committed file (v1 only gains optional
fields; anything else is a new versioned schema) unless ``--allow-breaking`` is given, e.g. when
a superseded schema is finally retired.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nexus_events.events import (
    MemorySearchReply,
    MemorySearchRequest,
    RunConfig,
    RunResult,
    queries,
    registered,
    spend,
)
from nexus_events.events.base import SCHEMA_VERSION
from nexus_events.events.warm import WarmClaim, WarmHandoff
from pydantic import BaseModel

from tests.contract.compat import snapshot_breaking_changes

SNAPSHOT_PATH = Path(__file__).parent / "schemas" / "v1.json"

# Contract models that are not events themselves: nested in events or sent over request/reply.
PAYLOADS: tuple[type[BaseModel], ...] = (
    RunConfig,
    RunResult,
    MemorySearchRequest,
    MemorySearchReply,
    *queries.REQUESTS,
    *queries.REPLIES,
    *spend.REQUESTS,
    *spend.REPLIES,
    WarmHandoff,
    WarmClaim,
)

Snapshot = dict[str, dict[str, Any]]


def payload_key(model: type[BaseModel], version: int = SCHEMA_VERSION) -> str:
    return f"payload:{model.__name__}/{version}"


def current_schemas() -> Snapshot:
    """The JSON Schema (validation mode) of every contract model, keyed by schema name."""
    schemas: Snapshot = {}
    models: list[tuple[str, type[BaseModel]]] = [
        (event.schema_name(), event) for event in registered().values()
    ]
    models += [(payload_key(model), model) for model in PAYLOADS]
    for key, model in models:
        if key in schemas:
            raise ValueError(f"two contract models share the schema name {key!r}")
        schemas[key] = model.model_json_schema(mode="validation")
    # A JSON round trip gives exactly what a load of the written file gives (tuples, enums...).
    roundtrip: Snapshot = json.loads(dumps(schemas))
    return roundtrip


def dumps(snapshot: Snapshot) -> str:
    """The stable file text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(snapshot, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def load(path: Path = SNAPSHOT_PATH) -> Snapshot:
    if not path.exists():
        return {}
    data: Snapshot = json.loads(path.read_text(encoding="utf-8"))
    return data


def stale_keys(committed: Snapshot, current: Snapshot) -> list[str]:
    """Schema names that differ between the two snapshots in any way (added, removed, changed)."""
    return sorted(
        key for key in committed.keys() | current.keys() if committed.get(key) != current.get(key)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.contract.snapshot", description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the snapshot file")
    mode.add_argument("--check", action="store_true", help="compare it with the current models")
    parser.add_argument(
        "--allow-breaking", action="store_true", help="with --write: record breaking changes too"
    )
    parser.add_argument("--path", type=Path, default=SNAPSHOT_PATH, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    committed = load(args.path)
    current = current_schemas()
    breaking = snapshot_breaking_changes(committed, current)

    if breaking and not (args.write and args.allow_breaking):
        print(f"{len(breaking)} breaking contract change(s) against {args.path}:", file=sys.stderr)
        for line in breaking:
            print(f"  - {line}", file=sys.stderr)
        print(
            "v1 schemas may only gain optional fields; publish a new version instead "
            "(docs/design.md §4.2).",
            file=sys.stderr,
        )
        return 1

    if args.write:
        args.path.parent.mkdir(parents=True, exist_ok=True)
        text = dumps(current)
        if args.path.exists() and args.path.read_text(encoding="utf-8") == text:
            print(f"{args.path}: up to date ({len(current)} schemas)")
        else:
            args.path.write_text(text, encoding="utf-8")
            print(f"{args.path}: wrote {len(current)} schemas")
        return 0

    stale = stale_keys(committed, current)
    if stale:
        print(
            f"snapshot is stale (compatible changes only) in: {', '.join(stale)}; "
            "run `make contract-snapshot`",
            file=sys.stderr,
        )
        return 2
    print(f"{args.path}: up to date ({len(current)} schemas)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
