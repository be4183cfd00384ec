"""The walk over a command's bash parse tree (tree-sitter): every simple command, its words
(quoting removed), redirections and substitutions, and the paths it touches; programs with
their own rules (nexus_runner.guard.programs) are handed to those."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from nexus_runner.guard import syntax, table
from nexus_runner.guard.syntax import Node

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
_MAX_LENGTH = 32_768  # longer commands are not parsed: the walk is recursive
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
    node: Node | None = None


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
    def visit(self, node: Node) -> None:
        kind = node.type
        if kind == "command":
            self.simple(node)
        elif kind == "pipeline":
            self.pipeline(node.named_children)
        elif kind == "redirected_statement":
            self.redirected(node)
        elif kind in ("variable_assignment", "variable_assignments"):
            self.assignments(node)
        elif kind in ("declaration_command", "unset_command"):
            self.declaration(node)
        elif kind == "for_statement":
            self.loop(node)
        elif kind == "function_definition":
            self.flag("destructive", "defines a shell function (what it runs is hidden)")
        elif kind == "test_command":
            self.test(node)
        elif syntax.arithmetic(node) and kind in ("compound_statement", "c_style_for_statement"):
            self.flag("destructive", "uses arithmetic, which evaluates variables as code")
        elif kind in syntax.UNJUDGED:
            form = syntax.UNJUDGED[kind]
            self.flag("destructive", f"uses {form}, which the guard does not judge")
        elif kind != "comment":
            for child in node.named_children:
                self.visit(child)

    def test(self, node: Node) -> None:
        """`[ … ]` is the program `[` on its words; `[[ … ]]` evaluates arithmetic operands of
        -eq and the like, as `(( ))` does: not judged."""
        if node.children and node.children[0].type == "[":
            words = [Word("[", dynamic=False, node=node.children[0])]
            words += [self.word(w) for w in syntax.operands(node)]
            self.merge(self.substitutions(node))
            self.program(words)
        else:
            self.flag("destructive", "uses a test expression ([[ … ]]), which is not judged")

    def loop(self, node: Node) -> None:
        variable = node.child_by_field_name("variable")
        values = [self.word(v) for v in node.children_by_field_name("value")]
        plain = all(not v.dynamic and self.outside(v) is None for v in values)
        if variable is not None and values and plain:
            self.safe_vars[syntax.text(variable)] = values[0].text
        for value in node.children_by_field_name("value"):
            self.merge(self.substitutions(value))
        body = node.child_by_field_name("body")
        if body is not None:
            self.visit(body)

    def pipeline(self, parts: list[Node], *, after_pipe: bool = False) -> None:
        for i, part in enumerate(parts):
            command = syntax.command_of(part)
            if command is not None and (i > 0 or after_pipe):
                words = self.words(command)
                if words and self._reads_code_from_stdin([w.text for w in words]):
                    self.flag("destructive", "pipes text into a shell or interpreter")
            self.visit(part)

    def redirected(self, node: Node) -> None:
        for child in node.named_children:
            if child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                self.redirect(child)
            else:
                self.visit(child)

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
    def words(self, command: Node) -> list[Word]:
        out: list[Word] = []
        for child in command.named_children:
            if child.type == "command_name":
                out.extend(self.word(c) for c in child.named_children)
            elif child.type not in syntax.NOT_WORDS:
                out.append(self.word(child))
        return out

    def word(self, node: Node) -> Word:
        text, dynamic = syntax.word(node, self.safe_vars)
        return Word(text, dynamic, node)

    def substitutions(self, node: Node) -> Walker:
        """The commands inside `node`'s substitutions, judged on their own."""
        inner = Walker(self.workspace, self.depth + 1, rules=self.rules)
        if syntax.arithmetic(node):
            inner.flag("destructive", "uses arithmetic, which evaluates variables as code")
        for found in syntax.substitutions(node):
            for child in found.named_children:
                inner.visit(child)
        return inner

    # -- one simple command -------------------------------------------------------------
    def simple(self, node: Node) -> None:
        for child in node.named_children:
            if child.type == "variable_assignment":
                self.assignments(child)
            elif child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                self.redirect(child)
            elif child.type not in syntax.NOT_WORDS:
                self.merge(self.substitutions(child))
        words = self.words(node)
        if words:
            self.program(words)

    def assignments(self, node: Node) -> None:
        for assignment in syntax.assignments(node):
            name = syntax.text(assignment).split("=", 1)[0].rstrip("+")
            if name in table.DANGEROUS_ASSIGNMENTS:
                self.flag("destructive", f"sets {name}, which changes what programs run")
            self.merge(self.substitutions(assignment))

    def declaration(self, node: Node) -> None:
        """`export A=b`, `declare -x …`, `unset A`: a command whose words are its parts."""
        words = [Word(syntax.text(node.children[0]), dynamic=False, node=node.children[0])]
        for child in node.named_children:
            if child.type == "variable_assignment":
                self.assignments(child)
                name = child.child_by_field_name("name")
                value = child.child_by_field_name("value")
                text, dynamic = syntax.text(name) if name is not None else "", False
                if value is not None:
                    value_text, dynamic = syntax.word(value, self.safe_vars)
                    text += "=" + value_text
                words.append(Word(text, dynamic, child))
            else:
                words.append(self.word(child))
                self.merge(self.substitutions(child))
        self.program(words)

    def merge(self, inner: Walker) -> None:
        self.git_subs |= inner.git_subs
        self.programs.extend(inner.programs)
        self.level = max(self.level, inner.level)
        for reason in inner.reasons:
            if reason not in self.reasons:
                self.reasons.append(reason)

    def redirect(self, node: Node) -> None:
        if node.type != "file_redirect":  # a here-document or here-string: text on stdin
            self.merge(self.substitutions(node))
            for child in node.named_children:
                # What follows the marker on its line is held here: `cat <<EOF > f | sh`.
                if child.type == "pipeline":
                    self.pipeline(child.named_children, after_pipe=True)
                elif child.type in ("file_redirect", "herestring_redirect"):
                    self.redirect(child)
                elif child.type not in syntax.HEREDOC_PARTS:
                    self.visit(child)
            return
        operator = next((syntax.text(c) for c in node.children if not c.is_named), "")
        target = node.child_by_field_name("destination")
        duplicates = ">&" in operator or "<&" in operator
        fd = syntax.text(target) if target is not None else ""
        if target is None or (duplicates and (fd == "-" or fd.rstrip("-").isdigit())):
            return  # `2>&1`, `>&-`: descriptors, not files
        word = self.word(target)
        self.merge(self.substitutions(target))
        writes = ">" in operator
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
    tree = syntax.parse(command)
    if isinstance(tree, str):
        return Classification("destructive", (f"cannot be parsed ({tree})",))
    walker = Walker(workspace, depth, cwd_depth=cwd_depth, rules=rules)
    try:
        walker.visit(tree)
    except RecursionError:
        return Classification("destructive", ("nested too deeply to judge",))
    except Exception as exc:  # noqa: BLE001 - a tree this walker does not know: ask
        return Classification("destructive", (f"cannot be judged ({type(exc).__name__})",))
    return walker.result()
