"""Wait for a condition with a deadline instead of sleeping (STYLE.md section 7)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(
    check: Callable[[], Any | Awaitable[Any]],
    *,
    within: float = 10.0,
    interval: float = 0.02,
    what: str = "condition",
) -> Any:
    """Poll `check` (sync or async) until it returns something truthy; return that value.

    Fails the test with `what` and the last value seen if the deadline passes first.
    """
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached within {within}s (last: {last!r})")
        await asyncio.sleep(interval)
