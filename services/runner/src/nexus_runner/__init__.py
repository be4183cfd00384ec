"""Nexus runner: the in-pod agent loop."""
