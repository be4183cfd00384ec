"""What the console's buttons do: each action the same code path its CLI command takes."""

# Why a read-scope viewer's action is refused (the 403 and the audit say it).
READ_ONLY = "read-only console token"
