"""The walk over bashlex's parse tree: every simple command, its words (quoting removed),
redirections and substitutions, and the paths it touches; programs with their own rules
(nexus_runner.guard.programs) are handed to those."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import bashlex  # type: ignore[import-untyped]

from nexus_runner.guard import table

CommandClass = Literal[
    "read_only", "workspace_write", "outside_workspace", "network", "destructive"
]
SEVERITY: Final[dict[str, int]] = {
    "read_only": 0,
    "workspace_write": 1,
    "outside_workspace": 2,
    "network": 3,
    "destructive": 4,
}
_ORDER: Final[tuple[CommandClass, ...]] = (
    "read_only",
    "workspace_write",
    "outside_workspace",
    "network",
    "destructive",
)
_MAX_LENGTH = 32_768  # longer commands are not parsed: bashlex is recursive and slow on them
_MAX_DEPTH = 6  # nested `bash -c` / substitutions deeper than this are refused to the parser
_STANDARD_BIN = ("/usr/bin/", "/bin/", "/usr/local/bin/", "/usr/sbin/", "/sbin/")


@dataclass(frozen=True)
class Classification:
    command_class: CommandClass
    reasons: tuple[str, ...] = ()
    git: frozenset[str] = frozenset()  # git sub-commands run anywhere in the command
    programs: tuple[str, ...] = ()  # the programs it runs, first appearance first

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


@dataclass
class Word:
    text: str
    dynamic: bool  # holds an expansion whose value is only known when the shell runs
    node: Any = None


@dataclass
class Walker:
    workspace: Path | None
    depth: int = 0
    level: int = 0
    reasons: list[str] = field(default_factory=list)
    cwd_depth: int = 0  # directories below the start after `cd`; < 0: left the workspace
    escaped: bool = False
    rules: Mapping[str, Rule] = field(default_factory=dict)  # programs with their own rules
    # Loop variables whose every value is a plain word inside the workspace, and one value.
    safe_vars: dict[str, str] = field(default_factory=dict)
    git_subs: set[str] = field(default_factory=set)
    programs: list[str] = field(default_factory=list)

    # -- results ------------------------------------------------------------------------
    def flag(self, cls: CommandClass, reason: str) -> None:
        self.level = max(self.level, SEVERITY[cls])
        if SEVERITY[cls] >= SEVERITY["outside_workspace"] and reason not in self.reasons:
            self.reasons.append(reason)

    def result(self) -> Classification:
        return Classification(
            _ORDER[self.level],
            tuple(self.reasons),
            frozenset(self.git_subs),
            tuple(dict.fromkeys(self.programs)),
        )

    # -- tree walk ----------------------------------------------------------------------
    def visit(self, node: Any) -> None:
        kind = getattr(node, "kind", "")
        if kind == "command":
            self.simple(node)
        elif kind == "pipeline":
            self.pipeline(node)
        elif kind in ("commandsubstitution", "processsubstitution"):
            self.visit(node.command)
        elif kind == "for":
            self.loop(node)
        elif kind == "function":
            self.flag("destructive", "defines a shell function (what it runs is hidden)")
        else:
            for child in self._children(node):
                self.visit(child)

    def loop(self, node: Any) -> None:
        words = [p for p in node.parts if p.kind == "word"]
        if words:
            values = [self.word(w) for w in words[1:]]
            if values and all(not v.dynamic and self.outside(v) is None for v in values):
                self.safe_vars[words[0].word] = values[0].text
        for child in self._children(node):
            self.visit(child)

    @staticmethod
    def _children(node: Any) -> list[Any]:
        out: list[Any] = []
        for attr in ("parts", "list"):
            out.extend(getattr(node, attr, None) or [])
        for attr in ("command", "output"):
            child = getattr(node, attr, None)
            if child is not None and not isinstance(child, int):
                out.append(child)
        return out

    def pipeline(self, node: Any) -> None:
        commands = [p for p in node.parts if getattr(p, "kind", "") == "command"]
        for i, command in enumerate(commands):
            words = self.words(command)
            if i > 0 and words and self._reads_code_from_stdin([w.text for w in words]):
                self.flag("destructive", "pipes text into a shell or interpreter")
        for part in node.parts:
            self.visit(part)

    @staticmethod
    def _reads_code_from_stdin(words: list[str]) -> bool:
        words = _unwrap(words)
        if not words:
            return False
        prog = posixpath.basename(words[0])
        if prog in ("sudo", "doas"):
            return True
        if prog in table.SHELLS or prog in table.INLINE_CODE:
            operands = [w for w in words[1:] if not w.startswith("-") or w == "-"]
            flags = [w for w in words[1:] if w.startswith("-")]
            return not operands or operands[0] == "-" or ("-s" in flags and "-c" not in flags)
        return False

    # -- words --------------------------------------------------------------------------
    def words(self, command: Any) -> list[Word]:
        return [self.word(p) for p in command.parts if p.kind == "word"]

    def word(self, node: Any) -> Word:
        dynamic = False
        text = node.word
        for part in getattr(node, "parts", None) or []:
            if part.kind == "parameter" and part.value in self.safe_vars:
                value = self.safe_vars[part.value]
                text = text.replace("${" + part.value + "}", value).replace("$" + part.value, value)
            elif part.kind in ("parameter", "commandsubstitution", "processsubstitution"):
                dynamic = True
        return Word(text, dynamic or "$" in text or "`" in text, node)

    def substitutions(self, node: Any) -> Walker:
        """The commands inside `node`'s substitutions, judged on their own."""
        inner = Walker(self.workspace, self.depth + 1, rules=self.rules)
        for part in getattr(node, "parts", None) or []:
            if part.kind in ("commandsubstitution", "processsubstitution"):
                inner.visit(part.command)
        return inner

    # -- one simple command -------------------------------------------------------------
    def simple(self, node: Any) -> None:
        words: list[Word] = []
        for part in node.parts:
            if part.kind == "assignment":
                name = part.word.split("=", 1)[0]
                if name in table.DANGEROUS_ASSIGNMENTS:
                    self.flag("destructive", f"sets {name}, which changes what programs run")
                self.merge(self.substitutions(part))
            elif part.kind == "word":
                words.append(self.word(part))
                self.merge(self.substitutions(part))
            elif part.kind == "redirect":
                self.redirect(part)
        if words:
            self.program(words)

    def merge(self, inner: Walker) -> None:
        self.git_subs |= inner.git_subs
        self.programs.extend(inner.programs)
        self.level = max(self.level, inner.level)
        for reason in inner.reasons:
            if reason not in self.reasons:
                self.reasons.append(reason)

    def redirect(self, node: Any) -> None:
        target = node.output
        if isinstance(target, int) or node.type in ("<<", "<<<"):
            return
        word = self.word(target)
        self.merge(self.substitutions(target))
        writes = ">" in node.type
        if writes and word.text not in table.HARMLESS_PATHS:
            self.flag("workspace_write", "redirects output to a file")
        self.path(word, write=writes, verb="redirects to" if writes else "reads")

    def program(self, words: list[Word]) -> None:
        head = words[0]
        standard = head.text.startswith(_STANDARD_BIN)
        self.programs.append(posixpath.basename(head.text) if standard else head.text)
        if head.dynamic:
            self.flag("destructive", f"runs a command chosen when the shell runs ({head.text})")
            return
        name = head.text
        if "/" in name:
            if name.startswith(_STANDARD_BIN):
                name = posixpath.basename(name)
            else:
                self.path(head, write=False, verb="runs")
                self.flag("workspace_write", "runs a program")
                self.operands(words[1:], write=False)
                return
        args = words[1:]
        rule = self.rules.get(name)
        if rule is not None:
            rule(self, name, args)
        elif name in table.DESTRUCTIVE or name.split(".")[0] in table.DESTRUCTIVE:
            self.flag("destructive", f"{name} acts on the machine, not the workspace")
        elif name in table.NETWORK:
            self.flag("network", f"{name} reaches another host")
        elif name in table.TEXT_ONLY:
            return
        elif name in table.READ_ONLY:
            self.operands(args, write=False, skip_first=name in table.PATTERN_FIRST)
        else:
            if name not in table.WORKSPACE_WRITE:
                self.flag("workspace_write", f"{name} is not in the table")
            self.flag("workspace_write", name)
            self.operands(args, write=name in _WRITES_ALL, dest_last=name in _DEST_LAST)

    # -- operands and paths -------------------------------------------------------------
    def operands(
        self, args: list[Word], *, write: bool, skip_first: bool = False, dest_last: bool = False
    ) -> None:
        operands = [a for a in args if not a.text.startswith("-") or a.text == "-"]
        options = [a for a in args if a.text.startswith("--") and "=" in a.text]
        if skip_first and operands:
            operands = operands[1:]
        for i, word in enumerate(operands):
            is_write = write or (dest_last and i == len(operands) - 1 and len(operands) > 1)
            self.path(word, write=is_write, verb="writes" if is_write else "reads")
        for option in options:
            value = option.text.split("=", 1)[1]
            if value.startswith(("/", "~", "..", "$")):
                self.path(Word(value, option.dynamic), write=write, verb="uses")

    def path(self, word: Word, *, write: bool, verb: str) -> None:
        text = word.text
        if text.startswith(table.NETWORK_PATHS):
            self.flag("network", f"{verb} {text} (a network connection)")
        if text in table.HARMLESS_PATHS or "://" in text or text.startswith("/dev/fd/"):
            return
        where = self.outside(word)
        if where is None:
            parts = posixpath.normpath(text).split("/")
            if write and ".git" in parts:
                self.flag("destructive", f"{verb} .git internals ({text})")
            return
        if write and where == "sensitive":
            self.flag("destructive", f"{verb} a protected place ({text})")
        else:
            self.flag("outside_workspace", f"{verb} {text} ({where})")

    def outside(self, word: Word) -> str | None:  # noqa: PLR0911 - one answer per kind
        """Why `word` as a path is not inside the workspace, or None if it is."""
        text = word.text
        if word.dynamic:
            home = text.lstrip("\"'").startswith(("$HOME", "${HOME}", "~"))
            return (
                "sensitive"
                if home and _home_sensitive(text.split("/", 1)[-1])
                else ("a path from a variable")
            )
        if text.startswith("~"):
            rest = text.split("/", 1)[1] if "/" in text else ""
            return "sensitive" if not rest or _home_sensitive(rest) else "the home directory"
        if text.startswith("/"):
            if self.workspace is not None and not self.escaped:
                root = os.path.normpath(self.workspace)
                if os.path.normpath(text) == root or os.path.normpath(text).startswith(root + "/"):
                    return None
            if text.rstrip("/") == "" or any(
                text == r or text.startswith(r + "/") for r in table.SENSITIVE_ROOTS
            ):
                return "sensitive"
            return "an absolute path"
        if self.escaped:
            return "after cd out of the workspace"
        norm = posixpath.normpath(text)
        depth = self.cwd_depth
        for part in norm.split("/"):
            depth += -1 if part == ".." else (0 if part in ("", ".") else 1)
            if depth < 0:
                return "above the workspace"
        return None

    def nested(self, command: str) -> Classification:
        """A command inside this one (`bash -c '…'`), from where this one stands."""
        return walk(command, self.workspace, self.depth + 1, self.rules, self.cwd_depth)


def _home_sensitive(rest: str) -> bool:
    first = rest.lstrip("/").split("/", 1)[0]
    return first in table.SENSITIVE_HOME or first == ""


def _unwrap(words: list[str]) -> list[str]:
    while words and (posixpath.basename(words[0]) in table.WRAPPERS or words[0] == "env"):
        words = words[1:]
        while words and (words[0].startswith("-") or words[0][:1].isdigit() or "=" in words[0]):
            words = words[1:]
    return words


# cp/mv/ln/install write their last operand; these write every operand.
_WRITES_ALL = frozenset(
    [
        *("touch", "mkdir", "rmdir", "unlink", "tee", "truncate", "patch", "tar", "unzip"),
        *("zip", "gzip", "gunzip", "bzip2", "xz", "split"),
    ]
)
_DEST_LAST = frozenset(["cp", "mv", "install", "ln", "rsync"])

Rule = Callable[[Walker, str, list[Word]], None]


def walk(  # noqa: PLR0911 - each way of failing closed says why
    command: str,
    workspace: Path | None,
    depth: int,
    rules: Mapping[str, Rule],
    cwd_depth: int = 0,
) -> Classification:
    """Parse `command` and walk its trees; whatever cannot be parsed or walked is destructive."""
    if depth > _MAX_DEPTH:
        return Classification("destructive", ("nested too deeply to judge",))
    if len(command) > _MAX_LENGTH:
        return Classification("destructive", (f"longer than {_MAX_LENGTH} characters",))
    if not command.strip():
        return Classification("read_only")
    try:
        trees = bashlex.parse(command)
    except Exception as exc:  # noqa: BLE001 - any parser failure means: cannot judge, ask
        return Classification("destructive", (f"cannot be parsed ({type(exc).__name__})",))
    walker = Walker(workspace, depth, cwd_depth=cwd_depth, rules=rules)
    try:
        for tree in trees:
            walker.visit(tree)
    except RecursionError:
        return Classification("destructive", ("nested too deeply to judge",))
    except Exception as exc:  # noqa: BLE001 - a tree this walker does not know: ask
        return Classification("destructive", (f"cannot be judged ({type(exc).__name__})",))
    return walker.result()
