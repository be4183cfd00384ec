"""What the tools' sandbox shows and withholds: the interpreters on a PATH and their
prefixes, the root-only files of /etc, the ``.env``-like files of a workspace."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from nexus_events.runtime.program_paths import install_prefix, shebang_interpreter

from nexus_runner.containment import is_secret_file

ETC = Path("/etc")


def executable_paths(executable: Path) -> list[Path]:
    """What must be readable for `executable` to run: its directory, its resolved prefix, a
    venv's base interpreter prefix, and its script interpreter's (one level)."""
    found = [executable.parent]
    for candidate in (executable, shebang_interpreter(executable)):
        if candidate is None:
            continue
        real = candidate.resolve()
        found += [candidate.parent, install_prefix(real)]
        venv = candidate.parent.parent
        cfg = venv / "pyvenv.cfg"
        if cfg.is_file():
            found.append(venv)
            for line in cfg.read_text(errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    found.append(install_prefix(Path(value.strip()).resolve() / "python"))
    return found


def interpreter_paths(path_var: str, extra_prefixes: Iterable[str] = ()) -> list[Path]:
    """The directories on `path_var` outside the OS runtime, and the prefixes of the
    interpreters they hold (symlinks resolved, venvs and their base Python), plus
    `extra_prefixes` (the runner's own interpreter)."""
    found: list[Path] = []
    for entry in path_var.split(":"):
        directory = Path(entry)
        if not entry or not directory.is_absolute() or not directory.is_dir():
            continue
        if directory.resolve().is_relative_to("/usr"):
            continue  # the OS runtime is bound whole
        found.append(directory)
        if (directory.parent / "pyvenv.cfg").is_file():
            found += executable_paths(directory / "python")
        try:
            links = [directory / n for n in sorted(os.listdir(directory))]
        except OSError:
            continue
        for exe in links:
            if exe.is_symlink():
                found += executable_paths(exe)
    found += [Path(p) for p in extra_prefixes if p]
    return found


def etc_withheld(root: Path = ETC) -> tuple[Path, ...]:
    """Files and directories under /etc that others may not read (``/etc/shadow``,
    ``/etc/ssl/private``): withheld from the tools (a directory is not searched further)."""
    withheld: list[Path] = []
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(dirpath) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            closed_dir = stat.S_ISDIR(st.st_mode) and (st.st_mode & 0o005) != 0o005
            closed_file = stat.S_ISREG(st.st_mode) and not st.st_mode & 0o004
            if closed_dir or closed_file:
                withheld.append(path)
        dirs[:] = [d for d in dirs if Path(dirpath) / d not in withheld]
    return tuple(withheld)


def secret_files(workspace: Path) -> list[Path]:
    """The `.env`-like files of `workspace` (``.git`` skipped), a symlinked one as the file
    inside the workspace it points at (one outside is not in the sandbox anyway)."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(workspace):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            if not is_secret_file(name):
                continue
            path = Path(dirpath) / name
            if path.is_symlink():
                try:
                    path = path.resolve(strict=True)
                except (OSError, RuntimeError):
                    continue
                if not path.is_relative_to(workspace):
                    continue
            if path.is_file() and path not in found:
                found.append(path)
    return found
