"""`nexus dev`: the embedded stack (nats-server, PostgreSQL, core, scheduler) under a supervisor."""
