"""make compose-test's Plane and Slack round trips, as an operator and a person would do them.

    python deploy/compose-test/roundtrips.py plane|slack AGENT   (from the repository root)

Run by deploy/compose-test/run.sh against the stack it started; everything comes from the
environment run.sh exports (the same variables compose and `nexus dev` read):

- plane: a person creates a work item labelled ``agent:AGENT`` in the fake Plane (its
  ``/_fake/human/work-items`` route: Plane sends the signed webhook to plane-sync); the run's
  "started" and "Run completed" comments and the move to Done must show up on the work item,
  read through Plane's REST API (FAKE_PLANE_URL); ``nexus attach`` says the run named there
  completed; ``nexus plane status`` has no pending or failed write; every webhook delivery got
  200 from plane-sync.
- slack: a signed Events API ``app_mention`` ``run AGENT: ...`` posted to the gateway's public
  endpoint (GATEWAY_URL) from an unknown sender gets a pairing challenge in the thread;
  ``nexus pair approve CODE``; the same mention again starts a run whose "requested",
  "started" and "completed" messages arrive in the thread at the fake Slack (read back with
  ``conversations.replies`` from FAKE_SLACK_URL); ``nexus attach`` says that run completed.

Exit 0 on success; otherwise a one-line reason and exit 1 (run.sh then prints the logs).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from tests.fakes.slack_api import event_callback, signed_headers

T = TypeVar("T")
WAIT = 300.0  # seconds for a run to go through the stack (the offline model answers at once)


class RoundTripError(Exception):
    """The round trip did not happen; the message says which step."""


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RoundTripError(f"{name} is not set (run.sh exports it)")
    return value


def log(message: str) -> None:
    print(f"    {message}", flush=True)


def until(probe: Callable[[], T | None], what: str, within: float = WAIT) -> T:
    """Poll `probe` until it returns something (not None); RoundTripError after `within` s."""
    deadline = time.monotonic() + within
    last: httpx.HTTPError | None = None
    while True:
        try:
            found = probe()
        except httpx.HTTPError as exc:  # a service still starting or restarting: ask again
            found, last = None, exc
        else:
            last = None
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise RoundTripError(
                f"{what}: nothing within {within:.0f} s" + (f" ({last})" if last else "")
            )
        time.sleep(1)


def nexus(*args: str) -> subprocess.CompletedProcess[str]:
    cli = os.path.join(os.path.dirname(sys.executable), "nexus")
    return subprocess.run(
        [cli, "--timeout", "10", *args], check=False, capture_output=True, text=True
    )


def run_completed(run_id: str) -> None:
    """`nexus attach` says the run the channel named completed in Nexus."""
    answer = nexus("attach", run_id, "-o", "json")
    if answer.returncode != 0:
        raise RoundTripError(
            f"nexus attach {run_id}: {answer.stderr.strip() or answer.stdout.strip()}"
        )
    status = json.loads(answer.stdout)["run"]["status"]
    if status != "completed":
        raise RoundTripError(f"run {run_id} is {status} in Nexus")
    log(f"nexus attach {run_id}: completed")


# -- Plane ----------------------------------------------------------------------------------


def plane(agent: str) -> None:
    api = httpx.Client(
        base_url=env("FAKE_PLANE_URL"), headers={"X-API-Key": env("NEXUS_PLANE_API_KEY")}
    )
    project = f"/api/v1/workspaces/{env('NEXUS_PLANE_WORKSPACE')}/projects/" + env(
        "NEXUS_PLANE_PROJECT_ID"
    )
    name = "compose-test: say hello"
    made = api.post("/_fake/human/work-items", json={"name": name, "labels": [f"agent:{agent}"]})
    made.raise_for_status()
    item = made.json()["id"]
    log(f"a person created work item {item} labelled agent:{agent} in the fake Plane")
    states = api.get(f"{project}/states/").raise_for_status().json()["results"]
    done = next(s["id"] for s in states if s["name"] == "Done")

    def landed() -> list[str] | None:
        got = api.get(f"{project}/work-items/{item}/comments/").raise_for_status().json()
        texts = [str(c["comment_html"]) for c in got["results"]]
        state = api.get(f"{project}/work-items/{item}/").raise_for_status().json()["state"]
        finished = any("Run completed" in t for t in texts)
        return texts if finished and state == done else None

    texts = until(landed, f"'Run completed' and state Done on work item {item}")
    started = next((t for t in texts if "started working on this" in t), None)
    if started is None:
        raise RoundTripError(f"no 'started working' comment on {item}: {texts}")
    found = re.search(r"nexus run <code>([^<]+)</code>", started)
    if found is None:
        raise RoundTripError(f"the 'started' comment names no run: {started}")
    run_id = found.group(1)
    log(f"work item {item}: {len(texts)} comment(s), 'Run completed', state Done; run {run_id}")
    run_completed(run_id)

    def settled() -> dict[str, Any] | None:
        answer = nexus("plane", "status", "-o", "json")
        status: dict[str, Any] = json.loads(answer.stdout) if answer.returncode == 0 else {}
        return status if status.get("pending_writes") == 0 else None

    status = until(settled, "nexus plane status with no pending write", within=60)
    if status.get("failed_writes") != 0 or status.get("mode") != "comments":
        raise RoundTripError(f"nexus plane status: {status}")
    log(f"nexus plane status: mode comments, {status.get('pending_writes')} pending, 0 failed")
    deliveries = api.get("/_fake/deliveries").raise_for_status().json()
    refused = [d for d in deliveries if d["status"] != 200]
    if not deliveries or refused:
        raise RoundTripError(
            f"webhook deliveries to plane-sync not answered 200: {refused or 'none'}"
        )
    log(f"fake Plane: {len(deliveries)} signed webhook deliveries, every one answered 200")


# -- Slack ----------------------------------------------------------------------------------

CHANNEL, USER = "CCOMPOSE", "UCOMPOSE"


def slack(agent: str) -> None:
    gateway = env("GATEWAY_URL").rstrip("/") + "/slack/events"
    secret = env("NEXUS_SLACK_SIGNING_SECRET")
    web = httpx.Client(
        base_url=env("FAKE_SLACK_URL"),
        headers={"Authorization": f"Bearer {env('NEXUS_SLACK_BOT_TOKEN')}"},
    )
    stamp = int(time.time())
    sent = 0

    def mention(text: str) -> str:
        """Post an app_mention to the gateway as Slack would; returns its ts (the thread)."""
        nonlocal sent
        sent += 1
        ts = f"{stamp}.{sent:06d}"
        payload = event_callback(
            f"<@UBOT> {text}", user=USER, channel=CHANNEL, ts=ts, event_id=f"EvCompose{sent}"
        )
        body = json.dumps(payload).encode()
        answer = httpx.post(gateway, content=body, headers=signed_headers(secret, body))
        if answer.status_code != 200:
            raise RoundTripError(f"the gateway answered {answer.status_code}: {answer.text}")
        return ts

    def thread(ts: str) -> list[str]:
        got = web.get("/conversations.replies", params={"channel": CHANNEL, "ts": ts})
        body = got.raise_for_status().json()
        if not body.get("ok"):
            raise RoundTripError(f"conversations.replies: {body}")
        return [str(m["text"]) for m in body["messages"]]

    command = f"run {agent}: Say hello."
    first = mention(command)
    challenge = until(lambda: thread(first) or None, "the pairing challenge in the thread")[0]
    code = re.search(r"nexus pair approve ([A-Z0-9]+)", challenge)
    if code is None:
        raise RoundTripError(
            f"the first reply to an unknown sender is no pairing challenge: {challenge}"
        )
    log(f"unknown sender {USER}: pairing challenge {code.group(1)} in the thread")
    approved = nexus("pair", "approve", code.group(1))
    if approved.returncode != 0:
        raise RoundTripError(f"nexus pair approve: {approved.stderr.strip()}")
    log(f"nexus pair approve {code.group(1)}: ok")

    # The gateway folds the approval in asynchronously: a mention that still finds the sender
    # unknown gets a challenge again; ask again in a new thread until one starts a run.
    def started() -> str | None:
        ts = mention(command)
        replies = until(lambda: thread(ts) or None, "a reply to the mention", within=60)
        return None if "nexus pair approve" in replies[0] else ts

    ts = until(started, "a mention from the paired sender starting a run", within=120)

    def finished() -> list[str] | None:
        texts = thread(ts)
        ended = [t for t in texts if t.startswith("❌")]  # failed, timed out, lost, cancelled
        if ended:
            raise RoundTripError(f"the run did not complete: {ended}")
        return texts if any("completed" in t for t in texts) else None

    texts = until(finished, f"'completed' in the Slack thread {ts}")
    for word in ("requested", "started"):
        if not any(word in t for t in texts):
            raise RoundTripError(f"no '{word}' message in the thread: {texts}")
    found = re.search(r"Run `([^`]+)` completed", next(t for t in texts if "completed" in t))
    if found is None:
        raise RoundTripError(f"the 'completed' message names no run: {texts}")
    shown = " | ".join(t.splitlines()[0][:60] for t in texts)
    log(f"Slack thread {ts}: {len(texts)} messages: {shown}")
    run_completed(found.group(1))


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("plane", "slack"):
        print("usage: roundtrips.py plane|slack AGENT", file=sys.stderr)
        return 2
    try:
        (plane if sys.argv[1] == "plane" else slack)(sys.argv[2])
    except (RoundTripError, httpx.HTTPError) as exc:
        print(f"    {sys.argv[1]} round trip FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
