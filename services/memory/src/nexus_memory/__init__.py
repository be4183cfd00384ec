"""Nexus memory: long-term memory with hybrid search, extraction, consolidation, secret guard."""
