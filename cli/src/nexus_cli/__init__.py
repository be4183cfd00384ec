"""The `nexus` operator CLI."""
