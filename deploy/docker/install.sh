#!/bin/sh
# install.sh PKG...: a virtualenv at /app/.venv with the locked third-party deps of the given
# services (uv export --frozen: exactly uv.lock) plus nexus_events and the services; `cli` is
# the `nexus` CLI (./cli, nexus-cli) without its dev-stack extra.
# Each service's pyproject names the nexus-events extras it needs (e.g. the scheduler
# `nexus-events[health]`, the runner none), and the export installs only those: the runner
# image has no asyncpg, FastStream, Prometheus client or PyYAML.
# Run by deploy/docker/Dockerfile's build stages from /src (the repository's sources).
set -eu
uv venv /app/.venv
: > /tmp/req.txt
for p in "$@"; do
  uv export --frozen --no-dev --no-hashes --package "nexus-$p" --no-emit-workspace >> /tmp/req.txt
done
uv pip install --python /app/.venv/bin/python -r /tmp/req.txt
targets=""
for p in "$@"; do
  case $p in
    cli) targets="$targets ./cli" ;;
    *) targets="$targets ./services/$p" ;;
  esac
done
uv pip install --python /app/.venv/bin/python --no-deps ./libs/nexus_events $targets
