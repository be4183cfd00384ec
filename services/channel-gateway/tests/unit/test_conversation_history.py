"""What a conversation's next run begins with: the newest messages, each cut, bounded in all."""

from __future__ import annotations

from datetime import UTC, datetime

from nexus_events.events import ChannelAddress

from nexus_channel_gateway.store import Conversation


def _talk(texts: list[str]) -> Conversation:
    roles = ["user", "assistant"]
    return Conversation(
        conversation_id="conv_1",
        address=ChannelAddress(channel="slack", conversation="C1", thread="1.0"),
        agent_id="helper",
        messages=[
            {"role": roles[i % 2], "text": t, "run_id": f"r{i}"} for i, t in enumerate(texts)
        ],
        live_run=None,
        last_activity=datetime(2026, 11, 29, tzinfo=UTC),
        ended=False,
    )


def test_the_newest_messages_in_order_each_cut_and_bounded_in_all() -> None:
    talk = _talk(["a" * 10, "b" * 10, "c" * 30, "d" * 10])
    assert [(m.role, m.text) for m in talk.history(40, 100, 1000)] == [
        ("user", "a" * 10), ("assistant", "b" * 10), ("user", "c" * 30), ("assistant", "d" * 10),
    ]  # fmt: skip
    assert [m.text for m in talk.history(2, 100, 1000)] == ["c" * 30, "d" * 10]
    assert [m.text for m in talk.history(40, 20, 1000)][2] == "c" * 20
    # 45 characters in all: the newest two fit (40), the third would not.
    assert [m.text for m in talk.history(40, 100, 45)] == ["c" * 30, "d" * 10]
