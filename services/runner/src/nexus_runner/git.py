"""The git CLI, asynchronously: clone, branch, status, diff, commit, push.

None of the runner's git commands runs a program the workspace's repository config names
(the agent's shell can edit that config): hooks, the fsmonitor, signing, filters, textconv
and external diff drivers are switched off on every command line, replace refs are ignored,
and global config is not read.
"""

from __future__ import annotations

import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nexus_runner import commit_scan
from nexus_runner.errors import ToolError
from nexus_runner.process import ProcessResult, run_process, scrubbed_env
from nexus_runner.safety import SecretRegistry

# Seconds for one git command (a clone of a big repository takes longest).
GIT_TIMEOUT = 600.0
GIT_OUTPUT_CAP = 1_000_000
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# Settings a repository's own config (which the agent can edit) must not change for the
# runner's git: hooks and the fsmonitor would run commands, signing would run gpg, a pager or
# an automatic gc (its hook) too.
_OVERRIDES = (
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "commit.gpgSign=false",
    "tag.gpgSign=false", "core.pager=cat", "gc.auto=0", "maintenance.auto=false",
    "submodule.recurse=false",
)  # fmt: skip
# A filter driver's programs (`.gitattributes` names the driver, the repository's config
# defines it) run on add, status and checkout: blanked on the command line for every driver
# the config defines, since ``-c`` takes no wildcard (and git 2.39 has no ``--attr-source``).
# Diff drivers (textconv, command) are not blanked (an empty one is run as a command): every
# diff of the runner says ``--no-ext-diff --no-textconv`` instead.
_FILTER_KEY = re.compile(r"^filter\.(.+)\.(?:clean|smudge|process|required)$")
_PLAIN_DIFF = ("--no-color", "--no-ext-diff", "--no-textconv")
# Every git command of the runner: replace refs ignored (the check reads what a push sends),
# no global config (the run's HOME, which the agent's shell can write).
_RUNNER_ENV = {"GIT_NO_REPLACE_OBJECTS": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
# What the final push reads besides its own staging repository: nothing the agent can write.
# (Global config would be the run's HOME, which the agent's shell commands can write.)
_PUSH_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


@dataclass(frozen=True)
class Author:
    name: str
    email: str


class Git:
    """git commands in one working tree."""

    def __init__(self, root: Path, author: Author, secrets: SecretRegistry | None = None) -> None:
        self.root = root
        self.author = author
        # Commits never take a secret value of the run (message redacted, file withheld).
        self.secrets = secrets if secrets is not None else SecretRegistry()
        # Files not committed, as shown (a name holding a secret is redacted).
        self.withheld: list[str] = []
        self.empty_tree = EMPTY_TREE
        # The filters blanked for the root, with the config's bytes they were listed from
        # (the same bytes, the same drivers: the system config is the image's, not the agent's).
        self._filters: tuple[bytes, tuple[str, ...]] | None = None

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of the runner's git commands."""
        return scrubbed_env(
            {
                "GIT_AUTHOR_NAME": self.author.name,
                "GIT_AUTHOR_EMAIL": self.author.email,
                "GIT_COMMITTER_NAME": self.author.name,
                "GIT_COMMITTER_EMAIL": self.author.email,
                **_RUNNER_ENV,
                **(extra or {}),
            }
        )

    @staticmethod
    def argv(*args: str, blanked: tuple[str, ...] = ()) -> list[str]:
        """A git command line with the repository's programs switched off (`_OVERRIDES`,
        and the driver settings `blanked`)."""
        settings = (*_OVERRIDES, *blanked)
        return ["git", *(part for item in settings for part in ("-c", item)), *args]

    async def _blanked_filters(self, cwd: Path) -> tuple[str, ...]:
        """`_listed_filters` of `cwd`, listed again only when the repository's config file
        changed: the listing is a git process of its own, and was one more process for each
        of the runner's git commands (two for a checkpoint's check after each call)."""
        config = _config_bytes(cwd) if cwd == self.root else None
        if config is not None and self._filters is not None and self._filters[0] == config:
            return self._filters[1]
        blanked = await self._listed_filters(cwd)
        if config is not None and config == _config_bytes(cwd):  # the same before and after
            self._filters = (config, blanked)
        return blanked

    async def _listed_filters(self, cwd: Path) -> tuple[str, ...]:
        """``filter.<driver>.{clean,smudge,process}=`` for each filter driver the repository's
        config defines, and ``required=false`` (else git stops on the blanked filter)."""
        listed = await run_process(
            ["git", "config", "-z", "--get-regexp", r"^filter\."],
            cwd=cwd, timeout=GIT_TIMEOUT, output_cap=GIT_OUTPUT_CAP, env=self.env(),
        )  # fmt: skip
        blanked: dict[str, None] = {}
        for record in listed.output.split("\0") if listed.ok else []:
            match = _FILTER_KEY.match(record.split("\n", 1)[0])
            if match is not None:
                driver = match.group(1)
                for key in ("clean=", "smudge=", "process=", "required=false"):
                    blanked[f"filter.{driver}.{key}"] = None
        return tuple(blanked)

    async def run(
        self,
        *args: str,
        check: bool = True,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> ProcessResult:
        where = cwd or self.root
        blanked = await self._blanked_filters(where) if where.is_dir() else ()
        result = await run_process(
            self.argv(*args, blanked=blanked),
            cwd=where,
            timeout=GIT_TIMEOUT,
            output_cap=GIT_OUTPUT_CAP,
            env=self.env(env),
        )
        if check and not result.ok:
            raise ToolError(f"git {args[0]} failed: {result.output.strip()[-2000:]}")
        return result

    async def clone(
        self, url: str, ref: str | None, branch: str, remote: str = "origin"
    ) -> str | None:
        """Clone `url` into the root, check out `ref` (default branch if None), then `branch`.

        When the remote already has `branch` (an earlier attempt of the run pushed it), the
        work continues from there so a later push fast-forwards. Returns the base commit
        (`ref`'s), against which the run's changes are measured.
        """
        self.root.parent.mkdir(parents=True, exist_ok=True)
        await self.run(
            "clone", "--quiet", "--origin", remote, url, str(self.root), cwd=self.root.parent
        )
        if ref:
            await self.run("checkout", "--quiet", ref)
        base = await self.head()  # None for an empty repository
        existing = f"refs/remotes/{remote}/{branch}"
        if (await self.run("rev-parse", "--verify", "--quiet", existing, check=False)).ok:
            await self.run("checkout", "--quiet", "-B", branch, existing)
        else:
            await self.run("checkout", "--quiet", "-B", branch)
        return base

    async def head(self) -> str | None:
        result = await self.run("rev-parse", "HEAD", check=False)
        return result.output.strip() if result.ok else None

    async def status(self) -> str:
        return (await self.run("status", "--short", "--branch")).output

    async def diff(self, staged: bool = False, path: str | None = None) -> str:
        args = ["diff", *_PLAIN_DIFF] + (["--cached"] if staged else [])
        return (await self.run(*args, *(["--", path] if path else []))).output

    async def commit(self, message: str, paths: list[str] | None = None) -> str | None:
        """Stage `paths` (all changes if None) and commit; the new sha, or None if nothing to do.

        Files whose name or whole content (binary too, `commit_scan.staged_leaks`) holds a
        secret value of the run are unstaged and listed in `withheld`; the message is
        committed with secret values redacted.
        """
        await self.run("add", "--all", *(["--", *paths] if paths else []))
        leaking = await commit_scan.staged_leaks(self) if len(self.secrets) else []
        if leaking:
            head = await self.head()
            for leak in leaking:
                assert leak.path is not None  # a staged file's
                undo = ("reset", "-q") if head else ("rm", "--cached", "-q")
                await self.run(*undo, "--", f":(literal){leak.path}")
            shown = [leak.label.removeprefix("a file name: ") for leak in leaking]
            self.withheld = sorted(set(self.withheld) | set(shown))
        if (await self.run("diff", "--cached", "--quiet", check=False)).ok:
            return None
        await self.run("commit", "--quiet", "-m", self.secrets.redact_values(message))
        return await self.head()

    def withheld_note(self) -> str:
        if not self.withheld:
            return ""
        return "; not committed, they hold a secret value this run read: " + ", ".join(
            self.withheld
        )

    async def secret_leaks(self, base: str | None, branch: str | None = None) -> list[str]:
        """What of the commits since `base` (and the name `branch`) holds a secret value,
        read as a push sends it (`commit_scan.push_leaks`): paths, binary files, file names,
        commit messages; also commits made from the shell, which `commit` did not see."""
        head = await self.head()
        if head is None or not len(self.secrets):
            return []
        return await commit_scan.push_leaks(self, base, head, branch)

    async def changes_since(self, base: str | None) -> tuple[list[str], str]:
        """Files changed and the diff stat of the work tree against `base` (commits included)."""
        target = [base] if base else []
        names = (await self.run("diff", *_PLAIN_DIFF, "--name-only", *target)).output.split()
        untracked = (await self.run("ls-files", "--others", "--exclude-standard")).output.split()
        stat = (await self.run("diff", *_PLAIN_DIFF, "--stat", *target)).output.strip()
        return sorted(set(names) | set(untracked)), stat

    async def push(self, url: str, branch: str, run_id: str | None = None) -> str:
        """Push HEAD to `branch` of `url`; the sha pushed.

        Never through the workspace's repository, whose config the agent can edit
        (``remote.*.pushurl``, ``url.*.insteadOf``, ``core.sshCommand``, credential
        helpers, remotes of its own): HEAD is fetched into a new bare repository in a
        private temporary directory (created now: nothing the agent ran could prepare it),
        and pushed from there to the URL of the run's config, with global and system config
        off.

        A push the remote rejects because `branch` moved on is retried once, forced with a
        lease on what the remote holds, when the remote's tip is run `run_id`'s final commit
        ("Nexus run <id>" in its message) on top of HEAD's history: an earlier attempt of
        this run pushed it and died before its end was recorded, and this attempt, resumed
        from a checkpoint taken before that push, redid the work. Attempts only ever
        fast-forward the branch (or replace their own run's tip this way), so everything
        beyond HEAD's history up to that tip is the run's own. Anyone else's tip keeps the
        push refused.
        """
        sha = await self.head()
        if sha is None:
            raise ToolError("git push failed: nothing committed")
        ref = f"refs/heads/{branch}"
        with tempfile.TemporaryDirectory(prefix="nexus-push-") as tmp:
            staging = Path(tmp)
            await self.run("init", "--quiet", "--bare", tmp, cwd=staging, env=_PUSH_ENV)
            await self.run(
                "fetch", "--quiet", "--no-tags", str(self.root), f"+{sha}:{ref}",
                cwd=staging, env=_PUSH_ENV,
            )  # fmt: skip
            pushed = await self.run(
                "push", "--quiet", url, f"{ref}:{ref}", cwd=staging, env=_PUSH_ENV, check=False
            )
            if pushed.ok:
                return sha
            theirs = await self._own_earlier_push(staging, url, ref, sha, run_id)
            if theirs is None:
                raise ToolError(f"git push failed: {pushed.output.strip()[-2000:]}")
            await self.run(
                "push", "--quiet", f"--force-with-lease={ref}:{theirs}", url, f"{ref}:{ref}",
                cwd=staging, env=_PUSH_ENV,
            )  # fmt: skip
        return sha

    async def _own_earlier_push(
        self, staging: Path, url: str, ref: str, sha: str, run_id: str | None
    ) -> str | None:
        """The remote's `ref` when its tip is run `run_id`'s final commit on `sha`'s history."""
        if run_id is None:
            return None
        theirs_ref = "refs/nexus/theirs"
        fetched = await self.run(
            "fetch", "--quiet", "--no-tags", url, f"+{ref}:{theirs_ref}",
            cwd=staging, env=_PUSH_ENV, check=False,
        )  # fmt: skip
        if not fetched.ok:
            return None
        theirs = (await self.run("rev-parse", theirs_ref, cwd=staging, env=_PUSH_ENV)).output
        related = await self.run(
            "merge-base", sha, theirs_ref, cwd=staging, env=_PUSH_ENV, check=False
        )
        if not related.ok:
            return None  # unrelated histories: not an earlier attempt of this run
        tip = await self.run("log", "-1", "--format=%B", theirs_ref, cwd=staging, env=_PUSH_ENV)
        own = re.compile(rf"^Nexus run {re.escape(run_id)}(?:\s|\(|$)", re.MULTILINE)
        if not own.search(tip.output):
            return None
        return theirs.strip()


# Config text that makes git read other files (included ones, a worktree's own config): a
# repository whose config holds any of these is listed for every command, uncached.
_READS_OTHER_FILES = (b"include", b"worktreeconfig")


def _config_bytes(root: Path) -> bytes | None:
    """The bytes of ``<root>/.git/config``, the key of its filter listing; None (list every
    time) when `.git` is not a directory, the config not a regular file, or it reads others."""
    dot_git = root / ".git"
    try:
        if not stat.S_ISDIR(dot_git.lstat().st_mode):
            return None
        config = dot_git / "config"
        if not stat.S_ISREG(config.lstat().st_mode):
            return None
        text = config.read_bytes()
    except OSError:
        return None
    lowered = text.lower()
    if any(word in lowered for word in _READS_OTHER_FILES):
        return None
    return text
