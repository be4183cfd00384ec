"""The dev stack's runners get prices (NEXUS_PRICES) for the offline model's name and the
runner's defaults, unless the user set prices: a run of the dev stack costs something."""

from __future__ import annotations

import json

from nexus_runner.budget import turn_cost
from nexus_runner.config import DEFAULT_PRICES, RunnerSettings

from nexus_cli.devstack.offline_model import MODEL_NAME
from nexus_cli.devstack.prices import runner_prices


def test_the_offline_models_name_is_priced_and_the_defaults_kept() -> None:
    env = runner_prices({"PATH": "/usr/bin"})
    # The runner reads the variable as it reads any of its settings.
    prices = RunnerSettings.model_validate({"prices": json.loads(env["NEXUS_PRICES"])}).prices
    assert turn_cost(prices, MODEL_NAME, 1_000_000, 1_000_000) > 0
    assert set(DEFAULT_PRICES) < set(prices)
    assert prices["gpt-4o-mini"] == DEFAULT_PRICES["gpt-4o-mini"]


def test_prices_the_user_set_are_left_alone() -> None:
    assert runner_prices({"NEXUS_PRICES": '{"m": {"input_per_mtok": 1}}'}) == {}
    assert runner_prices({"NEXUS_RUNNER_PRICES": '{"m": {"input_per_mtok": 1}}'}) == {}
