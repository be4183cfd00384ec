"""Breaking-change detection between two JSON Schemas of one contract model (docs/design.md §4.2).

A v1 schema may only gain optional fields. What counts as breaking, old -> new:

- a property removed (a rename is a removal plus an addition);
- a property's type changed or narrowed: a different type, an enum/const losing values, an
  ``anyOf`` branch lost (e.g. ``X | None`` becoming ``X``), a tighter bound (``minimum``,
  ``maxLength``, ...), a new ``pattern``/``format``, extra properties newly forbidden;
- an optional property becoming required, or a new required property.

Not breaking: new optional properties, new enum values or ``anyOf`` branches (widening), and
annotation changes (descriptions, titles, defaults, examples).

Schemas are compared as pydantic emits them: ``$ref`` into ``$defs`` (with sibling keys), ``anyOf``
for unions and ``Optional``, ``const``/``enum`` for ``Literal`` and enums, ``items`` for lists and
``additionalProperties`` for dicts. Everything here is pure: no pydantic, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

Schema = Mapping[str, Any]

ROOT = "$"

# Bounds where a larger new value narrows, and where a smaller new value narrows.
_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
# Constraints that cannot be ordered: adding or changing one narrows, removing one widens.
_OPAQUE = ("pattern", "format", "multipleOf")


class _Side:
    """One schema document: resolves ``$ref`` pointers against its own root."""

    def __init__(self, root: Schema) -> None:
        self.root = root

    def resolve(
        self, node: Schema, seen: frozenset[str] = frozenset()
    ) -> tuple[dict[str, Any], str]:
        """The node with ``$ref`` (and single-element ``allOf``) inlined, and the ref followed
        (``""`` if none). Sibling keys of a ``$ref`` apply on top of the target."""
        node = dict(node)
        ref = ""
        while "$ref" in node:
            ref = node.pop("$ref")
            if ref in seen:
                raise ValueError(f"unresolvable $ref cycle at {ref}")
            seen = seen | {ref}
            node = {**self._pointer(ref), **node}
        if "allOf" in node:
            parts = node.pop("allOf")
            for part in parts:
                resolved, part_ref = self.resolve(part, seen)
                ref = ref or part_ref
                node = _merge(node, resolved)
        return node, ref

    def _pointer(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#"):
            raise ValueError(f"only local $ref is supported, got {ref!r}")
        target: Any = self.root
        for raw in ref[1:].split("/")[1:]:
            token = raw.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or token not in target:
                raise ValueError(f"$ref {ref!r} does not resolve")
            target = target[token]
        if not isinstance(target, Mapping):
            raise ValueError(f"$ref {ref!r} is not a schema")
        return dict(target)


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Conjunction of two object-ish schemas, enough for pydantic's ``allOf`` wrappers."""
    out = {**a, **b}
    if "properties" in a and "properties" in b:
        out["properties"] = {**a["properties"], **b["properties"]}
    if "required" in a and "required" in b:
        out["required"] = sorted(set(a["required"]) | set(b["required"]))
    return out


def _describe(node: Schema) -> str:
    """A short human name of a (resolved, single-branch) schema for messages."""
    if "const" in node:
        return f"const {node['const']!r}"
    if "enum" in node:
        return f"enum {list(node['enum'])!r}"
    kind = _kind(node)
    return "any" if kind is None else kind


def _kind(node: Schema) -> str | None:
    """The JSON type of a single-branch schema, or None for 'anything'."""
    declared = node.get("type")
    if isinstance(declared, str):
        return declared
    values = [node["const"]] if "const" in node else node.get("enum")
    if values:
        kinds = {_json_type(v) for v in values}
        return kinds.pop() if len(kinds) == 1 else None
    if any(k in node for k in ("properties", "additionalProperties", "required")):
        return "object"
    if any(k in node for k in ("items", "prefixItems")):
        return "array"
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_accepts(old: str | None, new: str | None) -> bool:
    """Whether values of JSON type ``old`` are still values of type ``new``."""
    if new is None:
        return True
    if old is None:
        return False
    return old == new or (old == "integer" and new == "number")


def _join(path: str, prop: str) -> str:
    return f"{path}.{prop}"


class _Comparer:
    def __init__(self, old_root: Schema, new_root: Schema) -> None:
        self.old = _Side(old_root)
        self.new = _Side(new_root)
        # (old ref, new ref) pairs being compared: recursive models are assumed compatible on
        # re-entry, and everything else about them is still checked on the first pass.
        self._active: set[tuple[str, str]] = set()

    # --- unions -------------------------------------------------------------------------------

    def _branches(self, side: _Side, node: Schema) -> Iterator[tuple[dict[str, Any], str]]:
        """The alternatives of a schema: ``anyOf``/``oneOf`` flattened, ``type: [..]`` split."""
        resolved, ref = side.resolve(node)
        union = resolved.pop("anyOf", None) or resolved.pop("oneOf", None)
        if union is not None:
            for member in union:
                yield from self._branches(side, {**resolved, **dict(member)})
            return
        declared = resolved.get("type")
        if isinstance(declared, list):
            for single in declared:
                yield {**resolved, "type": single}, ref
            return
        yield resolved, ref

    def compare(self, old: Schema, new: Schema, path: str) -> list[str]:
        old_branches = list(self._branches(self.old, old))
        new_branches = list(self._branches(self.new, new))
        problems: list[str] = []
        for old_branch, old_ref in old_branches:
            attempts = [
                (self._compare_branch(old_branch, old_ref, nb, nr, path), nb)
                for nb, nr in new_branches
            ]
            if any(not found for found, _ in attempts):
                continue
            # No new branch takes everything this one did. Report the closest one's details
            # (same JSON type), so e.g. a field removed inside an Optional model says which.
            same_kind: list[list[str]] = [
                found for found, nb in attempts if _type_accepts(_kind(old_branch), _kind(nb))
            ]
            if same_kind:
                closest: list[str] = min(same_kind, key=len)
                problems.extend(closest)
            elif len(old_branches) == 1:
                problems.append(
                    f"{path}: type changed from {self._union_name(old_branches)} "
                    f"to {self._union_name(new_branches)}"
                )
            else:
                problems.append(
                    f"{path}: no longer accepts {self._union_name([(old_branch, old_ref)])} "
                    f"(was {self._union_name(old_branches)}, "
                    f"now {self._union_name(new_branches)})"
                )
        return problems

    @staticmethod
    def _union_name(branches: list[tuple[dict[str, Any], str]]) -> str:
        names = [ref.rsplit("/", 1)[-1] if ref else _describe(b) for b, ref in branches]
        return " | ".join(names)

    # --- one branch against one branch --------------------------------------------------------

    def _compare_branch(
        self, old: dict[str, Any], old_ref: str, new: dict[str, Any], new_ref: str, path: str
    ) -> list[str]:
        key = (old_ref, new_ref)
        if old_ref and new_ref:
            if key in self._active:
                return []
            self._active.add(key)
        try:
            return self._compare_plain(old, new, path)
        finally:
            self._active.discard(key)

    def _compare_plain(self, old: dict[str, Any], new: dict[str, Any], path: str) -> list[str]:
        old_kind, new_kind = _kind(old), _kind(new)
        if not _type_accepts(old_kind, new_kind):
            return [f"{path}: type changed from {_describe(old)} to {_describe(new)}"]
        problems = self._compare_values(old, new, path)
        problems += self._compare_bounds(old, new, path)
        if new_kind in (None, "object") and old_kind in (None, "object"):
            problems += self._compare_object(old, new, path)
        if new_kind in (None, "array") and old_kind in (None, "array"):
            problems += self._compare_array(old, new, path)
        return problems

    @staticmethod
    def _compare_values(old: Schema, new: Schema, path: str) -> list[str]:
        new_values = [new["const"]] if "const" in new else new.get("enum")
        if new_values is None:
            return []
        old_values = [old["const"]] if "const" in old else old.get("enum")
        if old_values is None:
            return [f"{path}: narrowed to {_describe(new)} (was {_describe(old)})"]
        lost = [v for v in old_values if v not in new_values]
        if lost:
            return [f"{path}: enum lost values {lost!r} (now {list(new_values)!r})"]
        return []

    @staticmethod
    def _compare_bounds(old: Schema, new: Schema, path: str) -> list[str]:
        problems = []
        for name in _LOWER_BOUNDS:
            if name in new and (name not in old or new[name] > old[name]):
                problems.append(f"{path}: {name} narrowed from {old.get(name)} to {new[name]}")
        for name in _UPPER_BOUNDS:
            if name in new and (name not in old or new[name] < old[name]):
                problems.append(f"{path}: {name} narrowed from {old.get(name)} to {new[name]}")
        for name in _OPAQUE:
            if name in new and new[name] != old.get(name):
                problems.append(f"{path}: {name} changed from {old.get(name)!r} to {new[name]!r}")
        if new.get("uniqueItems") and not old.get("uniqueItems"):
            problems.append(f"{path}: items must now be unique")
        return problems

    def _compare_object(self, old: Schema, new: Schema, path: str) -> list[str]:
        problems: list[str] = []
        old_props: Mapping[str, Any] = old.get("properties", {})
        new_props: Mapping[str, Any] = new.get("properties", {})
        old_required = set(old.get("required", ()))
        new_required = set(new.get("required", ()))
        for name, old_prop in old_props.items():
            where = _join(path, name)
            if name not in new_props:
                problems.append(f"{where}: property removed")
                continue
            problems += self.compare(old_prop, new_props[name], where)
        for name in sorted(new_required - old_required):
            where = _join(path, name)
            if name in old_props:
                problems.append(f"{where}: optional property became required")
            else:
                problems.append(f"{where}: new required property")
        problems += self._compare_extra(old, new, path)
        return problems

    def _compare_extra(self, old: Schema, new: Schema, path: str) -> list[str]:
        """``additionalProperties``: absent/true = anything, false = forbidden, else a schema."""
        old_extra = old.get("additionalProperties", True)
        new_extra = new.get("additionalProperties", True)
        if new_extra is True or new_extra == {}:
            return []
        if new_extra is False:
            if old_extra is False:
                return []
            return [f"{path}: extra properties are now forbidden"]
        if old_extra is False:
            return []
        return self.compare({} if old_extra is True else old_extra, new_extra, f"{path}{{*}}")

    def _compare_array(self, old: Schema, new: Schema, path: str) -> list[str]:
        problems: list[str] = []
        old_prefix = list(old.get("prefixItems", ()))
        new_prefix = list(new.get("prefixItems", ()))
        for index, new_item in enumerate(new_prefix):
            old_item = old_prefix[index] if index < len(old_prefix) else old.get("items", {})
            problems += self.compare(old_item, new_item, f"{path}[{index}]")
        if "items" in new and new["items"] is not True:
            new_items = new["items"]
            for index in range(len(new_prefix), len(old_prefix)):
                problems += self.compare(old_prefix[index], new_items, f"{path}[{index}]")
            if new_items is False:
                if old.get("items") is not False:
                    problems.append(f"{path}: extra items are now forbidden")
            else:
                old_items = old.get("items", {})
                old_items = {} if old_items is True else old_items
                if old_items is not False:
                    problems += self.compare(old_items, new_items, f"{path}[]")
        return problems


def breaking_changes(old_schema: Schema, new_schema: Schema) -> list[str]:
    """The breaking changes from ``old_schema`` to ``new_schema`` (two JSON Schemas of one model),
    one readable line each, paths from ``$`` (``$.config.memory.items[].score``); empty if a
    consumer of the old schema keeps working."""
    return _Comparer(old_schema, new_schema).compare(old_schema, new_schema, ROOT)


def snapshot_breaking_changes(old: Mapping[str, Schema], new: Mapping[str, Schema]) -> list[str]:
    """Breaking changes between two snapshots (name -> schema): a removed model, or any breaking
    change inside a model both have. New models are fine."""
    problems: list[str] = []
    for name in sorted(old):
        if name not in new:
            problems.append(f"{name}: schema removed")
            continue
        problems += [f"{name}: {line}" for line in breaking_changes(old[name], new[name])]
    return problems
