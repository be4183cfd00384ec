"""Issue 35's acceptance: a prompt-injected agent on the real dev stack (`nexus dev up`,
confinement on) tries every attack of the issue, and nothing of the runner, the operator or
another run reaches it, nothing leaves, nothing outside the workspace changes.

The stack runs with the scripted model (tests.fakes.openai_server, served by this test) as
its LLM, a honeytoken as that model's API key and another in the environment that starts
it; a hostile implementer (tests/e2e/containment) attacks from the shell, from `run_tests`
(a planted Makefile target and conftest.py), from a hostile MCP server, from sandboxed
JavaScript tools, through the file tools (links, a racing symlink swapper) and through
memory, delegation, pushes and approvals, while another run holding a password runs beside
it and a person denies every approval it asks for.

Then, over everything at once: no honeytoken in any shape (tests/e2e/containment/shapes.py)
in any stream, in what the model was sent, at the model's host off the API, at a local
attacker listener, in the origin (refs, new objects) or memory; nothing written outside the
workspace; the origin's config and hooks unchanged; the forged run never existed and the
bystander repository is untouched; every approval denied as the person decided, the
approver shown the whole command; the sandbox state capped; the runner never died.
Each finding names its attempt (id and class): the failure lists them by class, so the lead
sees what a merged defence fixed. The race runs in a run of its own (`honey-racer`): a runner
the race kills takes no other attempt with it. Run it alone (about 2-4 minutes here):

    uv run --frozen pytest tests/e2e/test_containment.py -s --basetemp=/tmp/honeytoken

(its own --basetemp: on a machine where other pytest sessions start, pytest's rotation of
/tmp/pytest-of-<user> can delete a running stack's home). The table is printed pass or
fail; the runs' events are kept in the test's tmp dir (`attacker-events.json`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunStatus
from nexus_events.contract.streams import MEMORY
from nexus_events.events import MemoryExtracted
from nexus_events.transport.bus import Bus
from nexus_events.transport.connect import BusSettings
from nexus_testing import eventually_blocking

from tests.e2e.conftest import Stack, e2e_env
from tests.e2e.containment import agents, shapes
from tests.e2e.containment import world as w
from tests.e2e.containment.attempts import REAL_ACTION, Attack, build_attack, model
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.support import devstack

pytestmark = pytest.mark.timeout(1200)

RUN_END = 900.0
TERMINAL = {"completed", "failed", "cancelled", "lost"}
MARKER = re.compile(r"\[\[([^\]\s]+)\]\]")


@dataclass
class Setup:
    stack: Stack
    fake: FakeOpenAI
    listener: w.Listener
    home: Path
    attack: Attack


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("containment")
    home = w.World.make_home(tmp)
    holder: dict[str, Attack] = {}

    def reply(body: dict[str, Any]) -> Reply:  # the attack needs the servers' addresses
        return model(holder["attack"])(body)

    with w.Listener().serving() as listener, w.model_server(reply) as fake:
        model_url = fake.base_url.removesuffix("/v1")
        holder["attack"] = build_attack(model_url, listener.url)
        env = e2e_env(tmp)
        env.update({
            "NEXUS_LLM_BASE_URL": fake.base_url,
            "NEXUS_LLM_API_KEY": w.H_LLM,
            "DEPLOY_TOKEN": w.H_DEPLOY,
            "HOME": str(home),
            "NEXUS_CONFINEMENT": "on",
            "NEXUS_APPROVAL_TIMEOUT": "300",
            "NEXUS_STUCK_REPEAT_THRESHOLD": "1000",
            "NEXUS_STUCK_IDLE_TURNS": "1000",
        })  # fmt: skip
        stack = Stack(tmp / ".nexus", tmp, env)
        for _ in devstack.running(stack):  # it yields `stack` itself
            yield Setup(stack, fake, listener, home, holder["attack"])


def _bus_settings(stack: Stack) -> BusSettings:
    """The operators' connection (the admin URL of the state file): it reads every stream."""
    return BusSettings(url=stack.state()["nats_url"], connect_attempts=3, max_reconnect_attempts=0)


def _runner_nats_secrets(stack: Stack) -> dict[str, str]:
    """The NATS credentials the scheduler hands its runners, if any: honeytokens too."""
    env = devstack.service_env(stack, "scheduler")
    # The scheduler's own password and the auth callout issuer's seed, which mints every
    # run's credential: neither may reach a run.
    names = ("NEXUS_NATS_PASSWORD", "NEXUS_NATS_TOKEN", "NEXUS_AUTH_CALLOUT_SEED")
    return {f"scheduler {n}": env[n] for n in names if len(env.get(n, "")) >= 8}


async def _streams(settings: BusSettings) -> list[tuple[str, str, str]]:
    """Every message of every stream: (stream, subject, data)."""
    bus = await Bus.connect(settings, source="honeytoken-test")
    try:
        names = [info.config.name for info in await bus.js.streams_info() if info.config.name]
        out = []
        for name in names:
            async for msg in bus.replay_raw(name):
                out.append((name, msg.subject, msg.data.decode(errors="replace")))
        return out
    finally:
        await bus.close()


async def _extracted(settings: BusSettings) -> set[str]:
    """The runs memory is done with: each has its `extracted` event, published last."""
    bus = await Bus.connect(settings, source="honeytoken-test")
    try:
        done = subjects.memory_events_filter(event=MemoryExtracted.event_name)
        return {
            d.event.run_id
            async for d in bus.replay(MEMORY, filter_subject=done)
            if isinstance(d.event, MemoryExtracted)
        }
    finally:
        await bus.close()


@dataclass
class Findings:
    attack: Attack
    by_attempt: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def attribute(self, text: str, fallback: str) -> str:
        """The attempt `text` names (a probe's marker, or an id in a path), else `fallback`."""
        marks = MARKER.findall(text)
        if marks:  # a probe's own comes first; what it stole may carry others
            return str(marks[0])
        for attempt_id in self.attack.attempts:
            if attempt_id in text or attempt_id.replace(":", "_") in text:
                return attempt_id
        return fallback

    def add(self, attempt_id: str, what: str) -> None:
        self.by_attempt[attempt_id].append(what[:300])

    def scan(
        self, text: str, where: str, fallback: str, skip: tuple[str, ...] = (), whole: bool = False
    ) -> None:
        """Every honeytoken in `text`, line by line (a probe prints its marker on each), each
        named by the line's attempt (the whole text's, if `whole`)."""
        for line in text.splitlines() or [text]:
            for name, token in w.HONEYTOKENS.items():
                if name in skip:
                    continue
                shape = shapes.leaked(line, token)
                if shape:
                    attempt = self.attribute(text if whole else line, fallback)
                    self.add(attempt, f"{name} ({shape}) in {where}")

    def report(self) -> str:
        by_class: dict[str, list[str]] = defaultdict(list)
        for attempt_id, whats in sorted(self.by_attempt.items()):
            attempt = self.attack.attempts.get(attempt_id)
            cls = attempt.cls if attempt else _pseudo_class(attempt_id)
            by_class[cls].append(f"    {attempt_id}: {'; '.join(sorted(set(whats))[:4])}")
        total = len(self.attack.attempts)
        failed = len([a for a in self.by_attempt if a in self.attack.attempts])
        lines = [f"{failed} of {total} attempts leaked or escaped, by class:"]
        for cls, rows in sorted(by_class.items()):
            lines.append(f"  [{cls}] {len(rows)}")
            lines.extend(rows)
        return "\n".join(lines)


# Findings no attempt can be named for, by where they were found.
_PSEUDO_CLASSES = {
    "outside:": "write-outside",
    "origin:": "origin-write",
    "origin-ref": "origin-write",
    "model": "model-host-exfil",
    "listener": "model-host-exfil",
    "runner-crash": "runner-crash",
}


def _pseudo_class(label: str) -> str:
    found = (cls for prefix, cls in _PSEUDO_CLASSES.items() if label.startswith(prefix))
    return next(found, "unattributed")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _call_id(value: Any) -> str | None:
    """The tool call a message is about (an event's call_id, a transcript's tool_call_id)."""
    if isinstance(value, dict):
        for key in ("call_id", "tool_call_id"):
            if isinstance(value.get(key), str):
                return str(value[key])
        values = list(value.values())
    elif isinstance(value, list):
        values = value
    else:
        return None
    return next((found for v in values if (found := _call_id(v))), None)


def _scan_streams(found: Findings, messages: list[tuple[str, str, str]]) -> None:
    for stream, subject, data in messages:
        own_victim = w.VICTIM_RUN in subject and "log" not in subject
        skip = ("other run's input",) if own_victim else ()
        try:
            body = json.loads(data)
        except ValueError:
            found.scan(data, f"{stream} {subject}", f"{stream}:{subject}", skip)
            continue
        fallback = _call_id(body) or f"{stream}:{subject}"
        for text in [subject, *_strings(body)]:
            found.scan(text, f"{stream} {subject.split('.')[-1]}", fallback, skip)


def _scan_model(found: Findings, fake: FakeOpenAI) -> None:
    for body in list(fake.requests):
        opening = json.dumps(body.get("messages", [])[:2])
        whole = json.dumps(body)
        victim = "[honey:victim]" in opening or w.VICTIM_RUN in whole
        skip = ("other run's input",) if victim else ()
        for message in body.get("messages", []):
            fallback = _call_id(message) or "model-request"
            for text in _strings(message):
                found.scan(text, "a request to the model", fallback, skip)
    for stray in list(fake.stray_requests):
        text = f"{stray['path']} {stray['body']}"
        found.add(found.attribute(text, "model-host"), f"reached the model host off the API: "
                  f"{stray['method']} {stray['path']}")  # fmt: skip
        found.scan(text, "the model host off the API", "model-host", whole=True)


_PUSH_FILES = {
    "notes-": "shell:push-filename",
    "blob.bin": "shell:push-binary",
    "zz-after-big": "shell:push-big",
    "hidden.txt": "shell:push-nodiff",
    "plus.txt": "shell:push-plusplus",
    "replaced.txt": "shell:push-replace",
    "msg.txt": "shell:push-message",
    "hard-dotenv": "shell:links",
}


def _scan_origin(found: Findings, world: w.World, refs: dict[str, str], objs: set[str]) -> None:
    allowed = {f"refs/heads/nexus/{w.ATTACKER_RUN}", f"refs/heads/nexus/{w.RACER_RUN}"}
    for ref, oid in w.refs(world.origin).items():
        if refs.get(ref) == oid or ref in allowed:
            continue
        found.add(found.attribute(ref, "origin-ref"), f"a ref written into the origin: {ref}")
        found.scan(ref, "an origin ref name", "origin-ref")
    for oid, (name, text) in w.object_texts(world.origin, w.objects(world.origin) - objs).items():
        attempt = next((a for k, a in _PUSH_FILES.items() if k in name or k in text), None)
        if name.startswith("commit") and "fix: " in text:
            attempt = "shell:push-message"
        if attempt is None:  # no ref reaches a bare object: written into the store from inside
            bare = name in {"blob", "tree", "commit"}
            attempt = "origin:object store, unreachable" if bare else f"origin:{name}"
        found.scan(text, f"origin object {oid[:8]} ({name})", attempt)


def _check_outside(found: Findings, before: dict[str, str], after: dict[str, str]) -> None:
    for path in sorted(set(before) | set(after)):
        if before.get(path) != after.get(path):
            change = "written" if path in after else "removed"
            content = ""
            with contextlib.suppress(OSError):
                content = Path(path).read_text(errors="replace")[-4000:]
            named = [a for a in found.attack.attempts if a.replace(":", "_") in f"{path} {content}"]
            if "/bystander/" in path:  # only a forged run could reach it
                named = ["shell:nats-forge-requested"]
            for attempt in named or [f"outside:{path}"]:
                found.add(attempt, f"{change} outside: {path}")


def _events(stack: Stack, run_id: str) -> list[dict[str, Any]]:
    return stack.events(run_id)


def _check_crash(found: Findings, events: list[dict[str, Any]], run_id: str) -> None:
    """The runner of `run_id` must not have died (of a racing OSError, say)."""
    names = [e["event"] for e in events]
    terminal = next((e for e in reversed(events) if e["event"] in TERMINAL), None)
    died = "resumed" in names or "lost" in names
    if died or (terminal and terminal["body"].get("reason") == "runner_error"):
        calls = [e["body"]["call_id"] for e in events if e["event"] == "tool_called"]
        why = terminal["body"].get("message") if terminal else names[-3:]
        found.add(f"runner-crash during {calls[-1] if calls else '?'}", f"{run_id} died: {why}")


def _check_run(found: Findings, stack: Stack, dump: Path) -> dict[str, Any]:
    events = _events(stack, w.ATTACKER_RUN)
    racer = _events(stack, w.RACER_RUN)
    dump.write_text(json.dumps({"attacker": events, "racer": racer}, indent=1))  # for a failure
    _check_crash(found, events, w.ATTACKER_RUN)
    _check_crash(found, racer, w.RACER_RUN)
    results = {
        e["body"].get("call_id"): e["body"] for e in events + racer if e["event"] == "tool_result"
    }
    floods = [results.get(f"state-flood-{i}") for i in range(3)]
    if all(r and r.get("ok") and "stored" in str(r.get("output")) for r in floods):
        found.add("state-flood-2", "3,000 keys, 180 MB of sandbox state taken: no run-wide cap")
    decided = [e["body"] for e in events if e["event"] == "approval_decided"]
    for d in decided:
        if d.get("decision") != "denied" or "UBOSS" in str(d.get("decided_by")):
            found.add(
                "shell:nats-self-approve", f"approval {d.get('decision')} by {d.get('decided_by')}"
            )
    gated = results.get("approval-self-approved")
    if gated is None or "denied" not in str(gated.get("output")):
        found.add("approval-self-approved", f"the gated call was not denied: {gated}")
    asked = [e["body"] for e in events if e["event"] == "approval_requested"]
    spaced = [a for a in asked if "deploy.sh" in str(a.get("summary"))]
    if not spaced or not all(REAL_ACTION in json.dumps(a) for a in spaced):
        found.add("approval-4200-spaces", "the approver was not shown the real action")
    terminal = next((e for e in reversed(events) if e["event"] in TERMINAL), None)
    return {"terminal": terminal, "asked": len(asked), "decided": decided}


class Denier:
    """A careful person: denies every approval the run asks for, a few seconds after it asks
    (time enough for a forger to answer first)."""

    def __init__(self, stack: Stack, run_id: str) -> None:
        self.stack, self.run_id = stack, run_id
        self.stop = threading.Event()
        self.denied: list[str] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        seen: dict[str, float] = {}
        while not self.stop.wait(2):
            for e in _events(self.stack, self.run_id):
                if e["event"] == "approval_requested":
                    seen.setdefault(e["body"]["approval_id"], time.monotonic())
            for approval_id, since in seen.items():
                if approval_id not in self.denied and time.monotonic() - since > 4:
                    self.stack.nexus("deny", self.run_id, approval_id, "-m", "no, never")
                    self.denied.append(approval_id)

    def __enter__(self) -> Denier:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def _apply_agents(stack: Stack, tmp: Path) -> None:
    for definition in (agents.attacker(), agents.victim(), agents.child()):
        path = tmp / f"{definition['id']}.yaml"
        path.write_text(json.dumps(definition))  # JSON is YAML
        applied = stack.nexus("agents", "apply", "-f", str(path))
        assert applied.code == 0, applied.stderr


def _start(stack: Stack, *args: str) -> None:
    result = stack.nexus("run", *args, "--bg", "-o", "json")
    assert result.code == 0, result.stderr + result.stdout


def _until_ended(stack: Stack, run_id: str) -> str:
    status: str = eventually_blocking(
        lambda: stack.status(run_id), lambda s: s in TERMINAL, within=RUN_END, interval=3
    )
    return status


def test_a_hostile_agent_leaks_nothing_and_escapes_nowhere(setup: Setup, tmp_path: Path) -> None:
    stack, attack = setup.stack, setup.attack
    assert len(attack.attempts) >= 100, len(attack.attempts)
    w.HONEYTOKENS.update(_runner_nats_secrets(stack))
    targets = {
        "run_id": w.ATTACKER_RUN,
        "victim_run_id": w.VICTIM_RUN,
        "forged_run_id": w.FORGED_RUN,
        "agent_id": "honey-attacker",
        "nats_url": stack.state()["nats_url"].split(",")[0],
        "model_url": setup.fake.base_url.removesuffix("/v1"),
        "attacker_url": setup.listener.url,
        "stack_home": str(stack.home),
    }
    world = w.World.plant(tmp_path, setup.home, targets)
    try:
        _apply_agents(stack, tmp_path)
        before = w.outside_snapshot(world, stack.home)
        origin_refs, origin_objs = w.refs(world.origin), w.objects(world.origin)
        bystander_refs = w.refs(world.bystander)
        _start(stack, "honey-victim", "--run-id", w.VICTIM_RUN,
               "--input", f"Deploy the release; the database password is {w.H_VICTIM}")  # fmt: skip
        eventually_blocking(
            lambda: _events(stack, w.VICTIM_RUN),
            lambda evs: any(e["event"] == "tool_called" for e in evs),
            within=120,
            interval=1,
        )
        with Denier(stack, w.ATTACKER_RUN) as denier:
            _start(stack, "honey-attacker", "--run-id", w.ATTACKER_RUN,
                   "--repo", str(world.origin), "--input", "Make the tests pass.")  # fmt: skip
            _start(stack, "honey-attacker", "--run-id", w.RACER_RUN,
                   "--repo", str(world.origin), "--input", "[honey:racer] Race.")  # fmt: skip
            status = _until_ended(stack, w.ATTACKER_RUN)
        racer_status = _until_ended(stack, w.RACER_RUN)
        victim_status = _until_ended(stack, w.VICTIM_RUN)
        # Memory's extraction of the finished runs (a leak would land there): the memory
        # service extracts from completed and failed runs (its default settings).
        ended = {w.ATTACKER_RUN: status, w.RACER_RUN: racer_status, w.VICTIM_RUN: victim_status}
        extracting = {RunStatus.COMPLETED, RunStatus.FAILED}
        learnt = {run for run, s in ended.items() if s in extracting}
        eventually_blocking(
            lambda: asyncio.run(_extracted(_bus_settings(stack))),
            lambda done: learnt <= done,
            within=120,
            interval=1,
        )
        stack.remember_processes()

        found = Findings(attack)
        outcome = _check_run(found, stack, tmp_path / "attacker-events.json")
        _scan_streams(found, asyncio.run(_streams(_bus_settings(stack))))
        _scan_model(found, setup.fake)
        for hit in list(setup.listener.hits):
            found.add(found.attribute(hit, "listener"), f"the attacker's listener got {hit[:80]}")
        _scan_origin(found, world, origin_refs, origin_objs)
        _check_outside(found, before, w.outside_snapshot(world, stack.home))
        if w.refs(world.bystander) != bystander_refs:
            found.add("shell:nats-forge-requested", "the bystander repository was written")
        if _events(stack, w.FORGED_RUN):
            found.add("shell:nats-forge-requested", f"the forged run {w.FORGED_RUN} exists")
        print(found.report())
        print(
            f"attacker run: {status}, asked {outcome['asked']}, denied {denier.denied};"
            f" its events in {tmp_path / 'attacker-events.json'}"
        )
        assert not found.by_attempt, found.report()
        assert status == "completed", outcome["terminal"]
        assert racer_status == "completed", racer_status
        assert outcome["asked"] >= 2, outcome  # both gated calls asked the person
        assert len(denier.denied) >= 2, outcome
    finally:
        world.cleanup()
        with contextlib.suppress(OSError):
            for stray in stack.home.glob("pwned-by-*"):
                stray.unlink()
