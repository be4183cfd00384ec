#!/usr/bin/env bash
# `make demo`: the whole loop on this machine, in a couple of minutes.
#
# Starts the dev stack (NATS, PostgreSQL, core, scheduler; plus the offline scripted model
# server when no model is configured), applies examples/skills and examples/agents, runs the
# implementer on a fresh git copy of examples/demo-repo until it has fixed the failing test on
# the branch nexus/<run_id>, shows the board and the run's result, and stops the stack, also
# when something fails on the way. Everything lives under .demo/ (the stack is wiped at the
# start; the fixed repository stays there to look at).
#
# Model: NEXUS_LLM_BASE_URL (an OpenAI-compatible server) and/or OPENAI_API_KEY select a real
# model (NEXUS_LLM_MODEL overrides the agents' model name); with neither the offline model.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
UV="${UV:-uv}"
DEMO="$ROOT/.demo"
REPO="$DEMO/demo-repo"
RUN_ID="demo-$(date +%Y%m%d-%H%M%S)"
TASK_ID="DEMO-1"

# Only the demo's own stack and the default dev context: never a context or URL from outside.
unset NEXUS_NATS_URL NEXUS_DATABASE_URL NEXUS_CONTEXT
export NEXUS_DEV_HOME="$DEMO/stack"
export NEXUS_CONTEXT_FILE="$DEMO/contexts.yaml"
export OTEL_SDK_DISABLED=true
# The runner's process tree inherits this; a run is short, so heartbeats are frequent.
export NEXUS_HEARTBEAT_INTERVAL="${NEXUS_HEARTBEAT_INTERVAL:-5}"

nexus() { $UV run --frozen nexus "$@"; }
say() { printf '\n\033[1;36m==> %s\033[0m\n' "$*"; }

stop_stack() {
  local code=$?
  say "stopping the dev stack"
  nexus dev down || true
  if [ "$code" -ne 0 ]; then
    printf '\n\033[1;31mdemo FAILED (exit %s)\033[0m; logs: %s/logs\n' "$code" "$NEXUS_DEV_HOME" >&2
  fi
  exit "$code"
}

# A stack left over from an interrupted demo: stop it before wiping its directory.
if [ -f "$NEXUS_DEV_HOME/state.json" ]; then
  nexus dev down >/dev/null 2>&1 || true
fi
rm -rf "$DEMO"
mkdir -p "$DEMO/agents"

# --- the model ----------------------------------------------------------------------------
UP_FLAGS=()
cp examples/agents/*.yaml "$DEMO/agents/"
if [ -n "${NEXUS_LLM_BASE_URL:-}${OPENAI_API_KEY:-}" ]; then
  URL="${NEXUS_LLM_BASE_URL:-https://api.openai.com/v1 (OpenAI)}"
  MODEL="${NEXUS_LLM_MODEL:-gpt-4o-mini}"
  if [ -n "${NEXUS_LLM_MODEL:-}" ]; then
    sed -i.bak "s|^  name: gpt-4o-mini$|  name: ${NEXUS_LLM_MODEL}|" "$DEMO"/agents/*.yaml
    rm -f "$DEMO"/agents/*.bak
  fi
  say "model: ${MODEL} at ${URL} (from NEXUS_LLM_BASE_URL / OPENAI_API_KEY)"
else
  UP_FLAGS+=(--offline-model)
  say "no model configured (NEXUS_LLM_BASE_URL / OPENAI_API_KEY unset): using the OFFLINE" \
    "scripted model server shipped for the demo; it replays a fixed fix, it is not an LLM"
fi

# --- the repository the implementer works on ----------------------------------------------
say "a fresh git repository from examples/demo-repo: $REPO"
cp -R examples/demo-repo "$REPO"
git -C "$REPO" init --quiet -b main
git -C "$REPO" -c user.name="Nexus Demo" -c user.email="demo@nexus.local" add -A
git -C "$REPO" -c user.name="Nexus Demo" -c user.email="demo@nexus.local" \
  commit --quiet -m "calc: add and mul (add is broken)"
(cd "$REPO" && "$ROOT/.venv/bin/python" -m pytest 2>&1 | tail -n 1) || true

# --- the stack ----------------------------------------------------------------------------
trap stop_stack EXIT
say "nexus dev up ${UP_FLAGS[*]:-}"
nexus dev up "${UP_FLAGS[@]}"

say "nexus skills apply -f examples/skills && nexus agents apply -f examples/agents"
nexus skills apply -f examples/skills
nexus agents apply -f "$DEMO/agents"
nexus agents ls

say "nexus task create + nexus run implementer --follow"
nexus task create "Fix the failing test in calc" --id "$TASK_ID" \
  --description "test_calc.py::test_add fails: add(2, 3) is not 5"
nexus run implementer --task "$TASK_ID" --repo "$REPO" --run-id "$RUN_ID" --follow --wait 300 \
  --input "The test suite of this project fails (test_add). Find the bug, fix it in the code \
and make the tests pass."

say "the fix, on the branch nexus/$RUN_ID of $REPO"
git -C "$REPO" log --oneline main..."nexus/$RUN_ID"
git -C "$REPO" diff main "nexus/$RUN_ID" -- calc.py
git -C "$REPO" checkout --quiet "nexus/$RUN_ID"
(cd "$REPO" && "$ROOT/.venv/bin/python" -m pytest 2>&1 | tail -n 1)
git -C "$REPO" checkout --quiet main

say "nexus board"
nexus board
say "nexus attach $RUN_ID"
nexus attach "$RUN_ID"

printf '\n\033[1;32mdemo OK\033[0m: run %s completed; the fix is on nexus/%s in %s\n' \
  "$RUN_ID" "$RUN_ID" "$REPO"
