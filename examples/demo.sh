#!/usr/bin/env bash
# `make demo` / `make demo-run`: the whole loop on this machine, in a minute or two.
#
#   bash examples/demo.sh [flow|run]
#
# flow (the default, `make demo`): the feature flow (examples/flows/feature.yaml, docs/flows.md)
#   carries task DEMO-1 through the team of examples/agents: the planner plans, the implementer
#   fixes the failing test, the reviewer asks for a test of negative numbers, the implementer
#   adds it in round 2 on top of round 1's branch, the reviewer approves, the tester runs the
#   tests. Then it shows `nexus flow show`, the branches the implementer pushed (running the
#   tests on the last one) and the board.
# run (`make demo-run`): one run of the implementer with `nexus run --follow`, which fixes the
#   failing test on the branch nexus/<run_id>; then the board, `nexus attach`, and a replay of
#   the run that reproduces it from its recording (docs/lab.md).
#
# Both start the dev stack (NATS, PostgreSQL, core, scheduler, flows; plus the offline scripted
# model server when no model is configured), apply examples/skills and examples/agents, work
# on a fresh git copy of examples/demo-repo, and stop the stack, also when something fails on
# the way. Everything lives under .demo/ (the stack is wiped at the start; the repository
# with the work on its branches stays there to look at).
#
# Model: NEXUS_LLM_BASE_URL (an OpenAI-compatible server) and/or OPENAI_API_KEY select a real
# model (NEXUS_LLM_MODEL overrides the agents' model name); with neither the offline model.
set -euo pipefail

MODE="${1:-flow}"
case "$MODE" in
  flow | run) ;;
  *)
    echo "usage: $0 [flow|run]  (flow: the feature flow, the default; run: one implementer run)" >&2
    exit 2
    ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
UV="${UV:-uv}"
DEMO="$ROOT/.demo"
REPO="$DEMO/demo-repo"
STAMP="$(date +%Y%m%d-%H%M%S)"
RUN_ID="demo-$STAMP"
# '_' not '-' in a flow run id: its step runs are <flow run id>-<step>-r<round>.
FLOW_RUN_ID="demo_${STAMP//-/_}"
TASK_ID="DEMO-1"

# Only the demo's own stack and the default dev context: never a context or URL from outside.
unset NEXUS_NATS_URL NEXUS_DATABASE_URL NEXUS_CONTEXT
export NEXUS_DEV_HOME="$DEMO/stack"
export NEXUS_CONTEXT_FILE="$DEMO/contexts.yaml"
export OTEL_SDK_DISABLED=true
# The runner's process tree inherits this; a run is short, so heartbeats are frequent.
export NEXUS_HEARTBEAT_INTERVAL="${NEXUS_HEARTBEAT_INTERVAL:-5}"

# Piped into a file or CI log, tables get room instead of an 80-column squeeze.
[ -t 1 ] || export COLUMNS="${COLUMNS:-160}"

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

say "nexus budgets apply -f examples/budgets: each task's total, team alpha's month (docs/spend.md)"
nexus budgets apply -f examples/budgets

say "nexus task create $TASK_ID"
nexus task create "Fix the failing test in calc" --id "$TASK_ID" \
  --description "test_calc.py::test_add fails: add(2, 3) is not 5"

# The tests of the repository on BRANCH, back on main afterwards.
tests_on() {
  git -C "$REPO" checkout --quiet "$1"
  (cd "$REPO" && "$ROOT/.venv/bin/python" -m pytest -p no:cacheprovider 2>&1 | tail -n 1)
  git -C "$REPO" checkout --quiet main
}

demo_run() {
  say "nexus run implementer --follow"
  nexus run implementer --task "$TASK_ID" --repo "$REPO" --run-id "$RUN_ID" --follow --wait 300 \
    --input "The test suite of this project fails (test_add). Find the bug, fix it in the code \
and make the tests pass."

  say "the fix, on the branch nexus/$RUN_ID of $REPO"
  git -C "$REPO" log --oneline main..."nexus/$RUN_ID"
  git -C "$REPO" diff main "nexus/$RUN_ID" -- calc.py
  tests_on "nexus/$RUN_ID"

  say "nexus board"
  nexus board
  say "nexus attach $RUN_ID"
  nexus attach "$RUN_ID"

  say "nexus replay $RUN_ID --wait: the same task again, each model reply served from the recording"
  nexus replay "$RUN_ID" --wait

  say "nexus usage --by agent and the task's budget: what the runs spent (docs/spend.md)"
  nexus usage --by agent
  nexus budgets show per-task

  printf '\n\033[1;32mdemo OK\033[0m: run %s completed; the fix is on nexus/%s in %s\n' \
    "$RUN_ID" "$RUN_ID" "$REPO"
}

demo_flow() {
  say "nexus flows apply -f examples/flows"
  nexus flows apply -f examples/flows
  nexus flows ls

  say "nexus flow run feature --follow: plan, implement, review (changes loop back), test"
  nexus flow run feature --task "$TASK_ID" --repo "$REPO" --flow-run-id "$FLOW_RUN_ID" \
    --follow --wait 900 \
    --input "The test suite of this project fails (test_add). Find the bug, fix it in the code \
and make the tests pass."

  say "nexus flow show $FLOW_RUN_ID"
  nexus flow show "$FLOW_RUN_ID"

  # The implementer's last round: the branch the reviewer approved and the tester tested.
  local last
  last="$(nexus flow show "$FLOW_RUN_ID" -o json | "$ROOT/.venv/bin/python" -c '
import json, sys
steps = json.load(sys.stdin)["steps"]
print([s["run_id"] for s in steps if s["step"] == "implement"][-1])
')"
  say "the branches the implementer pushed to $REPO (each round starts from the last)"
  git -C "$REPO" branch --list "nexus/$FLOW_RUN_ID-*"
  git -C "$REPO" log --oneline --reverse "main..nexus/$last"
  git -C "$REPO" diff --stat main "nexus/$last"
  say "the tests on nexus/$last"
  tests_on "nexus/$last"

  say "nexus board"
  nexus board

  say "nexus usage --by agent --team alpha and team alpha's month (the flow's team)"
  nexus usage --by agent --team alpha
  nexus budgets show alpha-monthly

  printf '\n\033[1;32mdemo OK\033[0m: flow run %s completed; the work is on nexus/%s in %s\n' \
    "$FLOW_RUN_ID" "$last" "$REPO"
}

"demo_$MODE"
