"""What the flow pages' tests share: an agent and flows to apply, and a reader of a page's
live feed."""

from __future__ import annotations

import asyncio

import aiohttp

from .conftest import Browserless

AGENT_YAML = """
id: implementer
role: implementer
model: {name: test-model}
system_prompt: You implement tasks.
"""

REVIEW_FLOW = """
id: review
description: Implement, then review until approved.
steps:
  - id: implement
    kind: run
    agent: implementer
    input: "Do it: {{ input }}"
    max_rounds: 3
  - id: review
    kind: run
    agent: implementer
    next:
      - when: review.verdict == "request_changes"
        to: implement
"""

SHIP_FLOW = """
id: ship
description: Implement, then a person approves.
steps:
  - id: implement
    kind: run
    agent: implementer
  - id: approve
    kind: gate
    summary: "Ship it?"
"""


def since_of(page: str) -> str:
    return page.split("since=", 1)[1].split('"', 1)[0]


class LiveFeed:
    """A page's SSE stream read in the background; `wait_for(text)` until it has arrived."""

    def __init__(self, client: Browserless, path: str) -> None:
        self.client = client
        self.path = path
        self.text = ""
        self.opened = asyncio.Event()
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LiveFeed:
        self._task = asyncio.create_task(self._read())
        await asyncio.wait_for(self.opened.wait(), 10)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _read(self) -> None:
        url = f"{self.client.base}{self.path}"
        async with self.client.http.get(url, timeout=aiohttp.ClientTimeout(total=60)) as r:
            assert r.status == 200
            async for raw in r.content:
                self.opened.set()
                async with self._changed:
                    self.text += raw.decode()
                    self._changed.notify_all()

    async def wait_for(self, *parts: str, within: float = 20.0) -> str:
        async def arrived() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: all(p in self.text for p in parts))

        try:
            await asyncio.wait_for(arrived(), within)
        except TimeoutError:
            raise AssertionError(f"live feed never sent {parts!r}; it sent:\n{self.text}") from None
        return self.text
