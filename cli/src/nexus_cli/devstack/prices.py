"""The model prices the dev stack gives its runners, so its runs cost something (docs/spend.md).

The runner prices a call by the agent's model name (NEXUS_PRICES, USD per 1M tokens); the
offline model answers any name, and its own, ``nexus-offline``, has no list price. Unless the
user set prices, the stack's runners get the runner's defaults plus that name at
gpt-4o-mini's price, so usage, budgets and `nexus ps` show real-looking figures offline too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from nexus_cli.devstack.offline_model.server import MODEL_NAME

# The names the runner reads its prices from (the second is the deprecated prefix's).
PRICES_ENV = ("NEXUS_PRICES", "NEXUS_RUNNER_PRICES")
# USD per 1M tokens of the offline model: gpt-4o-mini's list price, a small real one.
OFFLINE_PRICE = {"input_per_mtok": 0.15, "output_per_mtok": 0.6}


def runner_prices(env: Mapping[str, str]) -> dict[str, str]:
    """``{"NEXUS_PRICES": ...}`` for the runners' environment, or nothing when `env` (the
    user's) already names prices."""
    if any(env.get(name) for name in PRICES_ENV):
        return {}
    # Imported here: the runner is the dev-stack extra's (checked before the stack starts).
    from nexus_runner.config import DEFAULT_PRICES

    prices = {name: price.model_dump() for name, price in DEFAULT_PRICES.items()}
    prices[MODEL_NAME] = dict(OFFLINE_PRICE)
    return {"NEXUS_PRICES": json.dumps(prices, sort_keys=True)}
