"""`nexus agents show` lists an agent's MCP servers (pure summary)."""

from __future__ import annotations

from nexus_cli.commands.agents import mcp_summary


def test_no_servers_no_lines() -> None:
    assert mcp_summary({"id": "a"}) == []


def test_each_server_its_tools_approvals_and_secret_names() -> None:
    lines = mcp_summary(
        {
            "mcp_servers": [
                {
                    "name": "github",
                    "command": "npx",
                    "args": ["-y", "server-github"],
                    "env": {"GITHUB_TOKEN": "gh-token"},
                    "tools": ["search", "create"],
                    "auto_approve": ["search"],
                },
                {"name": "docs", "transport": "http", "url": "https://d/mcp", "tools": ["*"]},
            ]
        }
    )
    assert lines == [
        "# MCP servers: 2",
        "#   github: stdio npx -y server-github",
        "#     tools: search, create",
        "#     auto-approved: search",
        "#     secrets: gh-token",
        "#   docs: http https://d/mcp",
        "#     tools: *",
        "#     auto-approved: (none; every call asks)",
    ]
    assert all(line.startswith("#") for line in lines)  # still a YAML document
