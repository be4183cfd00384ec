"""`nexus dev`: the embedded stack (nats-server, PostgreSQL, core, memory, scheduler)."""
