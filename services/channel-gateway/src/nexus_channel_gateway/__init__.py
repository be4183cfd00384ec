"""The Nexus channel gateway: chat and webhooks in, run progress and approvals out."""
