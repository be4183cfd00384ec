"""An offline, scripted OpenAI-compatible model server for the demo and the end-to-end tests.

    python -m nexus_cli.devstack.offline_model [--host H] [--port P] [--port-file FILE]

It speaks ``POST /v1/chat/completions`` like the real API (JSON, or server-sent events with
``stream: true``: role, content deltas, tool-call deltas with their arguments in pieces, the
finish reason, a usage chunk with ``stream_options.include_usage``, ``data: [DONE]``) and
``GET /v1/models``. It needs nothing but the standard library and no network.

The package needs nothing but the standard library and imports nothing outside itself (the
test profile of deploy/compose.yaml mounts it into the runner image, where nexus_cli is not
installed): `replies` (what a script is made of), `demo_scripts` (what the demo follows),
`check_scripts` (what the end-to-end tests and chaos checks follow), `lab_scripts` (what the
lab's tests follow), `conversation` (which script, which reply), `server` (HTTP).

It is stateless: the reply to a request is a function of the conversation it carries (which
script, how many assistant turns so far, what the last tool said), so a restart, a retry or
several runs at once all behave the same. The script is chosen by a keyword anywhere in the
messages, ``[offline-model:NAME]`` (an agent's system prompt or a run's input), else by a model
name ``offline-NAME``, else by the role the system prompt opens with as examples/agents do
(``You are the planner|reviewer|tester ...``: that script), else it is ``fix``:

- ``fix``: fixes examples/demo-repo: list files, read calc.py, run the tests (they fail), edit
  the bug out, run the tests (they pass), finish with a summary. When its input carries the
  reviewer's finding (``REVIEW_FINDING``, as examples/flows/feature.yaml passes it to the next
  round) it also writes the test the reviewer asked for.
- ``steady``: ``fix`` with a few seconds of shell work first (a run that is still going while
  something else happens, e.g. core is restarted).
- ``slow``: a long shell command (``sleep 600``), then finish: a run to cancel.
- ``approval``: one gated ``run_shell`` call, then finish saying whether it was approved.
- ``chat``: no tools: says hello and finishes.
- ``plan``: for a run in plan mode: lists the files, submits a plan with ``exit_plan_mode``;
  once it is approved (the run ends if not), writes PLAN.md and finishes.
- ``planner``: reads the project, finishes with ``details.steps`` (a list of strings).
- ``reviewer``: reads the project, finishes with ``details.verdict``: ``request_changes`` (with
  ``findings: [REVIEW_FINDING]``) in a flow's first round, ``approve`` from the second on. The
  round is read from the step run ids in the conversation (``<flow run>-<step>-r<round>``, in
  the branch it is asked to review and the branch it works on), so it needs no memory: the same
  request always gets the same verdict.
- ``tester``: runs the tests, finishes with ``details.passed`` (whether they passed).
- ``resume``: ten quick turns for the resume chaos test (scripts/chaos_resume.py): writes
  three files, reads each back a few turns later, appends a distinct line to ``journal.log``
  three times (a side effect that must not happen twice), prints the journal, then finishes
  with ``details.seen`` (whether each read found what was written), ``details.journal`` (the
  journal's lines) and ``details.interrupted`` (tool results that said the call was
  interrupted). A resumed attempt that restored the workspace and the conversation finishes
  with the same details.
- ``paced``: ``resume`` with two seconds' sleep in each journal append, so runs started
  together are all still going seconds later (the cluster chaos test kills a NATS node then).

The lab's scripts (`lab_scripts`, docs/lab.md): an agent revision whose system prompt names
one answers with it, so revisions of one agent can follow different scripts.

- ``lab-steps``: four deterministic turns: writes ``notes/step1.txt``; reads the first skill
  listed as on demand in the system prompt with ``read_skill`` (``{"name": ...}``; the
  listing is the first list item after a line that mentions ``read_skill`` or "on demand"),
  else reads ``notes/step1.txt`` back; writes ``notes/step3.txt`` naming the length of that
  tool result; finishes with ``details.steps`` = 3. Same requests, same replies: a replay of
  an unchanged revision reproduces it, and a changed skill changes turn 3's request.
- ``eval-strict``: finishes at turn 1 with ``details.answer``: the text after ``answer:`` in
  the task input when the input carries ``[easy]``, else ``no idea``.
- ``eval-lenient``: the same, whatever the input: always the text after ``answer:``.

The scripts of agents that wait and remember (`wait_scripts`, issue 42):

- ``sleep``: writes ``notes/before-sleep.txt``, sleeps 5 s (``waiting for CI``; N s with
  ``[sleep-seconds:N]`` in the prompt), reads the
  note back after waking, finishes with ``details.read`` (what it read) and ``details.woke``
  (the ``[woke]`` note it was given).
- ``schedule``: makes a schedule of its own (every 60 s, input ``[offline-model:chat] ...``),
  sleeps 130 s while it fires, lists its schedules, deletes the one it made, finishes with
  ``details.created``, ``details.deleted``, ``details.listed`` and ``details.woke``.
- ``echo``: no tools: finishes at once with every user message it was sent (a chat
  conversation's earlier messages, then the new one) in ``summary`` and ``details.said``.

A request from memory's extraction (its instruction carries ``[nexus-memory-extraction]``)
gets JSON naming what the finished run taught: its result summary, in the repository's scope
when the run had one.
"""

from __future__ import annotations

from .check_scripts import PLAN, RESUME_FILES, RESUME_JOURNAL
from .conversation import (
    DEFAULT_SCRIPT,
    EXTRACTION_MARKER,
    SCRIPTS,
    extraction_answer,
    reply_for,
    script_name,
)
from .demo_scripts import (
    BUG_FILE,
    BUG_NEW,
    BUG_OLD,
    NEGATIVE_TEST,
    NEGATIVE_TEST_FILE,
    PLAN_STEPS,
    REVIEW_FINDING,
    flow_round,
)
from .lab_scripts import (
    STEP1_FILE,
    STEP1_TEXT,
    STEP3_FILE,
    WRONG_ANSWER,
    answer_in,
    first_on_demand_skill,
)
from .replies import Call, Reply, Step, Turn
from .server import MODEL_NAME, Server, main, serve
from .wait_scripts import (
    ECHO_PREFIX,
    SCHEDULE_INPUT,
    SCHEDULE_SLEEP_SECONDS,
    SLEEP_FILE,
    SLEEP_TEXT,
    WOKE,
)

__all__ = [
    "BUG_FILE",
    "BUG_NEW",
    "BUG_OLD",
    "DEFAULT_SCRIPT",
    "ECHO_PREFIX",
    "EXTRACTION_MARKER",
    "MODEL_NAME",
    "NEGATIVE_TEST",
    "NEGATIVE_TEST_FILE",
    "PLAN",
    "PLAN_STEPS",
    "RESUME_FILES",
    "RESUME_JOURNAL",
    "REVIEW_FINDING",
    "SCHEDULE_INPUT",
    "SCHEDULE_SLEEP_SECONDS",
    "SCRIPTS",
    "SLEEP_FILE",
    "SLEEP_TEXT",
    "STEP1_FILE",
    "STEP1_TEXT",
    "STEP3_FILE",
    "WOKE",
    "WRONG_ANSWER",
    "Call",
    "Reply",
    "Server",
    "Step",
    "Turn",
    "answer_in",
    "extraction_answer",
    "first_on_demand_skill",
    "flow_round",
    "main",
    "reply_for",
    "script_name",
    "serve",
]
