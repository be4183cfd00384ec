"""The offline model answers memory extraction with JSON the memory service reads."""

from __future__ import annotations

from nexus_events.events import ModelSpec, RunCompleted, RunConfig, RunFailed, RunResult
from nexus_memory.extraction import INSTRUCTION, RunTranscript, parse_answer

from nexus_cli.devstack.offline_model import reply_for


def _ask(transcript: RunTranscript) -> str:
    body = {
        "messages": [
            {"role": "system", "content": INSTRUCTION.format(limit=5)},
            {"role": "user", "content": transcript.text()},
        ]
    }
    return reply_for(body).text


def _config(repo: str | None) -> RunConfig:
    return RunConfig(
        run_id="run-1", agent_id="implementer", system_prompt="x", model=ModelSpec(name="m"),
        repo={"url": repo} if repo else None,  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_completed_run_yields_its_summary_as_a_repository_memory() -> None:
    done = RunCompleted(result=RunResult(summary="Fix add() in calc.py\n\nmore text"))
    answer = parse_answer(_ask(RunTranscript("run-1", _config("/srv/demo"), done, "completed")))
    assert [(m.text, m.scope) for m in answer.memories] == [
        ("Fix add() in calc.py (learned by implementer in run-1)", "repo")
    ]


def test_a_failed_run_or_an_empty_summary_yields_nothing() -> None:
    failed = RunFailed(reason="budget_exceeded", message="out of turns")
    assert parse_answer(_ask(RunTranscript("r", _config(None), failed, "failed"))).memories == []
    empty = RunCompleted(result=RunResult(summary=""))
    assert parse_answer(_ask(RunTranscript("r", _config(None), empty, "completed"))).memories == []
