"""Comparing what a fake sends with the real client library's models: fields the model does not
know (a fake inventing a field) and fields the real service always sends that a fake left out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel


def unknown_fields(model: BaseModel, path: str = "") -> list[str]:
    """Paths of keys a pydantic model (openai's, which allow extras) kept as extras."""
    found = [f"{path}{key}" for key in (model.model_extra or {})]
    for name in type(model).model_fields:
        found += _walk(getattr(model, name), f"{path}{name}.")
    return found


def _walk(value: Any, path: str) -> list[str]:
    if isinstance(value, BaseModel):
        return unknown_fields(value, path)
    if isinstance(value, list | tuple):
        return [p for i, item in enumerate(value) for p in _walk(item, f"{path}{i}.")]
    return []


def missing(data: Mapping[str, Any], keys: Iterable[str], where: str = "") -> list[str]:
    """The `keys` absent from `data` (a key present with null counts as present)."""
    return [f"{where}{key}" for key in keys if key not in data]
