"""Nexus console: a web window onto runs, flows, approvals and spend (docs/console.md)."""
