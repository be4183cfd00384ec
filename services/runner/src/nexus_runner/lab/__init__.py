"""The runner's side of the lab (docs/lab.md): a replay served from its source run's
recording, and a fork that starts from its source's transcript and workspace at a turn."""
