"""Our header parser must return exactly what nats-py's own returns."""

from __future__ import annotations

import pytest
from nats.aio.client import Client as NatsPyClient
from nexus_events.transport.natsclient import Client

BLOCKS = [
    b"Nats-Msg-Id: run-1:1:turn:3\r\nNexus-Schema: nexus.agent.run.turn.v1\r\n\r\n",
    b"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n",
    b"Name:Value\r\nTabbed:\tvalue \r\n",
    b"Bad Name: dropped\r\nGood: kept\r\n",
    b"Ex\x1cotic: dropped too\r\n",
    b"Caf\xc3\xa9: non-ascii name dropped\r\nValue: caf\xc3\xa9 \xff\r\n",
    b"no colon here\r\n\r\n: empty name\r\n",
    b"Dup: one\r\nDup: two\r\n",
    b"  Padded  :  spaced value  \r\n",
    b"",
]


@pytest.mark.parametrize("raw", BLOCKS)
def test_same_headers_as_nats_py(raw: bytes) -> None:
    assert Client._parse_header_lines(raw) == NatsPyClient._parse_header_lines(raw)


def test_a_real_envelope_is_parsed() -> None:
    raw = b"Nats-Msg-Id: a\r\nNexus-Source: core\r\n\r\n"
    assert Client._parse_header_lines(raw) == {"Nats-Msg-Id": "a", "Nexus-Source": "core"}


def test_the_private_methods_we_override_are_as_tested() -> None:
    """Fails loudly when a nats-py upgrade changes what `Client` overrides: check the new
    private methods, adapt the overrides and `PRIVATE_SIGNATURES`, then move the pin."""
    from nexus_events.transport import natsclient

    assert natsclient.private_signature_drift() == {}
    assert natsclient.DIRECT_DELIVERY


def test_drift_is_detected_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from nexus_events.transport import natsclient

    async def changed(self, sid, subject, reply, data, headers, extra):  # type: ignore[no-untyped-def]
        return None

    monkeypatch.setattr(NatsPyClient, "_process_msg", changed)
    assert natsclient.private_signature_drift() == {
        "_process_msg": ("self", "sid", "subject", "reply", "data", "headers", "extra")
    }
