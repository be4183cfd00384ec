"""The prompt: hand a task to the team (pick an agent or a flow, then start it)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer


def hand_to_team_text(task: str, input_text: str | None = None) -> str:
    extra = f"\n\nMore context from the user:\n{input_text}" if input_text else ""
    return (
        "Hand this task to the Nexus team of agents.\n\n"
        f"Task: {task}{extra}\n\n"
        "1. Call list_agents and list_flows to see who can do it.\n"
        "2. Choose ONE: a flow if one fits the whole task (several steps, reviews), else the"
        " agent whose description fits best.\n"
        "3. Start it: start_flow(flow=..., input=...) or start_run(agent=..., input=...), with"
        " the task written out as clear instructions in `input`.\n"
        "4. Tell the user what you started and its id; with follow_run you can watch a run"
        " to its end, and list_approvals shows approvals it waits on."
    )


def register_prompts(server: MCPServer) -> None:
    @server.prompt(
        name="hand_to_team",
        description="Hand a task to the team: choose an agent or a flow and start it.",
    )
    def hand_to_team(task: str, input: str | None = None) -> str:
        return hand_to_team_text(task, input)
