"""The agent's tools: argument models, implementations and the registry that grants them."""

from nexus_runner.tools.context import ToolContext
from nexus_runner.tools.registry import Decision, ToolOutcome, ToolRegistry, detect_test_command

__all__ = ["Decision", "ToolContext", "ToolOutcome", "ToolRegistry", "detect_test_command"]
