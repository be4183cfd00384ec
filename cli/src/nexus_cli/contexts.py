"""Contexts, like kubectl's: named places a CLI talks to, kept in a small YAML file.

The file is ``$NEXUS_CONTEXT_FILE`` or ``~/.config/nexus/contexts.yaml``::

    current: dev
    contexts:
      dev: {dev: true}                 # the dev stack under ./.nexus (or $NEXUS_DEV_HOME)
      staging: {nats_url: "nats://nats.staging:4222", database_url: "postgresql://..."}

Without a file there is one context, ``dev``. A dev context finds its URLs in the dev stack's
state file, so ``nexus dev up`` on any ports just works.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus_cli.errors import CliError, ExitCode

DEFAULT_CONTEXT = "dev"
DEV_HOME_DIR = ".nexus"


class ContextSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dev: bool = Field(False, description="Use the dev stack of the working directory.")
    dev_home: str | None = Field(None, description="The dev stack directory (default ./.nexus).")
    nats_url: str | None = Field(None, description="NATS server URL(s).")
    database_url: str | None = Field(None, description="PostgreSQL DSN (projections, doctor).")


class ContextFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    current: str = DEFAULT_CONTEXT
    contexts: dict[str, ContextSpec] = Field(
        default_factory=lambda: {DEFAULT_CONTEXT: ContextSpec(dev=True)}
    )


def context_file_path() -> Path:
    env = os.environ.get("NEXUS_CONTEXT_FILE")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "nexus" / "contexts.yaml"


def dev_home(spec: ContextSpec | None = None) -> Path:
    """The dev stack directory: the context's, else ``$NEXUS_DEV_HOME``, else ``./.nexus``."""
    if spec is not None and spec.dev_home:
        return Path(spec.dev_home).resolve()
    return Path(os.environ.get("NEXUS_DEV_HOME") or DEV_HOME_DIR).resolve()


def load_contexts(path: Path | None = None) -> ContextFile:
    path = path or context_file_path()
    if not path.exists():
        return ContextFile()
    try:
        data = yaml.safe_load(path.read_text()) or {}
        loaded = ContextFile.model_validate(data)
    except (yaml.YAMLError, ValidationError, OSError) as exc:
        raise CliError(
            f"cannot read the context file {path}: {str(exc).splitlines()[0]}",
            hint="fix or delete it; `nexus context ls` shows what is read",
            code=ExitCode.INVALID,
        ) from None
    loaded.contexts.setdefault(DEFAULT_CONTEXT, ContextSpec(dev=True))
    return loaded


def save_contexts(contexts: ContextFile, path: Path | None = None) -> Path:
    path = path or context_file_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    body = contexts.model_dump(mode="json", exclude_defaults=False)
    body["contexts"] = {
        name: spec.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        for name, spec in contexts.contexts.items()
    }
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def resolve(name: str | None) -> tuple[str, ContextSpec]:
    """The named context (or the current one); exit 3 if there is no such context."""
    contexts = load_contexts()
    chosen = name or os.environ.get("NEXUS_CONTEXT") or contexts.current
    spec = contexts.contexts.get(chosen)
    if spec is None:
        raise CliError(
            f"no context {chosen!r}",
            hint=f"known contexts: {', '.join(sorted(contexts.contexts))}",
            code=ExitCode.NOT_FOUND,
        )
    return chosen, spec
