"""What every long-running service shares: settings, start-up and drain, health, leadership,
periodic tasks, logs, telemetry, metrics and the service table."""
