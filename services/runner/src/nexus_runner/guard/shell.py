"""Classify a shell command on a real parse tree (bashlex), not on its text.

Every simple command — in lists (`&&`, `;`, `||`), pipelines, loops, command and process
substitutions, and `bash -c` strings — is judged on its words with quoting already removed
(`gi''t` is `git`); the command's class is the most severe of its parts. Whatever bashlex
cannot parse is destructive: the guard fails closed.
"""

from __future__ import annotations

import functools
import os
import posixpath
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
_FORCE = frozenset(["--force", "-f", "--force-with-lease", "--mirror", "--delete", "-d", "--prune"])
_SHARED_BRANCHES = frozenset(["main", "master", "trunk", "develop", "HEAD@{u}", "@{u}"])


@dataclass(frozen=True)
class Classification:
    command_class: CommandClass
    reasons: tuple[str, ...] = ()
    git: frozenset[str] = frozenset()  # git sub-commands run anywhere in the command

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


@dataclass
class _Word:
    text: str
    dynamic: bool  # holds an expansion whose value is only known when the shell runs
    node: Any = None


@dataclass
class _Walker:
    workspace: Path | None
    depth: int = 0
    level: int = 0
    reasons: list[str] = field(default_factory=list)
    cwd_depth: int = 0  # directories below the start after `cd`; < 0: left the workspace
    escaped: bool = False
    # Loop variables whose every value is a plain word inside the workspace, and one value.
    safe_vars: dict[str, str] = field(default_factory=dict)
    git_subs: set[str] = field(default_factory=set)

    # -- results ------------------------------------------------------------------------
    def flag(self, cls: CommandClass, reason: str) -> None:
        self.level = max(self.level, SEVERITY[cls])
        if SEVERITY[cls] >= SEVERITY["outside_workspace"] and reason not in self.reasons:
            self.reasons.append(reason)

    def result(self) -> Classification:
        return Classification(_ORDER[self.level], tuple(self.reasons), frozenset(self.git_subs))

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
            if values and all(not v.dynamic and self._outside(v) is None for v in values):
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
    def words(self, command: Any) -> list[_Word]:
        return [self.word(p) for p in command.parts if p.kind == "word"]

    def word(self, node: Any) -> _Word:
        dynamic = False
        text = node.word
        for part in getattr(node, "parts", None) or []:
            if part.kind == "parameter" and part.value in self.safe_vars:
                value = self.safe_vars[part.value]
                text = text.replace("${" + part.value + "}", value).replace("$" + part.value, value)
            elif part.kind in ("parameter", "commandsubstitution", "processsubstitution"):
                dynamic = True
        return _Word(text, dynamic or "$" in text or "`" in text, node)

    def substitutions(self, node: Any) -> _Walker:
        """The commands inside `node`'s substitutions, judged on their own."""
        inner = _Walker(self.workspace, self.depth + 1)
        for part in getattr(node, "parts", None) or []:
            if part.kind in ("commandsubstitution", "processsubstitution"):
                inner.visit(part.command)
        return inner

    # -- one simple command -------------------------------------------------------------
    def simple(self, node: Any) -> None:
        words: list[_Word] = []
        for part in node.parts:
            if part.kind == "assignment":
                name = part.word.split("=", 1)[0]
                if name in table.DANGEROUS_ASSIGNMENTS:
                    self.flag("destructive", f"sets {name}, which changes what programs run")
                self._merge(self.substitutions(part))
            elif part.kind == "word":
                words.append(self.word(part))
                self._merge(self.substitutions(part))
            elif part.kind == "redirect":
                self.redirect(part)
        if words:
            self.program(words)

    def _merge(self, inner: _Walker) -> None:
        self.git_subs |= inner.git_subs
        self.level = max(self.level, inner.level)
        for reason in inner.reasons:
            if reason not in self.reasons:
                self.reasons.append(reason)

    def redirect(self, node: Any) -> None:
        target = node.output
        if isinstance(target, int) or node.type in ("<<", "<<<"):
            return
        word = self.word(target)
        self._merge(self.substitutions(target))
        writes = ">" in node.type
        if writes and word.text not in table.HARMLESS_PATHS:
            self.flag("workspace_write", "redirects output to a file")
        self.path(word, write=writes, verb="redirects to" if writes else "reads")

    def program(self, words: list[_Word]) -> None:
        head = words[0]
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
        handler = _HANDLERS.get(name)
        if handler is not None:
            handler(self, name, args)
        elif name in table.WRAPPERS:
            self.wrapper(name, args)
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
        self, args: list[_Word], *, write: bool, skip_first: bool = False, dest_last: bool = False
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
                self.path(_Word(value, option.dynamic), write=write, verb="uses")

    def path(self, word: _Word, *, write: bool, verb: str) -> None:
        text = word.text
        if text.startswith(table.NETWORK_PATHS):
            self.flag("network", f"{verb} {text} (a network connection)")
        if text in table.HARMLESS_PATHS or "://" in text or text.startswith("/dev/fd/"):
            return
        where = self._outside(word)
        if where is None:
            parts = posixpath.normpath(text).split("/")
            if write and ".git" in parts:
                self.flag("destructive", f"{verb} .git internals ({text})")
            return
        if write and where == "sensitive":
            self.flag("destructive", f"{verb} a protected place ({text})")
        else:
            self.flag("outside_workspace", f"{verb} {text} ({where})")

    def _outside(self, word: _Word) -> str | None:  # noqa: PLR0911 - one answer per kind
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

    # -- programs with their own rules --------------------------------------------------
    def wrapper(self, name: str, args: list[_Word]) -> None:
        rest = list(args)
        while rest and (rest[0].text.startswith("-") or (name == "timeout" and _number(rest[0]))):
            option = rest.pop(0)
            takes_value = option.text in ("-I", "-n", "-P", "-d", "-L", "-s", "-a")
            if name == "xargs" and takes_value and rest:
                rest.pop(0)
        if not rest:
            return
        if name == "xargs":  # xargs appends operands read from stdin: unknown values
            rest = [*rest, _Word("$XARGS", True)]
        self.program(rest)

    def cd(self, name: str, args: list[_Word]) -> None:
        targets = [a for a in args if not a.text.startswith("-")]
        if not targets:
            self.escaped = True
            self.flag("outside_workspace", f"{name} to the home directory")
            return
        word = targets[0]
        where = self._outside(word)
        if where is not None:
            self.escaped = True
            self.flag("outside_workspace", f"{name} {word.text} ({where})")
            return
        for part in posixpath.normpath(word.text).split("/"):
            self.cwd_depth += -1 if part == ".." else (0 if part in ("", ".") else 1)

    def env(self, name: str, args: list[_Word]) -> None:
        rest = [a for a in args if not a.text.startswith("-")]
        while rest and "=" in rest[0].text:
            var = rest.pop(0).text.split("=", 1)[0]
            if var in table.DANGEROUS_ASSIGNMENTS:
                self.flag("destructive", f"sets {var}, which changes what programs run")
        if rest:
            self.program(rest)

    def rm(self, name: str, args: list[_Word]) -> None:
        flags = "".join(
            a.text for a in args if a.text.startswith("-") and not a.text.startswith("--")
        )
        recursive = "r" in flags.lower() or any(a.text == "--recursive" for a in args)
        targets = [a for a in args if not a.text.startswith("-")]
        self.flag("workspace_write", name)
        for word in targets:
            where = self._outside(word)
            whole = posixpath.normpath(word.text) in (".", "*", "..") or word.text in ("./*", "/*")
            if where is not None or whole:
                what = "recursively " if recursive else ""
                self.flag("destructive", f"deletes {what}outside the workspace ({word.text})")
            else:
                self.path(word, write=True, verb="deletes")

    def sed(self, name: str, args: list[_Word]) -> None:
        in_place = any(
            a.text.startswith(("-i", "--in-place"))
            or (a.text.startswith("-") and "i" in a.text[1:] and not a.text.startswith("--"))
            for a in args
        )
        scripted = any(a.text in ("-e", "-f", "--expression", "--file") for a in args)
        operands = [a for a in args if not a.text.startswith("-")]
        if not scripted and operands:
            operands = operands[1:]
        if not in_place:
            for word in operands:
                self.path(word, write=False, verb="reads")
            return
        self.flag("workspace_write", "sed -i")
        for word in operands:
            if self._outside(word) is not None:
                self.flag("destructive", f"edits in place outside the workspace ({word.text})")
            else:
                self.path(word, write=True, verb="edits")

    def awk(self, name: str, args: list[_Word]) -> None:
        operands = [a for a in args if not a.text.startswith("-")]
        program = operands[0].text if operands else ""
        if "system(" in program or '| "' in program or "|getline" in program.replace(" ", ""):
            self.flag("destructive", "awk runs a command")
        if ">" in program.replace(">=", ""):
            self.flag("workspace_write", "awk writes a file")
        self.operands(args, write=False, skip_first=True)

    def find(self, name: str, args: list[_Word]) -> None:
        texts = [a.text for a in args]
        roots: list[_Word] = []
        for word in args:
            if word.text.startswith(("-", "(", "!")):
                break
            roots.append(word)
        for root in roots:
            self.path(root, write=False, verb="searches")
        if "-delete" in texts:
            self.flag("destructive", "find -delete deletes every match")
        for i, text in enumerate(texts):
            if text in ("-exec", "-execdir", "-ok", "-okdir"):
                end = next(
                    (j for j in range(i + 1, len(texts)) if texts[j] in (";", "\\;", "+")),
                    len(texts),
                )
                inner = [
                    roots[0]
                    if w.text == "{}" and roots
                    else _Word("." if w.text == "{}" else w.text, w.dynamic)
                    for w in args[i + 1 : end]
                ]
                if inner and posixpath.basename(inner[0].text) in (
                    "rm",
                    "shred",
                    "unlink",
                    "rmdir",
                ):
                    self.flag("destructive", "find -exec deletes every match")
                elif inner:
                    self.program(inner)

    def chmod(self, name: str, args: list[_Word]) -> None:
        if any(
            a.text in ("-R", "--recursive") or (a.text.startswith("-") and "R" in a.text)
            for a in args
        ):
            self.flag("destructive", f"{name} -R changes a whole tree")
            return
        self.flag("workspace_write", name)
        operands = [a for a in args if not a.text.startswith("-")]
        for word in operands[1:]:
            self.path(word, write=True, verb=f"{name}s")

    def git(self, name: str, args: list[_Word]) -> None:
        rest = self.git_options(list(args))
        if rest:
            self.git_sub(rest)

    def git_options(self, rest: list[_Word]) -> list[_Word]:
        while rest and rest[0].text.startswith("-"):
            option = rest.pop(0)
            if option.text in ("-C", "-c", "--git-dir", "--work-tree") and rest:
                value = rest.pop(0)
                if option.text == "-c":
                    self._git_config_key(value.text, "git -c")
                else:
                    self.path(value, write=False, verb=f"git {option.text}")
            elif option.text.startswith(("--git-dir=", "--work-tree=")):
                self.flag("outside_workspace", f"git {option.text}")
        return rest

    def git_sub(self, rest: list[_Word]) -> None:
        sub, args = rest[0].text, rest[1:]
        self.git_subs.add(sub)
        texts = [a.text for a in args]
        for word in args:
            if not word.text.startswith("-") and (
                word.dynamic or word.text.startswith(("/", "~")) or ".." in word.text.split("/")
            ):
                self.path(word, write=sub not in table.GIT_READ, verb=f"git {sub}")
        if sub in table.GIT_READ and not (
            sub == "reflog" and texts[:1] in (["expire"], ["delete"])
        ):
            return
        if sub in table.GIT_NETWORK:
            self.flag("network", f"git {sub} reaches a remote")
        if sub in table.GIT_DESTRUCTIVE:
            self.flag("destructive", f"git {sub} rewrites history")
        special = _GIT_SPECIAL.get(sub)
        if special is not None:
            special(self, texts)
        elif sub not in table.GIT_NETWORK:
            self.flag("workspace_write", f"git {sub}")

    def git_push(self, texts: list[str]) -> None:
        if any(t in _FORCE or t.startswith(("--force", "+")) or ":+" in t for t in texts):
            self.flag("destructive", "git push rewrites or deletes a remote branch")

    def git_reflog(self, texts: list[str]) -> None:
        self.flag("destructive", "git reflog expire/delete drops history")

    def git_reset(self, texts: list[str]) -> None:
        refs = [t for t in texts if not t.startswith("-")]
        if "--hard" in texts and any("/" in r or r in _SHARED_BRANCHES for r in refs):
            self.flag("destructive", "git reset --hard to a shared branch")
        self.flag("workspace_write", "git reset")

    def git_remote(self, texts: list[str]) -> None:
        if texts and texts[0] not in ("-v", "show", "get-url", "--verbose"):
            self.flag("destructive", "git remote changes where git pushes")

    def git_branch(self, texts: list[str]) -> None:
        changes = any(t in ("-D", "-d", "-m", "-M", "--delete") for t in texts)
        if changes or [t for t in texts if not t.startswith("-")]:
            self.flag("workspace_write", "git branch")

    def git_gc(self, texts: list[str]) -> None:
        if any(t.startswith("--prune") for t in texts):
            self.flag("destructive", "git gc --prune drops unreachable history")
        self.flag("workspace_write", "git gc")

    def git_config(self, texts: list[str]) -> None:
        reading = any(t in ("--get", "--get-all", "--get-regexp", "--list", "-l") for t in texts)
        if reading:
            return
        if any(t in ("--global", "--system", "--file", "-f") for t in texts):
            self.flag("destructive", "git config outside the repository")
        keys = [t for t in texts if not t.startswith("-")]
        if keys:
            self._git_config_key(keys[0], "git config")
        self.flag("workspace_write", "git config")

    def _git_config_key(self, key: str, verb: str) -> None:
        lowered = key.split("=", 1)[0].lower()
        if any(lowered.startswith(k) or k in lowered for k in table.GIT_CONFIG_DANGEROUS):
            self.flag("destructive", f"{verb} {lowered} can redirect pushes or run programs")

    def package(self, name: str, args: list[_Word]) -> None:
        subs = [a.text for a in args if not a.text.startswith("-")]
        if name in ("uv", "poetry") and subs[:1] == ["run"]:
            index = next(i for i, a in enumerate(args) if a.text == "run")
            inner = [a for a in args[index + 1 :] if not a.text.startswith("--")]
            if inner:
                self.program(inner)
            return
        if subs and subs[0] in table.PACKAGE_NETWORK.get(name, frozenset()):
            self.flag("network", f"{name} {subs[0]} downloads packages")
            return
        if name in ("apt", "apt-get", "brew", "gem"):
            self.flag("destructive", f"{name} changes the machine")
            return
        self.flag("workspace_write", name)
        self.operands(args[1:], write=False)

    def interpreter(self, name: str, args: list[_Word]) -> None:
        texts = [a.text for a in args]
        flag = table.INLINE_CODE.get(name)
        if flag is not None and flag in texts:
            # All of it, not only the code: `perl -MIO::Socket -e …` loads the module by flag.
            self.inline(name, " ".join(texts))
            return
        if name in ("python", "python3") and "-m" in texts:
            index = texts.index("-m")
            module = texts[index + 1] if index + 1 < len(texts) else ""
            if module in ("pip", "uv"):
                self.package(module, args[index + 2 :])
                return
            if module in ("http.server", "smtpd", "ftplib", "SimpleHTTPServer"):
                self.flag("network", f"python -m {module} opens the network")
                return
        self.flag("workspace_write", name)
        for word in args:
            inner = self.substitutions(word.node) if word.node is not None else None
            if inner is not None and inner.level >= SEVERITY["network"]:
                self.flag("destructive", f"{name} runs code fetched by a substitution")
        self.operands(args, write=False)

    def inline(self, name: str, code: str) -> None:
        lowered = code.lower()
        for marker in table.INLINE_NETWORK:
            if marker in lowered:
                self.flag("network", f"{name} inline code uses {marker}")
        for marker in table.INLINE_DESTRUCTIVE:
            if marker in lowered:
                self.flag("destructive", f"{name} inline code uses {marker}")
        for marker in ("/etc", "/proc", "/root", "/home", "~", "..", "environ", "expanduser"):
            if marker in lowered:
                self.flag("outside_workspace", f"{name} inline code mentions {marker}")
        self.flag("workspace_write", f"{name} inline code")

    def shell(self, name: str, args: list[_Word]) -> None:
        texts = [a.text for a in args]
        if "-c" in texts or any(
            t.startswith("-") and "c" in t and not t.startswith("--") for t in texts
        ):
            index = next(i for i, t in enumerate(texts) if t.startswith("-") and "c" in t)
            code = args[index + 1] if index + 1 < len(args) else None
            if code is None:
                return
            if code.dynamic:
                inner = self.substitutions(code.node) if code.node is not None else None
                if inner is not None and inner.level >= SEVERITY["network"]:
                    self.flag("destructive", f"{name} -c runs downloaded code")
                else:
                    self.flag("destructive", f"{name} -c runs a command chosen when it runs")
                return
            found = _classify(code.text, self.workspace, self.depth + 1, self.cwd_depth)
            self.flag(found.command_class, f"{name} -c")
            for reason in found.reasons:
                self.flag(found.command_class, reason)
            self.git_subs |= found.git
            return
        self.interpreter(name, args)


def _home_sensitive(rest: str) -> bool:
    first = rest.lstrip("/").split("/", 1)[0]
    return first in table.SENSITIVE_HOME or first == ""


def _number(word: _Word) -> bool:
    return word.text.rstrip("smhd").replace(".", "", 1).isdigit()


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
_GIT_SPECIAL: dict[str, Any] = {
    "push": _Walker.git_push,
    "reflog": _Walker.git_reflog,
    "reset": _Walker.git_reset,
    "remote": _Walker.git_remote,
    "config": _Walker.git_config,
    "branch": _Walker.git_branch,
    "gc": _Walker.git_gc,
}
_HANDLERS: dict[str, Any] = {
    "cd": _Walker.cd,
    "pushd": _Walker.cd,
    "env": _Walker.env,
    "rm": _Walker.rm,
    "rmdir": _Walker.rm,
    "unlink": _Walker.rm,
    "sed": _Walker.sed,
    "awk": _Walker.awk,
    "gawk": _Walker.awk,
    "find": _Walker.find,
    "chmod": _Walker.chmod,
    "chown": _Walker.chmod,
    "chgrp": _Walker.chmod,
    "git": _Walker.git,
    **dict.fromkeys(table.PACKAGE_NETWORK, _Walker.package),
    **dict.fromkeys(table.INLINE_CODE, _Walker.interpreter),
    **dict.fromkeys(table.SHELLS, _Walker.shell),
}


def _classify(  # noqa: PLR0911 - each way of failing closed says why
    command: str, workspace: Path | None, depth: int, cwd_depth: int = 0
) -> Classification:
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
    walker = _Walker(workspace, depth, cwd_depth=cwd_depth)
    try:
        for tree in trees:
            walker.visit(tree)
    except RecursionError:
        return Classification("destructive", ("nested too deeply to judge",))
    except Exception as exc:  # noqa: BLE001 - a tree this walker does not know: ask
        return Classification("destructive", (f"cannot be judged ({type(exc).__name__})",))
    return walker.result()


# Programs judged by their arguments (the docs table lists them).
HANDLED: Final = frozenset(_HANDLERS)


@functools.lru_cache(maxsize=256)  # decide asks twice per call (dial, push/commit refusal)
def classify(command: str, workspace: Path | None = None) -> Classification:
    """The class of `command` run in `workspace` (absolute paths under it are inside)."""
    return _classify(command, workspace, 0)
