"""Bounded replay: read a stream (or one run) in order from a sequence to its end as of the call.

An ephemeral, ack-less, in-memory consumer does the reading, checked for gaps (consumer
sequence) so a replay either yields every message or raises `BusError`. Projections and
takeover use this measured fast path rather than a durable consumer.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded, JsMeta
from nexus_events.contract.streams import NO_META_LEADER
from nexus_events.errors import BusError, BusUnavailable, DecodeError, JetStreamUnavailable
from nexus_events.transport.consume import decode_msg
from nexus_events.transport.natsclient import Client
from nexus_events.transport.pull import PullReader


class Replayer:
    """Replay on a connection `nc` and its JetStream context `js` (a mixin of `Bus`)."""

    nc: Client
    js: JetStreamContext

    async def replay(
        self,
        stream: str,
        *,
        start_seq: int = 1,
        filter_subject: str | None = None,
        run_id: str | None = None,
        batch: int = 500,
        name: str | None = None,
    ) -> AsyncIterator[Decoded]:
        """Yield the events of `stream` in order, from `start_seq` to the end as of the call.

        `run_id` filters NEXUS_RUNS to one run. Messages that do not decode are skipped (the
        live consumers dead-letter them). An ephemeral, ack-less consumer does the reading,
        named `name` if given (a run's credential may only make consumers it names:
        nexus_events.contract.run_access), else a fresh name.
        """
        if run_id is not None:
            filter_subject = subjects.run_events_filter(run_id)
        async for msg in self.replay_raw(
            stream, start_seq=start_seq, filter_subject=filter_subject, batch=batch, name=name
        ):
            try:
                yield decode_msg(msg)
            except DecodeError:
                continue

    async def replay_raw(
        self,
        stream: str,
        *,
        start_seq: int = 1,
        filter_subject: str | None = None,
        filter_subjects: Sequence[str] = (),
        batch: int = 500,
        last_per_subject: bool = False,
        name: str | None = None,
    ) -> AsyncIterator[Msg]:
        """Like `replay` but yields the raw messages (undecodable ones included).

        `filter_subjects` (several) and `filter_subject` (one) narrow the replay; the
        messages still come in stream order. `last_per_subject` reads only the newest
        message of each subject that matches (e.g. the last heartbeat of some runs), and
        ignores `start_seq`.
        """
        filters = [*filter_subjects, *([filter_subject] if filter_subject else [])]
        fixed = name is not None
        name = name or f"replay_{uuid.uuid4().hex[:16]}"
        if last_per_subject:
            policy, opt_start = DeliverPolicy.LAST_PER_SUBJECT, None
        elif start_seq > 1:
            policy, opt_start = DeliverPolicy.BY_START_SEQUENCE, start_seq
        else:
            policy, opt_start = DeliverPolicy.ALL, None
        config = ConsumerConfig(
            name=name,
            deliver_policy=policy,
            opt_start_seq=opt_start,
            ack_policy=AckPolicy.NONE,
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=filters if len(filters) > 1 else None,
            inactive_threshold=60.0,
            mem_storage=True,
        )
        info = await self._create_consumer(stream, config, fixed=fixed)
        reader = await PullReader(self.nc, stream, name).start()
        try:
            remaining = info.num_pending or 0
            delivered = 0
            while remaining > 0:
                msgs = await reader.fetch(min(batch, remaining), 5.0)
                if not msgs:
                    raise BusError(f"replay of {stream} stalled with {remaining} left")
                for msg in msgs:
                    meta = JsMeta.from_reply(msg.reply)
                    if meta is None or meta.consumer_seq != delivered + 1:
                        raise BusError(f"replay of {stream} lost a message after {delivered}")
                    delivered, remaining = meta.consumer_seq, meta.num_pending
                    yield msg
        finally:
            await reader.close()
            with contextlib.suppress(nats.errors.Error, nats.js.errors.Error):
                await self.js.delete_consumer(stream, name)

    async def _create_consumer(
        self, stream: str, config: ConsumerConfig, *, fixed: bool
    ) -> ConsumerInfo:
        name = str(config.name)
        if fixed:
            # A fixed name may be left over from a replay that died: start afresh.
            with contextlib.suppress(nats.errors.Error, nats.js.errors.Error):
                await self.js.delete_consumer(stream, name)
        try:
            return await self.js.add_consumer(stream, config)
        except nats.errors.ConnectionClosedError as exc:
            raise BusUnavailable("the NATS connection is closed") from exc
        except nats.js.errors.NotFoundError as exc:
            raise BusError(f"cannot replay {stream}: no such stream") from exc
        except nats.js.errors.ServiceUnavailableError as exc:
            raise JetStreamUnavailable(f"cannot replay {stream}: {NO_META_LEADER}") from exc
        except (TimeoutError, nats.errors.Error) as exc:
            # nats-py's TimeoutError is an asyncio one; both mean the server did not answer.
            raise BusError(f"cannot replay {stream}: {type(exc).__name__} {exc}") from exc


__all__ = ["Replayer"]
