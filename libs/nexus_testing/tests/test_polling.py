"""`eventually` and `eventually_blocking`: the value once met, a clear failure at the deadline."""

from __future__ import annotations

import itertools

import pytest
from nexus_testing import eventually, eventually_blocking


async def test_returns_the_first_value_that_satisfies_the_condition() -> None:
    counter = itertools.count()
    assert await eventually(lambda: next(counter), lambda n: n >= 3, interval=0) == 3


async def test_awaits_an_async_probe() -> None:
    seen: list[int] = []

    async def probe() -> list[int]:
        seen.append(len(seen))
        return seen if len(seen) > 2 else []

    assert await eventually(probe, interval=0) == [0, 1, 2]


async def test_fails_at_the_deadline_with_what_the_last_value_and_the_detail() -> None:
    with pytest.raises(AssertionError) as failure:
        await eventually(
            lambda: "still starting", lambda v: v == "up", within=0.05,
            what="the server up", detail=lambda: "log: bind failed",
        )  # fmt: skip
    message = str(failure.value)
    assert "the server up not reached within 0.05s" in message
    assert "'still starting'" in message
    assert message.endswith("log: bind failed")


async def test_an_exception_of_the_probe_fails_at_once() -> None:
    def probe() -> bool:
        raise AssertionError("the process exited")

    with pytest.raises(AssertionError, match="the process exited"):
        await eventually(probe, within=60)


def test_the_blocking_variant_follows_the_same_rule() -> None:
    counter = itertools.count()
    assert eventually_blocking(lambda: next(counter) == 2, interval=0) is True
    with pytest.raises(AssertionError, match=r"nothing not reached within 0\.05s"):
        eventually_blocking(lambda: False, within=0.05, interval=0.01, what="nothing")
