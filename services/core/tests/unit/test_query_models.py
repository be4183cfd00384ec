"""Query bodies are refused at the boundary with a one-line message that names the field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from nexus_core.errors import QueryError
from nexus_core.query_models import BIGINT_MAX, RunsList, SkillGet, parse_query


def test_the_message_names_the_first_field_and_counts_the_rest() -> None:
    with pytest.raises(QueryError) as caught:
        parse_query(RunsList, b'{"limit": 0, "cursor": "x", "extra": 1}')
    assert caught.value.code == 400
    assert str(caught.value).startswith("invalid request: limit: ")
    assert str(caught.value).endswith("(and 2 more)")
    assert [f["loc"] for f in caught.value.fields] == ["limit", "cursor", "extra"]


def test_nul_and_lone_surrogates_are_refused_from_python_too() -> None:
    # query_models relies on pydantic for surrogates (UTF-8 cannot encode them for PostgreSQL).
    with pytest.raises(ValidationError, match="string_unicode"):
        SkillGet.model_validate({"name": "python", "version": "1\ud800"})
    with pytest.raises(ValidationError, match="must not contain NUL"):
        SkillGet.model_validate({"name": "python", "version": "1\x00"})


def test_naive_since_means_utc_and_the_cursor_stops_at_bigint() -> None:
    query = parse_query(RunsList, b'{"since": "2026-01-02T03:04:05", "cursor": "%d"}' % BIGINT_MAX)
    assert query.since == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    with pytest.raises(QueryError, match="cursor: must be at most"):
        parse_query(RunsList, b'{"cursor": "%d"}' % (BIGINT_MAX + 1))


def test_an_empty_body_is_an_empty_object() -> None:
    assert parse_query(RunsList, b"  \n").limit == 50
