"""Git hosting providers: open a pull request for the run's branch (GitHub REST first)."""

from __future__ import annotations

import re
from typing import Any, Protocol

import httpx

from nexus_runner.errors import RunnerError
from nexus_runner.safety import redact, truncate

# owner/name from https://host/owner/name(.git), ssh://git@host/owner/name, git@host:owner/name.
_REPO_URL = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*://[^/]+/|[^@/\s]+@[^:/\s]+:)(?P<owner>[^/\s]+)/(?P<repo>[^/\s]+?)"
    r"(?:\.git)?/?$"
)


class GitProvider(Protocol):
    async def open_pull_request(
        self, repo_url: str, head: str, base: str, title: str, body: str
    ) -> str:
        """Open (or find the open) pull request of `head` into `base`; return its URL."""
        ...


def parse_repository(repo_url: str) -> tuple[str, str]:
    """``(owner, name)`` of a hosted repository URL (https, ssh or scp-like)."""
    match = _REPO_URL.match(repo_url.strip())
    if match is None:
        raise RunnerError(f"cannot tell owner/name of the repository {repo_url!r}")
    return match["owner"], match["repo"]


class GitHubProvider:
    """GitHub REST v3 via httpx. Idempotent: an open pull request of the same head is reused,
    whether the list call finds it or the create call answers 422 "already exists".

    The token is only ever sent in the Authorization header; error messages are built from
    the status and GitHub's ``message`` (redacted), never from the request.
    """

    def __init__(
        self,
        token: str,
        api_url: str = "https://api.github.com",
        *,
        repository: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._token = token
        self.api_url = api_url.rstrip("/")
        self.repository = repository
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"GitHubProvider(api_url={self.api_url!r})"

    def _owner_repo(self, repo_url: str) -> tuple[str, str]:
        if self.repository:
            owner, _, name = self.repository.partition("/")
            if not owner or not name:
                raise RunnerError(f"github repository must be owner/name, not {self.repository!r}")
            return owner, name
        return parse_repository(repo_url)

    async def open_pull_request(
        self, repo_url: str, head: str, base: str, title: str, body: str
    ) -> str:
        owner, repo = self._owner_repo(repo_url)
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        pulls = f"/repos/{owner}/{repo}/pulls"
        try:
            async with httpx.AsyncClient(
                base_url=self.api_url, headers=headers, timeout=self.timeout
            ) as http:
                found = await self._find_open(http, pulls, owner, head)
                if found is not None:
                    return found
                resp = await http.post(
                    pulls, json={"title": title, "head": head, "base": base, "body": body}
                )
                if resp.status_code == 422 and "already exists" in resp.text:
                    # Opened meanwhile (or the list lagged): GitHub refuses a duplicate.
                    found = await self._find_open(http, pulls, owner, head)
                    if found is not None:
                        return found
                if resp.status_code != 201:
                    raise RunnerError(f"GitHub refused the pull request: {_describe(resp)}")
                return str(resp.json()["html_url"])
        except httpx.HTTPError as exc:
            raise RunnerError(f"GitHub unreachable: {type(exc).__name__}") from exc

    async def _find_open(
        self, http: httpx.AsyncClient, pulls: str, owner: str, head: str
    ) -> str | None:
        resp = await http.get(pulls, params={"head": f"{owner}:{head}", "state": "open"})
        if resp.status_code != 200:
            raise RunnerError(f"GitHub refused to list pull requests: {_describe(resp)}")
        items: Any = resp.json()
        if isinstance(items, list) and items:
            return str(items[0]["html_url"])
        return None


def _describe(resp: httpx.Response) -> str:
    try:
        payload = resp.json()
        message = str(payload.get("message", "")) if isinstance(payload, dict) else ""
        errors = payload.get("errors") if isinstance(payload, dict) else None
        if errors:
            message += " " + "; ".join(
                str(e.get("message") or e.get("code") or e) if isinstance(e, dict) else str(e)
                for e in errors
            )
    except ValueError:
        message = resp.text
    return f"{resp.status_code} {truncate(redact(message.strip()), 300)[0]}"
