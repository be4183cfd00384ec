"""Where an installed program lives on the host: its installation prefix, the interpreter its
``#!`` line names, the files a command line names by absolute path. Shared by the scheduler's
confinement and the runner's tools' sandbox, which bind them read-only."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def install_prefix(executable: Path) -> Path:
    """The installation prefix of a resolved executable: ``<prefix>/bin/x`` -> ``<prefix>``
    when it has a ``lib`` beside ``bin``; else the executable's directory."""
    parent = executable.parent
    if parent.name == "bin" and (parent.parent / "lib").is_dir():
        return parent.parent
    return parent


def shebang_interpreter(script: Path) -> Path | None:
    """The interpreter a script names on its first line (``#!/x/python``), if absolute."""
    try:
        with script.resolve().open("rb") as fh:
            head = fh.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    return Path(words[0].decode(errors="replace")) if words and words[0].startswith(b"/") else None


def named_files(args: Iterable[str]) -> list[Path]:
    """The arguments of a command line that name an existing file by absolute path
    (``python /opt/srv.py``): the operator's definition names them, as it names the program."""
    return [Path(a) for a in args if a.startswith("/") and Path(a).is_file()]
