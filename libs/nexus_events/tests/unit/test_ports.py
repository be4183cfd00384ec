"""A port to listen on is taken below the ephemeral range, where no outgoing connection's
source port or `bind(0)` can take it first, and is free when handed out."""

from __future__ import annotations

import socket

from nexus_events.runtime import ports


def test_a_port_below_the_ephemeral_range_that_can_be_listened_on() -> None:
    low = ports._ephemeral_low()
    seen = {ports.free_port() for _ in range(20)}
    assert all(ports._LOWEST <= p < low for p in seen), (low, sorted(seen))
    assert len(seen) > 1  # picked at random, not one fixed port
    port = seen.pop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()


def test_a_port_in_use_is_never_handed_out(monkeypatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        busy.listen()
        picks = iter([taken, taken, taken])
        monkeypatch.setattr(ports.random, "randint", lambda a, b: next(picks, 23456))
        monkeypatch.setattr(ports, "_ephemeral_low", lambda: 60000)
        assert ports.free_port() != taken
