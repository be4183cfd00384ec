"""``python -m nexus_cli``: the `nexus` command."""

from nexus_cli.main import app

app(prog_name="nexus")
