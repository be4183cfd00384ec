"""Agent-defined tools in JavaScript, run in QuickJS on wasmtime with capability tokens."""

from nexus_runner.sandbox.host import HostEnv, StateCap, Violation
from nexus_runner.sandbox.pool import RunSandbox, SandboxResult

__all__ = ["HostEnv", "RunSandbox", "SandboxResult", "StateCap", "Violation"]
