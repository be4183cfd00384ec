"""plane-sync: Nexus tasks and runs mirrored to Plane; Plane webhooks in."""
