"""No run or flow event name or status is spelt as a string literal outside the contract.

The services and the CLI name that vocabulary through `nexus_events` (`RunEvent`,
`RunStatus`, `FlowStatus`, the event model classes); docs and tests are not scanned, and
`allowlist.ALLOWED` holds the words that mean something else where they stand.
"""

from __future__ import annotations

from nexus_events.contract.runstate import RunEvent, RunStatus
from nexus_events.events import FlowStatus

from tests.vocabulary.allowlist import ALLOWED
from tests.vocabulary.scan import flow_vocabulary, run_vocabulary, scan, scan_source

WORDS = run_vocabulary() | flow_vocabulary()


def test_no_run_or_flow_word_is_spelt_as_a_literal_in_services_or_the_cli() -> None:
    found = [hit for hit in scan(WORDS) if hit.key not in ALLOWED]
    listed = "\n".join(f"  {h.path}:{h.line} ({h.scope or 'module'}): {h.value!r}" for h in found)
    assert not found, (
        f"{len(found)} run/flow event names or statuses spelt as string literals; use the "
        f"contract's enums or event classes (or allowlist a word that means something else "
        f"there, with the reason):\n{listed}"
    )


def test_every_allowlist_entry_still_matches_a_literal() -> None:
    seen = {hit.key for hit in scan(WORDS)}
    stale = sorted(key for key in ALLOWED if key not in seen)
    assert not stale, f"allowlist entries that match nothing any more (remove them): {stale}"


def test_every_allowlist_entry_says_why() -> None:
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_vocabulary_is_the_contracts() -> None:
    assert set(RunEvent) | set(RunStatus) <= run_vocabulary()
    flows = flow_vocabulary()
    assert set(FlowStatus) <= flows
    # Flow event names come from the registered models, step outcomes from their Literal.
    assert {"step_started", "step_finished", "escalated", "signal", "resume_requested"} <= flows
    assert "succeeded" in flows


_SAMPLE = '''
"""Module docstring mentioning completed."""

def f(status: str) -> str:
    """Docstring: requested."""
    if status == "completed":
        return subjects.run_event("r1", "cancel_requested")
    log.info("not a word: completed soon")
    return "step_started" if status else f"{status}"


class C:
    state = "running"
'''


def test_the_scanner_finds_literals_in_code_and_not_in_docstrings_or_other_text() -> None:
    hits = scan_source("x.py", _SAMPLE, WORDS)
    assert [(h.line, h.scope, h.value) for h in hits] == [
        (6, "f", "completed"),
        (7, "f", "cancel_requested"),
        (9, "f", "step_started"),
        (13, "C", "running"),
    ]
    assert scan_source("y.py", "x = RunEvent.COMPLETED\n", WORDS) == []
