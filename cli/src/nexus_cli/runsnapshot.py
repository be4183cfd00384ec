"""`nexus attach`'s snapshot of a run: core's row and recent events, and its spend."""

from __future__ import annotations

from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events.spend import RunSpend

from nexus_cli.client import Session
from nexus_cli.output import console
from nexus_cli.resumelines import attempt_label
from nexus_cli.runview import describe, lab_lines
from nexus_cli.spendview import run_spend


async def run_snapshot(
    s: Session, run_id: str, events: int
) -> tuple[dict[str, Any], dict[str, Any], RunSpend | None]:
    """`nexus attach`'s facts: core's row, its snapshot (phase, last decision, the `events`
    most recent events, spend) and the run's spend (None: the spend service did not answer)."""
    row = await s.get_run(run_id)
    reply = await s.query(subjects.CORE_RUNS_EVENTS, {"run_id": run_id})
    spend = await run_spend(s, run_id)
    all_events = reply.get("events", [])
    decisions = [
        e
        for e in all_events
        if e["event"] in (RunEvent.APPROVAL_REQUESTED, RunEvent.APPROVAL_DECIDED)
    ]
    snapshot = {
        "run": row,
        "phase": all_events[-1]["event"] if all_events else None,
        "last_decision": decisions[-1] if decisions else None,
        "recent_events": all_events[-events:] if events else [],
        "spend": None if spend is None else spend.model_dump(mode="json"),
    }
    return row, snapshot, spend


def print_snapshot(row: dict[str, Any], snap: dict[str, Any]) -> None:
    console.print(
        f"[bold]run {row['run_id']}[/]  agent {row['agent_id']}  task {row['task_id'] or '-'}"
    )
    status = row["status"] + (f" ({row['reason']})" if row.get("reason") else "")
    console.print(f"  status   {status}", markup=False)
    if row.get("parent_run_id"):
        console.print(f"  parent   {row['parent_run_id']} (delegated it)", markup=False)
    for label, text in lab_lines(row):
        console.print(f"  {label:<8} {text}", markup=False)
    console.print(f"  phase    {snap['phase'] or '-'}", markup=False)
    if row.get("message"):
        console.print(f"  message  {row['message']}", markup=False)
    console.print(
        f"  turns    {row['turns']}   tokens {row['tokens_in']} in / {row['tokens_out']} out"
        f"   ${row['cost_usd']:.4f}",
        markup=False,
    )
    console.print(
        f"  attempt  {attempt_label(row.get('attempt'), row.get('max_attempts'))}"
        f"   condensations {row.get('condensations', 0)}",
        markup=False,
    )
    for phase, at in row.get("phases", {}).items():
        console.print(f"  {phase:<12} {at}", markup=False)
    if snap["last_decision"]:
        d = snap["last_decision"]
        console.print(f"  last decision  {describe(d['event'], d['body'])}", markup=False)
    result = row.get("result") or {}
    if result.get("diff_stat"):
        console.print("  diff stat", markup=False)
        console.print("    " + result["diff_stat"].replace("\n", "\n    "), markup=False)
    if result.get("summary"):
        console.print(f"  result   {result['summary']}", markup=False)
    if snap["recent_events"]:
        console.print("  recent events:")
        for e in snap["recent_events"]:
            console.print(f"    {e['seq']:>6} {describe(e['event'], e['body'])}", markup=False)
