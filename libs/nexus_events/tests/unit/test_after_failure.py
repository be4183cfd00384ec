"""The one retry policy of the bus Consumer and the FastStream handlers (`after_failure`)."""

from __future__ import annotations

from nexus_events.transport.consume import ConsumerSpec, GiveUp, after_failure

SPEC = ConsumerSpec(stream="S", durable="d", max_deliver=3, backoff=(1.0, 5.0))


def test_backoff_by_delivery_then_a_dead_letter_on_the_last():
    assert after_failure(SPEC, 1, None, "boom") == 1.0
    assert after_failure(SPEC, 2, None, "boom") == 5.0
    assert after_failure(SPEC, 3, None, "boom") == GiveUp(
        "max_deliver", "failed 3 deliveries; last: boom"
    )


def test_a_handler_delay_wins_over_the_backoff_but_not_over_max_deliver():
    assert after_failure(SPEC, 1, 0.25, "later") == 0.25
    assert isinstance(after_failure(SPEC, 4, 0.25, "later"), GiveUp)
