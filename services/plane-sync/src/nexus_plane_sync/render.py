"""The HTML plane-sync writes into Plane: task descriptions, a run's progress comments and
the reports of the runs it delegated.

Plane stores rich text as HTML (``description_html``, ``comment_html``); everything from
Nexus is escaped, so a task title or a model's summary can never inject markup.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any

from nexus_events.contract.runstate import RunStatus


def paragraphs(text: str) -> str:
    """Plain text as HTML paragraphs (blank lines split them)."""
    parts = [p.strip() for p in text.split("\n\n") if p.strip()]
    if not parts:
        return "<p></p>"
    return "".join(f"<p>{escape(p).replace(chr(10), '<br/>')}</p>" for p in parts)


def _marker(run_id: str) -> str:
    return f"<p><small>nexus run <code>{escape(run_id)}</code></small></p>"


def started(run_id: str, agent_id: str | None) -> str:
    who = escape(agent_id or "an agent")
    return f"<p>▶️ <strong>{who}</strong> started working on this.</p>{_marker(run_id)}"


def progress(run_id: str, turns: int, last_tool: str | None, status: str) -> str:
    tool = f", last tool <code>{escape(last_tool)}</code>" if last_tool else ""
    return f"<p>⏳ {escape(status)}: {turns} turn(s){tool}.</p>{_marker(run_id)}"


def approval(run_id: str, approval_id: str, tool: str, summary: str, why: str) -> str:
    aid = escape(approval_id)
    reason = f"<p>Why: {escape(why)}</p>" if why else ""
    return (
        f"<p>✋ Approval needed to run <code>{escape(tool)}</code>:</p>"
        f"<pre>{escape(summary)}</pre>{reason}"
        f"<p>Answer with a comment: <code>/approve {aid}</code> or <code>/deny {aid}</code>"
        f" (optionally followed by a note).</p>{_marker(run_id)}"
    )


def result(run_id: str, outcome: dict[str, Any]) -> str:
    parts = ["<p>✅ Run completed.</p>"]
    if outcome.get("summary"):
        parts.append(paragraphs(str(outcome["summary"])))
    if outcome.get("pr_url"):
        url = escape(str(outcome["pr_url"]), quote=True)
        parts.append(f'<p>Pull request: <a href="{url}">{url}</a></p>')
    elif outcome.get("branch"):
        parts.append(f"<p>Branch: <code>{escape(str(outcome['branch']))}</code></p>")
    if outcome.get("diff_stat"):
        parts.append(f"<pre>{escape(str(outcome['diff_stat']))}</pre>")
    parts.append(_marker(run_id))
    return "".join(parts)


def resumed(run_id: str, attempt: int, reason: str, message: str) -> str:
    """The run goes on in a new attempt after its runner was lost (docs/resume.md)."""
    detail = f" ({escape(message)})" if message else ""
    return (
        f"<p>🔁 Resumed after runner loss (attempt {attempt}): it goes on from its last"
        f" finished turn. Reason <code>{escape(reason)}</code>{detail}.</p>{_marker(run_id)}"
    )


def sleeping(run_id: str, until: datetime, reason: str) -> str:
    """The run sleeps until `until`, holding no runner (docs/resume.md, Sleep)."""
    why = f": {escape(reason)}" if reason else ""
    return f"<p>💤 Sleeping until {escape(wake_time(until))}{why}.</p>{_marker(run_id)}"


def woke(run_id: str, attempt: int, cause: str, text: str) -> str:
    """The run woke from a sleep and goes on as attempt `attempt`."""
    detail = f" ({escape(text)})" if text else ""
    return (
        f"<p>⏰ Woke ({escape(cause)}){detail}: it goes on as attempt {attempt}.</p>"
        f"{_marker(run_id)}"
    )


def wake_time(until: datetime) -> str:
    """A wake time as people read it in Plane: UTC, to the minute."""
    return until.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def ended(run_id: str, status: str, reason: str, message: str) -> str:
    icon = "🛑" if status == RunStatus.CANCELLED else "❌"
    detail = f"<p>{escape(message)}</p>" if message else ""
    return (
        f"<p>{icon} Run {escape(status)} (reason <code>{escape(reason)}</code>).</p>"
        f"{detail}{_marker(run_id)}"
    )


def delegated(run_id: str, agent_id: str | None, parent_run_id: str) -> str:
    who = escape(agent_id or "an agent")
    return (
        f"<p>↳ Delegated to <strong>{who}</strong> by run <code>{escape(parent_run_id)}</code>."
        f"</p>{_marker(run_id)}"
    )


def child_result(run_id: str, agent_id: str | None, outcome: dict[str, Any]) -> str:
    who = escape(agent_id or "The delegated agent")
    parts = [f"<p>↳ <strong>{who}</strong> finished its delegated run.</p>"]
    if outcome.get("summary"):
        parts.append(paragraphs(str(outcome["summary"])))
    if outcome.get("pr_url"):
        url = escape(str(outcome["pr_url"]), quote=True)
        parts.append(f'<p>Pull request: <a href="{url}">{url}</a></p>')
    parts.append(_marker(run_id))
    return "".join(parts)


def child_ended(run_id: str, agent_id: str | None, status: str, reason: str, message: str) -> str:
    who = escape(agent_id or "The delegated agent")
    detail = f"<p>{escape(message)}</p>" if message else ""
    return (
        f"<p>↳ <strong>{who}</strong>: delegated run {escape(status)}"
        f" (reason <code>{escape(reason)}</code>).</p>{detail}{_marker(run_id)}"
    )


def plain_text(html: str) -> str:
    """The text of a comment's HTML (tags dropped, entities decoded), trimmed."""
    from html.parser import HTMLParser

    class _Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.out: list[str] = []

        def handle_data(self, data: str) -> None:
            self.out.append(data)

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag in ("br", "p", "div", "li"):
                self.out.append("\n")

    parser = _Text()
    parser.feed(html)
    parser.close()
    return "\n".join(line.strip() for line in "".join(parser.out).splitlines()).strip()
