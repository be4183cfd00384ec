"""Quiet idle fetches for FastStream's pull subscribers: an idle timeout is not an error.

FastStream 0.7.8's pull loop ignores only nats-py's own `nats.errors.TimeoutError`, but nats-py
2.16's `PullSubscription.fetch` also raises a plain `asyncio.TimeoutError` (the builtin) when
its deadline runs out between the no-wait probe and the lingering request (a short fetch
timeout, or a busy event loop). The loop then dies, and FastStream's task supervisor logs it
at ERROR with a traceback ("Task-… raised an exception, retrying…") and restarts it.

`quiet_fetches` wraps the fetch of each pull subscription a broker makes: a timeout of any
kind is an empty fetch and logs nothing; any other failure (the consumer deleted, no
responders, an API error) logs one warning line per distinct error until a fetch works
again, and waits the fetch timeout before the loop asks again (FastStream would otherwise
retry at once, in a hot loop). A closed connection is FastStream's own stop signal and passes
through unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext

log = logging.getLogger(__name__)

# nats-py's `PullSubscription.fetch(batch, timeout, heartbeat)`.
Fetch = Callable[[int, float | None, float | None], Awaitable[list[Msg]]]


class QuietFetch:
    """A `PullSubscription.fetch` whose timeouts are empty batches (see the module doc)."""

    def __init__(self, fetch: Fetch, what: str) -> None:
        self._fetch = fetch
        self.what = what
        self.idle = 0  # fetches that timed out with nothing to deliver
        self.failures = 0
        self._reported: str | None = None

    async def __call__(
        self,
        batch: int = 1,
        timeout: float | None = 5,  # noqa: ASYNC109 - nats-py's fetch signature
        heartbeat: float | None = None,
    ) -> list[Msg]:
        try:
            msgs = await self._fetch(batch, timeout, heartbeat)
        except nats.errors.ConnectionClosedError:
            raise  # the broker is stopping: FastStream ends its loop on this
        except TimeoutError:  # nats-py's own and the plain one alike
            self.idle += 1
            return []
        except nats.errors.Error as exc:
            # Logged again only after a fetch delivered something: an outage alternating
            # between errors and timeouts must not repeat the same line each fetch.
            self.failures += 1
            error = f"{type(exc).__name__}: {exc}"
            if error != self._reported:
                self._reported = error
                log.warning("fetch from %s failed, retrying: %s", self.what, error)
            await asyncio.sleep(timeout or 1.0)
            return []
        self._reported = None
        return msgs


def quiet_fetches(js: JetStreamContext) -> None:
    """Make every pull subscription `js` creates from now on fetch through `QuietFetch`.

    Changes only this `JetStreamContext` instance (a FastStream broker's own), never nats-py.
    """
    pull_subscribe = js.pull_subscribe

    async def quiet_pull_subscribe(*args: Any, **kwargs: Any) -> JetStreamContext.PullSubscription:
        sub = await pull_subscribe(*args, **kwargs)
        config = kwargs.get("config")
        what = kwargs.get("durable") or getattr(config, "durable_name", None) or "a consumer"
        sub.fetch = QuietFetch(sub.fetch, what)  # type: ignore[method-assign]
        return sub

    js.pull_subscribe = quiet_pull_subscribe  # type: ignore[method-assign]


__all__ = ["QuietFetch", "quiet_fetches"]
