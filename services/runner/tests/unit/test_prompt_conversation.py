"""A chat conversation so far (docs/channels.md, "Conversations") opens the transcript: after
the system message, in order, before the new message."""

from __future__ import annotations

from nexus_events.events import RunConfig

from nexus_runner.prompt import initial_messages


def _config(**changes: object) -> RunConfig:
    body = {
        "run_id": "run-c",
        "agent_id": "helper",
        "system_prompt": "You help.",
        "input": "what is my name?",
        "model": {"name": "m"},
    }
    return RunConfig.model_validate(body | changes)


def test_the_conversation_so_far_comes_before_the_new_message() -> None:
    said = [
        {"role": "user", "text": "my name is Ana"},
        {"role": "assistant", "text": "hello Ana"},
    ]
    messages = initial_messages(_config(conversation=said), "note")
    assert messages[0]["role"] == "system"
    assert messages[1:] == [
        {"role": "user", "content": "my name is Ana"},
        {"role": "assistant", "content": "hello Ana"},
        {"role": "user", "content": "what is my name?"},
    ]


def test_without_a_conversation_the_transcript_is_the_system_and_the_input() -> None:
    messages = initial_messages(_config(), "note")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == "what is my name?"
