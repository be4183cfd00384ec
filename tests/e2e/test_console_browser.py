"""The console in a real browser (Debian's Chromium, Playwright) on the e2e dev stack: the
demo's feature flow watched live, an approval decided in the page, a run cancelled from its
page, a dead letter replayed once, the lab's eval report followed live, the login, bad input,
and no tracked secret on any page.

Each test signs in with tokens it adds to the stack's tokens file (`nexus console token`); the
console re-reads the file. Screenshots of every page go to docs/console/ (docs/console.md).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy
from nexus_testing import eventually
from nexus_testing.browser import screenshot
from playwright.async_api import Browser, Dialog, Page, expect

from tests.e2e.conftest import EXAMPLES, RUN_WAIT, Stack
from tests.e2e.console_session import (
    Console,
    add_token,
    cli,
    client_for,
    console_of,
    context_for,
    csrf_of,
    sign_in,
    sse_path,
)

pytestmark = pytest.mark.timeout(300)

GATEKEEPER = """\
id: console-gatekeeper
role: custom
description: Runs one shell command, only with a human's approval.
model: {name: offline-approval}
system_prompt: Run the command you are asked to run. [offline-model:approval]
tools: [run_shell]
permissions:
  approval_required_tools: [run_shell]
  approvers: [requester, "console:e2e-operator"]
"""
# Watched live: set once when the page opens; still there at the end means no reload.
MARKER = "() => { window.__nexusMarker = 'opened-once'; }"
# Every class a step's node goes through, in order, as the page saw it.
RECORD_STEPS = """() => {
  window.__stepStates = [];
  const seen = (n) => window.__stepStates.push(
    [n.dataset.step, n.getAttribute('class'), n.dataset.round || '']);
  document.querySelectorAll('g.node[data-step]').forEach(seen);
  new MutationObserver((records) => {
    for (const r of records) {
      const n = r.target.closest ? r.target.closest('g.node[data-step]') : null;
      if (n) seen(n);
    }
  }).observe(document.body, {subtree: true, attributes: true,
                             attributeFilter: ['class', 'data-round']});
}"""
PAGES = (
    ("runs", "/runs"), ("flows", "/flows"), ("flow-runs", "/flow-runs"),
    ("approvals", "/approvals"), ("dead-letters", "/dead-letters"), ("schedules", "/schedules"),
    ("board", "/board"), ("catalog", "/catalog"), ("usage", "/usage"), ("budgets", "/budgets"),
)  # fmt: skip


@pytest.fixture(scope="module")
def console(stack: Stack) -> Console:
    return console_of(stack)


@pytest.fixture(scope="module")
def tokens(stack: Stack, console: Console) -> dict[str, str]:
    """An operate and a read token, added to the stack's tokens file for this module."""
    return {
        "operate": add_token(stack, console, "operate", "e2e-operator"),
        "read": add_token(stack, console, "read", "e2e-reader"),
    }


@pytest.fixture(scope="module")
def catalog(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> None:
    """examples/ skills, agents and flows and this module's gatekeeper, applied with the CLI."""
    for kind in ("skills", "agents"):
        applied = stack.nexus(kind, "apply", "-f", str(EXAMPLES / kind))
        assert applied.code == 0, applied.stderr
    gatekeeper = tmp_path_factory.mktemp("console-agents") / "gatekeeper.yaml"
    gatekeeper.write_text(GATEKEEPER)
    assert stack.nexus("agents", "apply", "-f", str(gatekeeper)).code == 0
    flows = stack.nexus("--timeout", "30", "flows", "apply", str(EXAMPLES / "flows"))
    assert flows.code == 0, flows.stderr


@pytest.fixture
async def operator(
    browser: Browser, console: Console, tokens: dict[str, str]
) -> AsyncIterator[Page]:
    context = await context_for(browser)
    page = await context.new_page()
    await sign_in(page, console, tokens["operate"])
    try:
        yield page
    finally:
        await context.close()


@pytest.fixture
async def reader(browser: Browser, console: Console, tokens: dict[str, str]) -> AsyncIterator[Page]:
    context = await context_for(browser)
    page = await context.new_page()
    await sign_in(page, console, tokens["read"])
    try:
        yield page
    finally:
        await context.close()


def _repo(tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    repo = tmp_path / "demo-repo"
    shutil.copytree(EXAMPLES / "demo-repo", repo)
    for name, text in (extra or {}).items():
        (repo / name).write_text(text)
    git = ["git", "-C", str(repo), "-c", "user.name=e2e", "-c", "user.email=e2e@nexus.local"]
    subprocess.run([*git, "init", "--quiet", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "calc"], check=True)
    return repo


async def _events(stack: Stack, run_id: str) -> list[dict[str, Any]]:
    return await asyncio.to_thread(stack.events, run_id)


async def _until_event(stack: Stack, run_id: str, name: str) -> dict[str, Any]:
    events = await eventually(
        lambda: _events(stack, run_id),
        lambda evs: any(e["event"] == name for e in evs),
        within=RUN_WAIT,
        interval=0.5,
        what=f"{run_id} {name}",
    )
    found: dict[str, Any] = next(e for e in events if e["event"] == name)["body"]
    return found


async def _until_status(stack: Stack, run_id: str, *statuses: str) -> str:
    return await eventually(
        lambda: asyncio.to_thread(stack.status, run_id),
        lambda s: s in statuses,
        within=RUN_WAIT,
        interval=0.5,
        what=f"{run_id} in {statuses}",
    )


async def _open(page: Page, url: str) -> None:
    """Open a page that may not exist yet (a flow run just requested): until it is a 200."""

    async def status() -> int:
        response = await page.goto(url)
        return response.status if response else 0

    await eventually(status, lambda s: s == 200, within=30, what=url)


async def test_login_refuses_a_wrong_token_and_pages_need_a_session(
    page: Page, console: Console
) -> None:
    for _, path in PAGES:
        await page.goto(f"{console.url}{path}")
        assert page.url.startswith(f"{console.url}/login?next="), (path, page.url)
    await page.fill("#token", "nxc_not-a-token-of-this-console-000000")
    async with page.expect_response(f"{console.url}/login") as answer:
        await page.click("form[action='/login'] button[type=submit]")
    assert (await answer.value).status == 401
    await expect(page.locator(".login .error")).to_contain_text("not valid")
    await screenshot(page, "login")
    await page.goto(f"{console.url}/runs")
    assert page.url.startswith(f"{console.url}/login")
    # The token `nexus dev up` made for the person who started the stack lets them in.
    await sign_in(page, console, console.dev_token)
    await expect(page.locator("header .who")).to_contain_text("operate")


@pytest.mark.usefixtures("catalog")
async def test_the_feature_flow_watched_live(
    stack: Stack, console: Console, operator: Page, tmp_path: Path
) -> None:
    repo = _repo(tmp_path)
    assert (await cli(stack, "task", "create", "Fix calc live", "--id", "E2E-CONSOLE")).code == 0
    fid = f"e2e_console_{uuid.uuid4().hex[:6]}"
    started = await cli(
        stack, "flow", "run", "feature", "--task", "E2E-CONSOLE", "--repo", str(repo),
        "--input", "Fix the failing test", "--flow-run-id", fid, "-o", "json",
    )  # fmt: skip
    assert started.code == 0, started.stderr
    await _open(operator, f"{console.url}/flow-runs/{fid}")
    await operator.evaluate(MARKER)
    await operator.evaluate(RECORD_STEPS)

    status = operator.locator("#flow-status")
    await expect(status).to_have_class(
        re.compile(r"\bcompleted\b"), timeout=int(3 * RUN_WAIT * 1000)
    )
    for step in ("plan", "implement", "review", "test"):
        assert await operator.locator(f'g.node[data-step="{step}"].done').count() == 1, step
    assert await operator.get_attribute('g.node[data-step="implement"]', "data-round") == "2"
    assert await operator.evaluate("() => window.__nexusMarker") == "opened-once"

    states: list[list[str]] = await operator.evaluate("() => window.__stepStates")

    def classes(step: str) -> list[set[str]]:
        return [set(c.split()) for s, c, _ in states if s == step]

    # Each step after the first was seen, live, waiting (pending), then running, then done.
    for step in ("implement", "review", "test"):
        seen = classes(step)
        first_running = next(i for i, c in enumerate(seen) if "running" in c)
        first_done = next(i for i, c in enumerate(seen) if "done" in c)
        assert any("pending" in c or "waiting" in c for c in seen[:first_running]), (step, seen)
        assert first_running < first_done, (step, seen)
    assert "done" in classes("plan")[-1]
    assert any(s == "implement" and r == "2" for s, _, r in states), "round 2 never appeared"
    await screenshot(operator, "flow-run")
    await operator.goto(f"{console.url}/flows/feature")
    await screenshot(operator, "flow")


@pytest.mark.usefixtures("catalog")
async def test_a_gated_call_approved_in_the_browser(
    stack: Stack, console: Console, operator: Page, reader: Page
) -> None:
    started = await cli(
        stack, "run", "console-gatekeeper", "--input", "run it", "--bg", "-o", "json"
    )
    assert started.code == 0, started.stderr
    run_id: str = started.json()["run_id"]
    approval_id: str = (await _until_event(stack, run_id, "approval_requested"))["approval_id"]
    form = f'form[action="/runs/{run_id}/approvals/{approval_id}"]'

    # A reader sees the decision disabled, and a POST forged with its own session is refused.
    await reader.goto(f"{console.url}/approvals")
    await expect(reader.locator(f"{form} button[value=approve]")).to_be_disabled()
    forged = await reader.request.post(
        f"{console.url}/runs/{run_id}/approvals/{approval_id}",
        form={"decision": "approve", "comment": "forged", "csrf": await csrf_of(reader)},
    )
    assert forged.status == 403
    refused = await _until_event(stack, run_id, "approval_refused")
    assert "console:e2e-reader" in str(refused), refused
    assert await asyncio.to_thread(stack.status, run_id) == "awaiting_approval"

    await operator.goto(f"{console.url}/approvals")
    await screenshot(operator, "approvals")
    await operator.click(f"{form} button[value=approve]")
    assert await _until_status(stack, run_id, "completed", "failed") == "completed"
    decided = await _until_event(stack, run_id, "approval_decided")
    assert decided["decided_by"] == "console:e2e-operator", decided
    attach = await cli(stack, "attach", run_id, "-o", "json")
    assert attach.json()["run"]["result"]["summary"] == "The approved command ran."


@pytest.mark.usefixtures("catalog")
async def test_a_run_cancelled_from_its_page(
    stack: Stack, console: Console, operator: Page, tmp_path: Path
) -> None:
    repo = _repo(tmp_path)
    started = await cli(
        stack, "run", "implementer", "--repo", str(repo),
        "--input", "[offline-model:slow] wait", "--bg", "-o", "json",
    )  # fmt: skip
    assert started.code == 0, started.stderr
    run_id: str = started.json()["run_id"]
    await _until_event(stack, run_id, "tool_called")
    await operator.goto(f"{console.url}/runs/{run_id}")
    await operator.evaluate(MARKER)
    await screenshot(operator, "run")

    async def confirm(dialog: Dialog) -> None:  # a confirm() before cancelling, if any
        await dialog.accept()

    operator.on("dialog", confirm)
    await operator.click(f'form[action="/runs/{run_id}/cancel"] button')
    assert await _until_status(stack, run_id, "cancelled", "completed", "failed") == "cancelled"
    cancelled = await _until_event(stack, run_id, "cancel_requested")
    assert cancelled["requested_by"] == "console:e2e-operator", cancelled
    await operator.goto(f"{console.url}/runs/{run_id}")
    await expect(operator.locator("main")).to_contain_text("cancelled")


@pytest.mark.usefixtures("catalog")
async def test_a_dead_letter_replayed_from_the_console_reaches_its_subject_once(
    stack: Stack, console: Console, operator: Page
) -> None:
    task = f"POISON{uuid.uuid4().hex[:6].upper()}"
    subject = f"nexus.task.v1.{task}.created"
    nc = await nats.connect(stack.state()["nats_url"])
    try:
        js = nc.jetstream()
        ack = await js.publish(subject, b"[1, 2]")  # core dead-letters it

        async def letter() -> dict[str, Any] | None:
            listed = await cli(stack, "dlq", "ls", "-o", "json")
            letters = listed.json()["dead_letters"] if listed.code == 0 else []
            return next((x for x in letters if x["stream_seq"] == ack.seq
                         and x["subject"] == subject), None)  # fmt: skip

        found = await eventually(
            letter, bool, within=RUN_WAIT, interval=0.5, what=f"{subject} dead-lettered"
        )
        assert found is not None
        # What the stream stores from now on (what every service reading it gets).
        stored: list[bytes] = []

        async def count(msg: Msg) -> None:
            stored.append(msg.data)

        sub = await js.subscribe(
            subject, cb=count, ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
        )  # fmt: skip

        await operator.goto(f"{console.url}/dead-letters")
        await expect(operator.locator(f'a[href="/dead-letters/{found["seq"]}"]')).to_have_count(1)
        await screenshot(operator, "dead-letters")
        await operator.goto(f"{console.url}/dead-letters/{found['seq']}")
        await operator.click(f'form[action="/dead-letters/{found["seq"]}/replay"] button')
        await eventually(lambda: list(stored), bool, within=10, what="the replay stored")
        # A second replay of the same letter (a second click, or a second person) stores
        # nothing more.
        again = await operator.request.post(
            f"{console.url}/dead-letters/{found['seq']}/replay",
            form={"csrf": await csrf_of(operator)},
        )
        assert again.status < 500, again.status
        await js.publish(subject, b"sentinel")  # after both replays: all before it is in
        await eventually(lambda: list(stored), lambda got: b"sentinel" in got, within=10)
        assert stored == [b"[1, 2]", b"sentinel"], stored
        await sub.unsubscribe()
    finally:
        await nc.close()


@pytest.mark.usefixtures("catalog")
async def test_bad_input_is_a_page_that_says_so(console: Console, operator: Page) -> None:
    for path, what in (
        (f"/runs/no-such-run-{uuid.uuid4().hex[:6]}", "no-such-run-"),
        (f"/flow-runs/no_such_flow_run_{uuid.uuid4().hex[:6]}", "no_such_flow_run_"),
        ("/dead-letters/987654321", "987654321"),
    ):
        missing = await operator.goto(f"{console.url}{path}")
        assert missing is not None
        assert missing.status == 404, path
        await expect(operator.locator(".problem .error")).to_contain_text(what)
    bad = await operator.goto(f"{console.url}/runs?status=exploded")
    assert bad is not None
    assert bad.status == 400
    await expect(operator.locator(".problem .error")).to_contain_text("status")
    posted = await operator.request.post(
        f"{console.url}/runs/no-such-run/approvals/apr-x",
        form={"decision": "maybe", "csrf": await csrf_of(operator)},
    )
    assert posted.status == 400, posted.status
    assert "decision" in await posted.text()
    ready = await operator.request.get(f"{console.health_url}/readyz")
    assert ready.status == 200


@pytest.mark.usefixtures("catalog")
async def test_a_run_with_poison_among_its_events_still_renders(
    stack: Stack, console: Console, operator: Page
) -> None:
    started = await cli(stack, "run", "console-gatekeeper", "--input", "x", "--bg", "-o", "json")
    run_id: str = started.json()["run_id"]
    approval_id = (await _until_event(stack, run_id, "approval_requested"))["approval_id"]
    nc = await nats.connect(stack.state()["nats_url"])
    try:
        js = nc.jetstream()
        await js.publish(f"nexus.agent.run.v1.{run_id}.turn", b"\xff\xfe not json")
        await js.publish(f"nexus.agent.run.v1.{run_id}.exploded", b"{}")
    finally:
        await nc.close()
    page = await operator.goto(f"{console.url}/runs/{run_id}")
    assert page is not None
    assert page.status == 200
    await expect(operator.locator("main")).to_contain_text("poison")
    assert (await cli(stack, "deny", run_id, approval_id)).code == 0
    assert await _until_status(stack, run_id, "completed", "failed") == "completed"
    ready = await operator.request.get(f"{console.health_url}/readyz")
    assert ready.status == 200


@pytest.mark.usefixtures("catalog")
async def test_a_tracked_secret_reaches_no_page(
    stack: Stack, console: Console, tokens: dict[str, str], tmp_path: Path
) -> None:
    """The real runner reads a file holding a value of the repository's .env (tracked), so
    its tool output held the secret; no page, fragment or live record of the run shows it."""
    secret = f"hnyConsole{uuid.uuid4().hex}Qz"
    calc = (EXAMPLES / "demo-repo" / "calc.py").read_text()
    repo = _repo(tmp_path, {".env": f"DEPLOY_TOKEN={secret}\n",
                            "calc.py": f"# deploy key: {secret}\n{calc}"})  # fmt: skip
    run_id = f"e2e-console-secret-{uuid.uuid4().hex[:6]}"
    client = await client_for(console, tokens["read"])
    try:
        started = await cli(
            stack, "run", "implementer", "--repo", str(repo), "--run-id", run_id,
            "--input", "make the tests pass", "--bg", "-o", "json",
        )  # fmt: skip
        assert started.code == 0, started.stderr
        await _until_event(stack, run_id, "started")
        status, first = await client.get(f"/runs/{run_id}")
        assert status == 200
        live = sse_path(first)
        assert live, "the run page has no live feed"
        ended = ('class="status completed"', 'class="status failed"')
        streamed = await client.stream(live, until=ended, within=RUN_WAIT)
        assert any(marker in streamed for marker in ended), "the live feed never saw the end"
        await _until_status(stack, run_id, "completed", "failed")
        # The run did read the secret: its tool output was redacted by the runner.
        events = await _events(stack, run_id)
        reads = [e for e in events if e["event"] == "tool_result" and "deploy key" in str(e)]
        assert reads, "the run never read the file holding the secret"
        assert secret not in str(events)
        texts = [first, streamed]
        for path in (f"/runs/{run_id}", f"/runs/{run_id}/diff", "/runs", "/board", "/approvals"):
            code, text = await client.get(path)
            assert code == 200, (path, code)
            texts.append(text)
        for text in texts:
            assert secret not in text
            assert secret[::-1] not in text
    finally:
        await client.http.close()


@pytest.mark.usefixtures("catalog")
async def test_a_schedule_paused_from_the_console(
    stack: Stack, console: Console, operator: Page
) -> None:
    schedule = f"nightly-{uuid.uuid4().hex[:6]}"
    added = await cli(
        stack, "schedule", "add", schedule, "--agent", "reviewer", "--cron", "0 3 * * *",
        "--input", "Review what changed yesterday",
    )  # fmt: skip
    assert added.code == 0, added.stderr

    async def shown() -> dict[str, Any]:
        listed = await cli(stack, "schedule", "ls", "-o", "json")
        rows = listed.json()["schedules"] if listed.code == 0 else []
        return next((r for r in rows if r["schedule_id"] == schedule), {})

    await eventually(shown, bool, within=30, interval=0.5, what=f"{schedule} listed")
    await operator.goto(f"{console.url}/schedules")
    await operator.click(f'form[action="/schedules/{schedule}/pause"] button')
    paused = await eventually(
        shown, lambda r: r["definition"]["enabled"] is False, within=30, interval=0.5,
        what=f"{schedule} paused",
    )  # fmt: skip
    # Paused is the same schedule re-defined disabled: the rest of it kept.
    kept = paused["definition"]
    assert (kept["agent_id"], kept["cron"]) == ("reviewer", "0 3 * * *")


# Two revisions of an answering agent (the offline model's eval scripts) on two cases: the
# strict revision answers only the easy case right, so the other case flips.
EVAL_AGENT = """\
id: console-answer
role: implementer
model: {{name: gpt-4o-mini}}
system_prompt: "[offline-model:{script}] You answer."
tools: [finish]
"""
EVAL_SUITE = """\
id: console-answers
agent: console-answer
graders: [{kind: details_match, field: answer, matches: "^[0-9]+$"}]
cases:
  - {id: easy, input: "answer: 1 [easy]"}
  - {id: hard, input: "answer: 2"}
"""


async def test_the_lab_report_followed_live(
    stack: Stack, console: Console, operator: Page, tmp_path: Path
) -> None:
    """A real eval run of the lab service on the stack: the report page, opened while it runs,
    fetches itself again in place as the lab's events land, until it is complete."""
    for n, script in ((1, "eval-strict"), (2, "eval-lenient")):
        path = tmp_path / f"agent{n}.yaml"
        path.write_text(EVAL_AGENT.format(script=script))
        applied = await cli(stack, "agents", "apply", "-f", str(path))
        assert applied.code == 0, applied.stderr
    (tmp_path / "suite.yaml").write_text(EVAL_SUITE)
    applied = await cli(stack, "eval", "apply", str(tmp_path / "suite.yaml"))
    assert applied.code == 0, applied.stderr
    started = await cli(
        stack, "eval", "run", "console-answers", "--agent", "console-answer@1",
        "--agent", "console-answer@2", "--concurrency", "1", "-o", "json",
    )  # fmt: skip
    assert started.code == 0, started.stdout + started.stderr
    eval_run_id = started.json()["eval_run_id"]
    await operator.goto(f"{console.url}/runs")
    await operator.click('header nav a[href="/lab"]')
    await expect(operator.locator(f'tr[data-eval="{eval_run_id}"]')).to_have_count(1)
    await operator.click(f'a[href="/lab/{eval_run_id}"]')
    await operator.evaluate(MARKER)
    status = operator.locator("#eval-status")
    await expect(status).to_have_text("completed", timeout=RUN_WAIT * 1000)
    assert await operator.evaluate("() => window.__nexusMarker") == "opened-once"
    bars = operator.locator("svg.intervals g.revision")
    await expect(bars).to_have_count(2)
    # console-answer@2 passed 2 of 2: its bar spans the whole 0-100 % axis.
    full = operator.locator('g.revision[data-revision="console-answer@2"] rect.bar')
    assert await full.get_attribute("width") == "420.0"
    await expect(operator.locator("tr#case-hard.flipped")).to_have_count(1)
    await expect(operator.locator("tr#case-easy.flipped")).to_have_count(0)
    run_links = operator.locator('tr#case-hard a[href^="/runs/"]')
    await expect(run_links).to_have_count(2)
    await screenshot(operator, "lab-report")
    await operator.goto(f"{console.url}/lab")
    row = operator.locator(f'tr[data-eval="{eval_run_id}"]')
    await expect(row).to_contain_text("console-answer@1: 50% · console-answer@2: 100%")
    await screenshot(operator, "lab")


async def test_every_page_answers_and_is_pictured(console: Console, operator: Page) -> None:
    """Last in the file, so the pages show what the tests before did. Approvals, dead letters,
    the flow, the flow run, the run and the login are pictured by their own tests, mid-way."""
    pictured_elsewhere = {"approvals", "dead-letters"}
    for name, path in PAGES:
        response = await operator.goto(f"{console.url}{path}")
        assert response is not None
        assert response.status == 200, (path, response.status)
        if name not in pictured_elsewhere:
            await screenshot(operator, name)
