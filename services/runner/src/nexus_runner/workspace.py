"""Path confinement: every path a tool touches resolves (symlinks included) inside the workspace."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from nexus_runner.errors import PathEscape


class Workspace:
    """The run's working tree. `resolve` is the only way tools turn a path into a file."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def resolve(self, path: str) -> Path:
        """The real path of `path` (relative to the root), or raise `PathEscape`.

        Absolute paths and ``..`` segments are refused outright; then the resolved path
        (following symlinks, also of parts that do not exist yet) must stay under the root,
        and must not be inside ``.git`` (the repository's internals are not the agent's).
        """
        if not path or path.strip() == "":
            return self.root
        pure = PurePosixPath(path)
        if pure.is_absolute() or path.startswith("~"):
            raise PathEscape(f"absolute paths are not allowed: {path!r} (use a relative path)")
        if ".." in pure.parts:
            raise PathEscape(f"'..' is not allowed in paths: {path!r}")
        resolved = (self.root / pure).resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise PathEscape(f"{path!r} resolves outside the workspace")
        rel = resolved.relative_to(self.root)
        if rel.parts and rel.parts[0] == ".git":
            raise PathEscape(f"{path!r} is inside .git; use the git tools instead")
        return resolved

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() or "."
