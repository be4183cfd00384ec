"""Nexus spend: usage rolled up from NEXUS_RUNS, budgets and their reservations (docs/spend.md)."""
