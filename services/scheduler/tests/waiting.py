"""Waiting without sleeping blindly: poll a condition until a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T]], within: float = 10.0, what: str = "condition"
) -> T:
    """Await `check()` until it returns something truthy; fail after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {within}s (last: {result!r})")
        await asyncio.sleep(0.02)
