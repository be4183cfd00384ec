# Nexus: one entry point for setting up, testing, linting and benchmarking.
SHELL := /bin/bash
# uv from PATH if there is one, else bootstrapped into .tools/ (never the system Python).
TOOLS := .tools
UV ?= $(or $(shell command -v uv 2>/dev/null),$(TOOLS)/bin/uv)
UV_BOOTSTRAP := $(if $(filter $(TOOLS)/bin/uv,$(UV)),$(TOOLS)/bin/uv)
export XDG_RUNTIME_DIR ?= /tmp/nexus-xdg-$(shell id -u)

.PHONY: setup test lint bench demo demo-run smoke compose-test contract-snapshot asyncapi render-services clean

setup: .venv/.synced
	@bash scripts/ensure_bwrap.sh
	@bash scripts/ensure_chromium.sh

$(TOOLS)/bin/uv:
	bash scripts/bootstrap_uv.sh $(TOOLS)

.venv/.synced: pyproject.toml uv.lock $(wildcard libs/*/pyproject.toml services/*/pyproject.toml cli/pyproject.toml) | $(UV_BOOTSTRAP)
	@mkdir -p -m 700 $(XDG_RUNTIME_DIR)
	$(UV) sync --all-packages --frozen
	@touch $@

# Workers of the suite: its tests mostly wait on real servers and the clock, not the CPU, so
# three share two cores (libs/nexus_testing/src/nexus_testing/distribution.py).
TEST_WORKERS ?= 3
test: setup
	$(UV) run --frozen pytest -n $(TEST_WORKERS) --dist loadgroup --durations=15

lint: setup
	$(UV) run --frozen ruff check libs services cli tests bench scripts examples
	$(UV) run --frozen ruff format --check libs services cli tests bench scripts examples
	$(UV) run --frozen mypy -p nexus_events -p nexus_testing $(foreach p,$(wildcard services/*/src/nexus_*),-p $(notdir $(p))) -p nexus_cli

bench: setup
	$(UV) run --frozen python -m bench

# The main job: the dev stack, the example agents and flows, the feature flow carrying a task
# through planner, implementer, reviewer (one round of changes) and tester on a copy of
# examples/demo-repo, the branches, the board; the stack is stopped even on failure.
demo: setup
	UV="$(UV)" bash examples/demo.sh flow

# The single-run demo: one implementer run that fixes examples/demo-repo's failing test.
demo-run: setup
	UV="$(UV)" bash examples/demo.sh run

# A smoke of the bus alone on a real embedded NATS + PostgreSQL.
smoke: setup
	$(UV) run --frozen python -m scripts.smoke

# deploy/compose.yaml for real: its own dockerd, stand-in base images when no registry answers,
# build, up, a run and a memory search through the stack, down -v (docs/deploy.md). As root.
compose-test: setup
	bash deploy/compose-test/run.sh

contract-snapshot: setup
	$(UV) run --frozen python -m tests.contract.snapshot --write

# docs/asyncapi.json: the AsyncAPI 3.0.0 document of the contract (tests/contract fails while stale).
asyncapi: setup
	$(UV) run --frozen python -m nexus_events.contract.asyncapi --write

# The deploy files' service sections and manifests, from nexus_events.runtime.services and each
# service's services/<name>/deploy/ (tests/deploy/test_rendered_services.py fails while stale).
render-services: setup
	$(UV) run --frozen python -m scripts.render_services

clean:
	rm -rf .venv .tools .pytest_cache .mypy_cache .ruff_cache
