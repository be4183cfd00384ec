"""The subset of kustomize that deploy/k8s uses, to render overlays without the binary.

Supported: `resources` (files and directories with a kustomization.yaml), `configMapGenerator`
(files, literals, `behavior` create/replace/merge against a ConfigMap of the resources;
`generatorOptions.disableNameSuffixHash: true` required), `images` (newName/newTag),
`replicas`, `labels` (metadata labels only), and `patches` given by `path` as strategic-merge
patches matched on kind, name and namespace (maps merge; a null value deletes the key; lists
of maps with a `name` merge by name; other lists are replaced). Anything else raises, so a manifest
using a feature this renderer lacks fails the tests instead of being checked half-way.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

_KNOWN = {
    "apiVersion",
    "kind",
    "resources",
    "configMapGenerator",
    "generatorOptions",
    "images",
    "replicas",
    "labels",
    "patches",
}


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata", {})
    return obj["kind"], meta.get("name", ""), meta.get("namespace", "")


def merge(base: Any, patch: Any) -> Any:
    """Strategic merge (the subset described in the module docstring)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    if (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(i, dict) and "name" in i for i in [*base, *patch])
    ):
        out_list = [copy.deepcopy(i) for i in base]
        index = {i["name"]: n for n, i in enumerate(out_list)}
        for item in patch:
            if item["name"] in index:
                out_list[index[item["name"]]] = merge(out_list[index[item["name"]]], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {})
    pod = spec.get("template", {}).get("spec", spec.get("jobTemplate", {}).get("spec", {}))
    return [*pod.get("containers", []), *pod.get("initContainers", [])]


def render(directory: Path) -> list[dict[str, Any]]:
    """All objects of the kustomization in `directory`, rendered."""
    kfile = directory / "kustomization.yaml"
    k = yaml.safe_load(kfile.read_text())
    unknown = set(k) - _KNOWN
    if unknown:
        raise ValueError(f"{kfile}: unsupported kustomize fields {sorted(unknown)}")
    objects: list[dict[str, Any]] = []
    for res in k.get("resources", []):
        path = (directory / res).resolve()
        objects += render(path) if path.is_dir() else load_docs(path)
    generators = k.get("configMapGenerator", [])
    if generators and not k.get("generatorOptions", {}).get("disableNameSuffixHash"):
        raise ValueError(f"{kfile}: name suffix hashes are not supported by this renderer")
    for gen in generators:
        data = {}
        for f in gen.get("files", []):
            data[Path(f).name] = (directory / f).read_text()
        for lit in gen.get("literals", []):
            name, _, value = lit.partition("=")
            data[name] = value
        meta = {
            "name": gen["name"],
            **({"namespace": gen["namespace"]} if "namespace" in gen else {}),
        }
        behavior = gen.get("behavior", "create")
        existing = [
            o for o in objects if _key(o) == ("ConfigMap", meta["name"], meta.get("namespace", ""))
        ]
        if behavior == "create":
            if existing:
                raise ValueError(f"{kfile}: ConfigMap {meta['name']} exists; use behavior replace")
            objects.append(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
            )
        elif behavior in ("replace", "merge") and existing:
            [found] = existing
            found["data"] = data if behavior == "replace" else {**found.get("data", {}), **data}
        else:
            raise ValueError(
                f"{kfile}: generator {meta['name']}: behavior {behavior} needs one to change"
            )
    for label_set in k.get("labels", []):
        for obj in objects:
            obj.setdefault("metadata", {}).setdefault("labels", {}).update(label_set["pairs"])
    by_key = {_key(o): o for o in objects}
    for patch in k.get("patches", []):
        if set(patch) != {"path"}:
            raise ValueError(f"{kfile}: only `path` patches are supported, got {patch}")
        for doc in load_docs(directory / patch["path"]):
            key = _key(doc)
            if key not in by_key:
                raise ValueError(f"{kfile}: patch {patch['path']} targets missing {key}")
            merged = merge(by_key[key], doc)
            by_key[key].clear()
            by_key[key].update(merged)
    for obj in objects:
        for c in _containers(obj):
            for img in k.get("images", []):
                name, _, tag = c["image"].partition(":")
                if name == img["name"]:
                    c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}"
    for rep in k.get("replicas", []):
        matches = [
            o
            for o in objects
            if o["metadata"]["name"] == rep["name"] and "replicas" in o.get("spec", {})
        ]
        if not matches:
            raise ValueError(f"{kfile}: replicas for missing {rep['name']}")
        for o in matches:
            o["spec"]["replicas"] = rep["count"]
    return objects
