# Nexus: one entry point for setting up, testing, linting and benchmarking.
SHELL := /bin/bash
UV ?= $(shell command -v uv 2>/dev/null || echo python3 -m uv)
export XDG_RUNTIME_DIR ?= /tmp/nexus-xdg-$(shell id -u)

.PHONY: setup test lint bench demo smoke contract-snapshot clean

setup: .venv/.synced

.venv/.synced: pyproject.toml uv.lock $(wildcard libs/*/pyproject.toml services/*/pyproject.toml cli/pyproject.toml)
	@$(UV) --version >/dev/null 2>&1 || python3 -m pip install --quiet uv
	@mkdir -p -m 700 $(XDG_RUNTIME_DIR)
	$(UV) sync --all-packages --frozen
	@touch $@

test: setup
	$(UV) run --frozen pytest

lint: setup
	$(UV) run --frozen ruff check libs services cli tests bench scripts examples
	$(UV) run --frozen ruff format --check libs services cli tests bench scripts examples
	$(UV) run --frozen mypy -p nexus_events $(foreach p,$(wildcard services/*/src/nexus_*),-p $(notdir $(p))) -p nexus_cli

bench: setup
	$(UV) run --frozen python -m bench

# The main job: the dev stack, the example agents, a run that fixes examples/demo-repo's
# failing test on a branch, the board and the result; the stack is stopped even on failure.
demo: setup
	UV="$(UV)" bash examples/demo.sh

# A smoke of the bus alone on a real embedded NATS + PostgreSQL.
smoke: setup
	$(UV) run --frozen python -m scripts.smoke

contract-snapshot: setup
	$(UV) run --frozen python -m tests.contract.snapshot --write

clean:
	rm -rf .venv .pytest_cache .mypy_cache .ruff_cache
