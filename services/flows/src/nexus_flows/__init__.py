"""Nexus flows: the flow engine. Flow-run state is a projection of NEXUS_FLOWS; after each
applied batch a pure `decide` says which events are missing, and they are published with
deterministic message ids (docs/flows.md)."""
