"""The run's tools with its secret values kept in: `ContainedRegistry`."""

from __future__ import annotations

import dataclasses
import json

from nexus_runner.safety import SECRET_REFUSAL
from nexus_runner.tools.registry import Decision, ToolOutcome, ToolRegistry

# Tools whose arguments stay in the workspace (a secret written to a file is caught when it
# would be committed) or in the run's own record (redacted there). Never `remember` or
# `delegate`: those check their own input too (`tools.builtin`), whatever this set says.
KEEPS_SECRETS_INSIDE = frozenset({"write_file", "edit_file", "finish", "git_commit"})
REFUSAL = SECRET_REFUSAL


class ContainedRegistry(ToolRegistry):
    """A `ToolRegistry` whose calls cannot carry a secret value of the run out, and whose
    output reaches the model with every such value redacted (`nexus_runner.containment`).

    A call of any other tool (a command, an MCP call, memory, another agent) whose arguments
    hold a tracked value, in any of its shapes, or a piece of one, is not run: a value sent
    in halves over two calls is refused at the first.
    """

    async def execute(self, decision: Decision) -> ToolOutcome:
        secrets = self.ctx.secrets
        if decision.tool not in KEEPS_SECRETS_INSIDE and secrets.holds_piece(
            json.dumps(decision.raw, ensure_ascii=False)
        ):
            return ToolOutcome(False, REFUSAL)
        outcome = await super().execute(decision)
        return dataclasses.replace(outcome, output=secrets.redact_values(outcome.output))
