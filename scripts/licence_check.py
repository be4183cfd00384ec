"""Fail on a copyleft licence in the runtime dependency closure of the workspace's packages,
read from the installed distributions' own metadata (`python -m scripts.licence_check`).

What counts as copyleft, and why:
- GPL, AGPL, SSPL, EUPL, OSL, CPAL, CC-BY-SA…: strong copyleft; distributing a service image
  that holds one binds the whole image to its terms.
- LGPL fails too unless reviewed: importing it unmodified from Python is allowed, but every
  distribution of an image that holds it owes its licence, its source and the means to
  replace it, obligations the project's rule (permissive licences only) does not take on
  silently. One that was weighed and kept is in REVIEWED_LGPL with its reason.
- MPL-2.0 passes: its copyleft is per file and reaches only changes to the MPL files
  themselves; the images ship those packages unmodified from PyPI (certifi is MPL-2.0).
A licence expression with alternatives (`MIT OR GPL-2.0`) passes if one alternative does.
Dev tools (pytest, ruff, mypy…) are not in the closure: they ship in no image.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata

from nexus_events.runtime.services import SERVICES
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

# The packages the project builds and ships, each as its images install it (no extras): the
# contract, every service of the service table, the CLI.
WORKSPACE = ("nexus-events", *(spec.package for spec in SERVICES), "nexus-cli")
# Packages whose metadata is missing or misleading, each checked by hand: name -> why it passes.
ALLOWED: dict[str, str] = {
    "cel-python": "0.5 states no licence in its metadata; the LICENSE file its wheel ships "
    "(dist-info/licenses/LICENSE) is the Apache-2.0 text, as its repository says",
}
# LGPL packages weighed and kept: name -> why, and what would remove it.
REVIEWED_LGPL: dict[str, str] = {
    "python-telegram-bot": "LGPL-3.0-only; the channel gateway imports it unmodified, as a "
    "separate wheel an image's user can replace, which the LGPL allows; the gateway image "
    "carries its licence files (dist-info/licenses). Replacing it with direct Bot API calls "
    "over httpx would make the gateway permissive-only",
}

_COPYLEFT = re.compile(
    r"\b(A?GPL|LGPL|SSPL|EUPL|OSL|CPAL|CC-BY-SA|GNU (Affero |Lesser |Library )?General Public"
    r"|Affero|Server Side Public|European Union Public|Open Software License)",
    re.IGNORECASE,
)
_ALTERNATIVES = re.compile(r"\s+OR\s+|\s*/\s*", re.IGNORECASE)

Find = Callable[[str], metadata.Distribution | None]


@dataclass(frozen=True)
class Finding:
    package: str
    licence: str
    problem: str  # "copyleft" or "unknown"

    def __str__(self) -> str:
        return f"{self.package}: {self.problem} licence ({self.licence or 'no licence metadata'})"


def installed(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def licences(dist: metadata.Distribution) -> list[str]:
    """What the distribution says its licence is: the PEP 639 expression if it has one, else
    the License field (when it is a name, not a whole licence text) and the classifiers."""
    meta = dist.metadata
    expression = _field(meta, "License-Expression")
    if expression:
        return [expression.strip()]
    found = [
        c.split("::")[-1].strip()
        for c in meta.get_all("Classifier") or []
        if c.startswith("License ::") and c != "License :: OSI Approved"
    ]
    # Some put the whole licence text in the field: a licence text opens with its title.
    field = _field(meta, "License").strip().split("\n", 1)[0].strip()
    if field and field.upper() != "UNKNOWN" and len(field) < 100:
        found.append(field)
    return found


def _field(meta: metadata.PackageMetadata, name: str) -> str:
    values = meta.get_all(name) or []
    return str(values[0]) if values else ""


def is_copyleft(licence: str) -> bool:
    """True unless one of the licence's alternatives is free of copyleft."""
    alternatives = _ALTERNATIVES.split(licence.strip("() "))
    return all(_COPYLEFT.search(alternative) for alternative in alternatives)


def closure(roots: Iterable[str], find: Find = installed) -> dict[str, metadata.Distribution]:
    """Every installed distribution the roots need at run time (markers judged for this
    interpreter; extras only where a requirement inside the closure asks for them)."""
    found: dict[str, metadata.Distribution] = {}
    pending: list[tuple[str, frozenset[str]]] = [(r, frozenset()) for r in roots]
    seen: set[tuple[str, frozenset[str]]] = set()
    while pending:
        name, extras = pending.pop()
        key = (canonicalize_name(name), extras)
        if key in seen:
            continue
        seen.add(key)
        dist = find(name)
        if dist is None:
            continue  # not installed here (a marker for another platform): nothing ships
        found[key[0]] = dist
        for line in dist.requires or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            wanted = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in wanted):
                pending.append((req.name, frozenset(req.extras)))
    return found


def check(roots: Iterable[str] = WORKSPACE, find: Find = installed) -> list[Finding]:
    """The closure's packages whose licence is copyleft or unknown, ALLOWED ones aside."""
    findings: list[Finding] = []
    for name, dist in sorted(closure(roots, find).items()):
        if name in ALLOWED:
            continue
        stated = licences(dist)
        if not stated:
            findings.append(Finding(name, "", "unknown"))
        for licence in stated:
            lgpl_reviewed = name in REVIEWED_LGPL and "LGPL" in licence.upper()
            if is_copyleft(licence) and not lgpl_reviewed:
                findings.append(Finding(name, licence, "copyleft"))
    return findings


def main(find: Find = installed) -> int:
    findings = check(WORKSPACE, find)
    for finding in findings:
        print(finding, file=sys.stderr)
    packages = len(closure(WORKSPACE, find))
    print(f"{packages} runtime packages, {len(findings)} with a copyleft or unknown licence")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
