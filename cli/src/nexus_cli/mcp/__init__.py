"""Nexus as an MCP server (`nexus mcp serve`): tools, resources, subscriptions and a prompt over
the official `mcp` SDK, on stdio or streamable HTTP with bearer tokens (docs/mcp.md)."""
