"""``python -m nexus_cli.devstack.offline_model``: serve the offline model."""

from .server import main

main()
