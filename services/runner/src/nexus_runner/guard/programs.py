"""Programs judged by their arguments: `rm`, `sed -i`, `find -delete`, `chmod -R`, `git`'s
sub-commands and configuration, package managers, interpreters' inline code, `bash -c`, and
wrappers (`env`, `timeout`, `xargs`, …) whose wrapped command is what is judged."""

from __future__ import annotations

import posixpath
from collections.abc import Callable

from nexus_runner.guard import table
from nexus_runner.guard.walker import SEVERITY, Rule, Walker, Word

_FORCE = frozenset(["--force", "-f", "--force-with-lease", "--mirror", "--delete", "-d", "--prune"])
_SHARED_BRANCHES = frozenset(["main", "master", "trunk", "develop", "HEAD@{u}", "@{u}"])


def wrapper(w: Walker, name: str, args: list[Word]) -> None:
    rest = list(args)
    while rest and (rest[0].text.startswith("-") or (name == "timeout" and _number(rest[0]))):
        option = rest.pop(0)
        takes_value = option.text in ("-I", "-n", "-P", "-d", "-L", "-s", "-a")
        if name == "xargs" and takes_value and rest:
            rest.pop(0)
    if not rest:
        return
    if name == "xargs":  # xargs appends operands read from stdin: unknown values
        rest = [*rest, Word("$XARGS", True)]
    w.program(rest)


def cd(w: Walker, name: str, args: list[Word]) -> None:
    targets = [a for a in args if not a.text.startswith("-")]
    if not targets:
        w.escaped = True
        w.flag("outside_workspace", f"{name} to the home directory")
        return
    word = targets[0]
    where = w.outside(word)
    if where is not None:
        w.escaped = True
        w.flag("outside_workspace", f"{name} {word.text} ({where})")
        return
    for part in posixpath.normpath(word.text).split("/"):
        w.cwd_depth += -1 if part == ".." else (0 if part in ("", ".") else 1)


def env(w: Walker, name: str, args: list[Word]) -> None:
    rest = [a for a in args if not a.text.startswith("-")]
    while rest and "=" in rest[0].text:
        var = rest.pop(0).text.split("=", 1)[0]
        if var in table.DANGEROUS_ASSIGNMENTS:
            w.flag("destructive", f"sets {var}, which changes what programs run")
    if rest:
        w.program(rest)


def rm(w: Walker, name: str, args: list[Word]) -> None:
    flags = "".join(a.text for a in args if a.text.startswith("-") and not a.text.startswith("--"))
    recursive = "r" in flags.lower() or any(a.text == "--recursive" for a in args)
    targets = [a for a in args if not a.text.startswith("-")]
    w.flag("workspace_write", name)
    for word in targets:
        where = w.outside(word)
        whole = posixpath.normpath(word.text) in (".", "*", "..") or word.text in ("./*", "/*")
        if where is not None or whole:
            what = "recursively " if recursive else ""
            w.flag("destructive", f"deletes {what}outside the workspace ({word.text})")
        else:
            w.path(word, write=True, verb="deletes")


def sed(w: Walker, name: str, args: list[Word]) -> None:
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
            w.path(word, write=False, verb="reads")
        return
    w.flag("workspace_write", "sed -i")
    for word in operands:
        if w.outside(word) is not None:
            w.flag("destructive", f"edits in place outside the workspace ({word.text})")
        else:
            w.path(word, write=True, verb="edits")


def awk(w: Walker, name: str, args: list[Word]) -> None:
    operands = [a for a in args if not a.text.startswith("-")]
    program = operands[0].text if operands else ""
    if "system(" in program or '| "' in program or "|getline" in program.replace(" ", ""):
        w.flag("destructive", "awk runs a command")
    if ">" in program.replace(">=", ""):
        w.flag("workspace_write", "awk writes a file")
    w.operands(args, write=False, skip_first=True)


def find(w: Walker, name: str, args: list[Word]) -> None:
    texts = [a.text for a in args]
    roots: list[Word] = []
    for word in args:
        if word.text.startswith(("-", "(", "!")):
            break
        roots.append(word)
    for root in roots:
        w.path(root, write=False, verb="searches")
    if "-delete" in texts:
        w.flag("destructive", "find -delete deletes every match")
    for i, text in enumerate(texts):
        if text in ("-exec", "-execdir", "-ok", "-okdir"):
            end = next(
                (j for j in range(i + 1, len(texts)) if texts[j] in (";", "\\;", "+")),
                len(texts),
            )
            inner = [
                roots[0]
                if w.text == "{}" and roots
                else Word("." if w.text == "{}" else w.text, w.dynamic)
                for w in args[i + 1 : end]
            ]
            if inner and posixpath.basename(inner[0].text) in (
                "rm",
                "shred",
                "unlink",
                "rmdir",
            ):
                w.flag("destructive", "find -exec deletes every match")
            elif inner:
                w.program(inner)


def chmod(w: Walker, name: str, args: list[Word]) -> None:
    if any(
        a.text in ("-R", "--recursive") or (a.text.startswith("-") and "R" in a.text) for a in args
    ):
        w.flag("destructive", f"{name} -R changes a whole tree")
        return
    w.flag("workspace_write", name)
    operands = [a for a in args if not a.text.startswith("-")]
    for word in operands[1:]:
        w.path(word, write=True, verb=f"{name}s")


def git(w: Walker, name: str, args: list[Word]) -> None:
    rest = git_options(w, list(args))
    if rest:
        git_sub(w, rest)


def git_options(w: Walker, rest: list[Word]) -> list[Word]:
    while rest and rest[0].text.startswith("-"):
        option = rest.pop(0)
        if option.text in ("-C", "-c", "--git-dir", "--work-tree") and rest:
            value = rest.pop(0)
            if option.text == "-c":
                _git_config_key(w, value.text, "git -c")
            else:
                w.path(value, write=False, verb=f"git {option.text}")
        elif option.text.startswith(("--git-dir=", "--work-tree=")):
            w.flag("outside_workspace", f"git {option.text}")
    return rest


def git_sub(w: Walker, rest: list[Word]) -> None:
    sub, args = rest[0].text, rest[1:]
    w.git_subs.add(sub)
    texts = [a.text for a in args]
    for word in args:
        if not word.text.startswith("-") and (
            word.dynamic or word.text.startswith(("/", "~")) or ".." in word.text.split("/")
        ):
            w.path(word, write=sub not in table.GIT_READ, verb=f"git {sub}")
    if sub in table.GIT_READ and not (sub == "reflog" and texts[:1] in (["expire"], ["delete"])):
        return
    if sub in table.GIT_NETWORK:
        w.flag("network", f"git {sub} reaches a remote")
    if sub in table.GIT_DESTRUCTIVE:
        w.flag("destructive", f"git {sub} rewrites history")
    special = _GIT_SPECIAL.get(sub)
    if special is not None:
        special(w, texts)
    elif sub not in table.GIT_NETWORK:
        w.flag("workspace_write", f"git {sub}")


def git_push(w: Walker, texts: list[str]) -> None:
    if any(t in _FORCE or t.startswith(("--force", "+")) or ":+" in t for t in texts):
        w.flag("destructive", "git push rewrites or deletes a remote branch")


def git_reflog(w: Walker, texts: list[str]) -> None:
    w.flag("destructive", "git reflog expire/delete drops history")


def git_reset(w: Walker, texts: list[str]) -> None:
    refs = [t for t in texts if not t.startswith("-")]
    if "--hard" in texts and any("/" in r or r in _SHARED_BRANCHES for r in refs):
        w.flag("destructive", "git reset --hard to a shared branch")
    w.flag("workspace_write", "git reset")


def git_remote(w: Walker, texts: list[str]) -> None:
    if texts and texts[0] not in ("-v", "show", "get-url", "--verbose"):
        w.flag("destructive", "git remote changes where git pushes")


def git_branch(w: Walker, texts: list[str]) -> None:
    changes = any(t in ("-D", "-d", "-m", "-M", "--delete") for t in texts)
    if changes or [t for t in texts if not t.startswith("-")]:
        w.flag("workspace_write", "git branch")


def git_gc(w: Walker, texts: list[str]) -> None:
    if any(t.startswith("--prune") for t in texts):
        w.flag("destructive", "git gc --prune drops unreachable history")
    w.flag("workspace_write", "git gc")


def git_config(w: Walker, texts: list[str]) -> None:
    reading = any(t in ("--get", "--get-all", "--get-regexp", "--list", "-l") for t in texts)
    if reading:
        return
    if any(t in ("--global", "--system", "--file", "-f") for t in texts):
        w.flag("destructive", "git config outside the repository")
    keys = [t for t in texts if not t.startswith("-")]
    if keys:
        _git_config_key(w, keys[0], "git config")
    w.flag("workspace_write", "git config")


def _git_config_key(w: Walker, key: str, verb: str) -> None:
    lowered = key.split("=", 1)[0].lower()
    if any(lowered.startswith(k) or k in lowered for k in table.GIT_CONFIG_DANGEROUS):
        w.flag("destructive", f"{verb} {lowered} can redirect pushes or run programs")


def package(w: Walker, name: str, args: list[Word]) -> None:
    subs = [a.text for a in args if not a.text.startswith("-")]
    if name in ("uv", "poetry") and subs[:1] == ["run"]:
        index = next(i for i, a in enumerate(args) if a.text == "run")
        inner = [a for a in args[index + 1 :] if not a.text.startswith("--")]
        if inner:
            w.program(inner)
        return
    if subs and subs[0] in table.PACKAGE_NETWORK.get(name, frozenset()):
        w.flag("network", f"{name} {subs[0]} downloads packages")
        return
    if name in ("apt", "apt-get", "brew", "gem"):
        w.flag("destructive", f"{name} changes the machine")
        return
    w.flag("workspace_write", name)
    w.operands(args[1:], write=False)


def interpreter(w: Walker, name: str, args: list[Word]) -> None:
    texts = [a.text for a in args]
    flag = table.INLINE_CODE.get(name)
    if flag is not None and flag in texts:
        # All of it, not only the code: `perl -MIO::Socket -e …` loads the module by flag.
        inline(w, name, " ".join(texts))
        return
    if name in ("python", "python3") and "-m" in texts:
        index = texts.index("-m")
        module = texts[index + 1] if index + 1 < len(texts) else ""
        if module in ("pip", "uv"):
            package(w, module, args[index + 2 :])
            return
        if module in ("http.server", "smtpd", "ftplib", "SimpleHTTPServer"):
            w.flag("network", f"python -m {module} opens the network")
            return
    w.flag("workspace_write", name)
    for word in args:
        inner = w.substitutions(word.node) if word.node is not None else None
        if inner is not None and inner.level >= SEVERITY["network"]:
            w.flag("destructive", f"{name} runs code fetched by a substitution")
    w.operands(args, write=False)


def inline(w: Walker, name: str, code: str) -> None:
    lowered = code.lower()
    for marker in table.INLINE_NETWORK:
        if marker in lowered:
            w.flag("network", f"{name} inline code uses {marker}")
    for marker in table.INLINE_DESTRUCTIVE:
        if marker in lowered:
            w.flag("destructive", f"{name} inline code uses {marker}")
    for marker in ("/etc", "/proc", "/root", "/home", "~", "..", "environ", "expanduser"):
        if marker in lowered:
            w.flag("outside_workspace", f"{name} inline code mentions {marker}")
    w.flag("workspace_write", f"{name} inline code")


def shell(w: Walker, name: str, args: list[Word]) -> None:
    texts = [a.text for a in args]
    if "-c" in texts or any(
        t.startswith("-") and "c" in t and not t.startswith("--") for t in texts
    ):
        index = next(i for i, t in enumerate(texts) if t.startswith("-") and "c" in t)
        code = args[index + 1] if index + 1 < len(args) else None
        if code is None:
            return
        if code.dynamic:
            inner = w.substitutions(code.node) if code.node is not None else None
            if inner is not None and inner.level >= SEVERITY["network"]:
                w.flag("destructive", f"{name} -c runs downloaded code")
            else:
                w.flag("destructive", f"{name} -c runs a command chosen when it runs")
            return
        found = w.nested(code.text)
        w.flag(found.command_class, f"{name} -c")
        for reason in found.reasons:
            w.flag(found.command_class, reason)
        w.git_subs |= found.git
        w.programs.extend(found.programs)
        return
    interpreter(w, name, args)


def _number(word: Word) -> bool:
    return word.text.rstrip("smhd").replace(".", "", 1).isdigit()


_GIT_SPECIAL: dict[str, Callable[[Walker, list[str]], None]] = {
    "push": git_push,
    "reflog": git_reflog,
    "reset": git_reset,
    "remote": git_remote,
    "config": git_config,
    "branch": git_branch,
    "gc": git_gc,
}
RULES: dict[str, Rule] = {
    **dict.fromkeys(table.WRAPPERS, wrapper),
    "cd": cd,
    "pushd": cd,
    "env": env,
    "rm": rm,
    "rmdir": rm,
    "unlink": rm,
    "sed": sed,
    "awk": awk,
    "gawk": awk,
    "find": find,
    "chmod": chmod,
    "chown": chmod,
    "chgrp": chmod,
    "git": git,
    **dict.fromkeys(table.PACKAGE_NETWORK, package),
    **dict.fromkeys(table.INLINE_CODE, interpreter),
    **dict.fromkeys(table.SHELLS, shell),
}
