"""Git hosting providers: open a pull request for the run's branch (GitHub REST first)."""

from __future__ import annotations

import re
from typing import Protocol

import httpx

from nexus_runner.errors import RunnerError

_GITHUB_REPO = re.compile(r"github\.com[/:](?P<owner>[^/]+)/(?P<repo>[^/]+?)(?:\.git)?/?$")


class GitProvider(Protocol):
    async def open_pull_request(
        self, repo_url: str, head: str, base: str, title: str, body: str
    ) -> str:
        """Open (or find the open) pull request of `head` into `base`; return its URL."""
        ...


class GitHubProvider:
    """GitHub REST v3 via httpx; idempotent: an existing open PR for the branch is reused."""

    def __init__(self, token: str, api_url: str = "https://api.github.com") -> None:
        self.token = token
        self.api_url = api_url.rstrip("/")

    async def open_pull_request(
        self, repo_url: str, head: str, base: str, title: str, body: str
    ) -> str:
        match = _GITHUB_REPO.search(repo_url)
        if match is None:
            raise RunnerError(f"not a GitHub repository URL: {repo_url}")
        owner, repo = match["owner"], match["repo"]
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        async with httpx.AsyncClient(base_url=self.api_url, headers=headers, timeout=30) as http:
            pulls = f"/repos/{owner}/{repo}/pulls"
            existing = await http.get(pulls, params={"head": f"{owner}:{head}", "state": "open"})
            if existing.status_code == 200 and existing.json():
                return str(existing.json()[0]["html_url"])
            resp = await http.post(
                pulls, json={"title": title, "head": head, "base": base, "body": body}
            )
            if resp.status_code >= 400:
                raise RunnerError(
                    f"GitHub refused the pull request: {resp.status_code} {resp.text}"
                )
            return str(resp.json()["html_url"])
