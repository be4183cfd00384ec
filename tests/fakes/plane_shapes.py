"""What real Plane puts on the wire, as the fake Plane (tests/fakes/plane.py) builds it.

Written from makeplane/plane ``apps/api`` at commit 4ca6d6c7b807ad09bb571af2c43e85bf47c3ec6b
(2026-05-19); nothing is copied, the shapes are re-stated from reading:

- ``plane/bgtasks/webhook_task.py``: ``model_activity`` sends ``created`` (no field) for a new
  object and one ``updated`` per request key whose value differs from the object as it was
  (the key is named as the caller sent it); ``webhook_activity`` builds ``data`` (``{"id"}``
  alone for ``deleted``) and ``activity`` ``{field, new_value, old_value, actor,
  old_identifier, new_identifier}`` with ``actor`` a ``UserLiteSerializer``;
  ``webhook_send_task`` wraps it as ``{event, action, webhook_id, workspace_id, data,
  activity}`` (``action`` mapped only from HTTP verbs, so ``created`` stays ``created``),
  signs ``json.dumps(payload)`` (hex HMAC-SHA256) and sends headers ``Content-Type``,
  ``User-Agent: Autopilot``, ``X-Plane-Delivery`` (uuid4), ``X-Plane-Event``,
  ``X-Plane-Signature``; it retries network errors only, never a non-2xx answer.
- ``plane/api/serializers/issue.py``: ``IssueExpandSerializer`` (webhook ``data`` of an
  ``issue``: every model field, ``state`` as ``StateLiteSerializer`` ``{id, name, color,
  group}``, ``labels`` as ``{id, name, color}``, ``assignees`` as users, ``description`` =
  the JSON document, ``cycle``/``module`` objects or null); ``IssueSerializer`` (the REST
  answer: ``state``/``labels``/``assignees`` as ids, no ``description_json`` /
  ``description_stripped``); ``IssueCommentSerializer`` (webhook ``data`` of an
  ``issue_comment`` and the REST answer: no ``comment_stripped`` / ``comment_json``).
- ``plane/api/serializers/user.py`` ``UserLiteSerializer``; ``plane/db/models/issue.py``
  (``Issue``, ``IssueComment`` fields); ``plane/app/serializers/issue.py``
  ``IssueDetailSerializer`` (what the web app's edits are compared with: ``state_id``,
  ``label_ids``, ``assignee_ids``, ``description_html``, ``name``).
"""

from __future__ import annotations

import re
from typing import Any

# The keys of a web-app edit (plane/app/views/issue/base.py partial_update compares the
# request with IssueDetailSerializer) and of an API edit (plane/api/views/issue.py patch
# compares with the API's IssueSerializer), per attribute of the fake's work item.
WEB_APP_FIELD = {"state": "state_id", "labels": "label_ids", "assignees": "assignee_ids"}

_TAG = re.compile(r"<[^>]+>")


def strip_tags(html: str) -> str:
    return _TAG.sub("", html)


def user_lite(user: dict[str, Any]) -> dict[str, Any]:
    """UserLiteSerializer."""
    keys = ("id", "first_name", "last_name", "email", "avatar", "avatar_url", "display_name")
    return {k: user.get(k) for k in keys}


def state_lite(state: dict[str, Any]) -> dict[str, Any]:
    """StateLiteSerializer."""
    return {k: state.get(k) for k in ("id", "name", "color", "group")}


def label_lite(label: dict[str, Any]) -> dict[str, Any]:
    """LabelLiteSerializer."""
    return {k: label.get(k) for k in ("id", "name", "color")}


def issue_expand(
    item: dict[str, Any],
    *,
    states: dict[str, dict[str, Any]],
    labels: dict[str, dict[str, Any]],
    users: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """IssueExpandSerializer with ``expand=["labels", "assignees"]``: a webhook's ``data``.

    `item` is the fake's work item in its REST shape (IssueSerializer)."""
    html = str(item.get("description_html") or "<p></p>")
    state = states.get(str(item.get("state")))
    out = {k: v for k, v in item.items() if k not in ("state", "labels", "assignees")}
    out.update(
        {
            "cycle": None,
            "module": None,
            "labels": [label_lite(labels[i]) for i in item.get("labels", []) if i in labels],
            "assignees": [user_lite(users[i]) for i in item.get("assignees", []) if i in users],
            "state": None if state is None else state_lite(state),
            "description": {"type": "doc", "content": []},
            "description_json": {"type": "doc", "content": []},
            "description_html": html,
            "description_stripped": strip_tags(html).strip() or None,
        }
    )
    return out


def webhook_body(
    event: str,
    action: str,
    *,
    webhook_id: str,
    workspace_id: str,
    data: dict[str, Any],
    actor: dict[str, Any],
    field: str | None = None,
    old: Any = None,
    new: Any = None,
) -> dict[str, Any]:
    """webhook_send_task's payload for webhook_activity's arguments."""
    return {
        "event": event,
        "action": action,
        "webhook_id": webhook_id,
        "workspace_id": workspace_id,
        "data": data,
        "activity": {
            "field": field,
            "new_value": new,
            "old_value": old,
            "actor": user_lite(actor),
            "old_identifier": None,
            "new_identifier": None,
        },
    }


def rate_limited() -> dict[str, Any]:
    """The body of a 429 (plane/authentication/adapter/exception.py turns DRF's Throttled
    into AuthenticationException RATE_LIMIT_EXCEEDED, code 5900 in adapter/error.py)."""
    return {"error_code": 5900, "error_message": "RATE_LIMIT_EXCEEDED"}
