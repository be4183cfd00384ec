"""Nexus core: agent catalog, run assembly, agent_runs and board projections, queries."""
