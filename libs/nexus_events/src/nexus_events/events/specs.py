"""Specs shared by agent definitions and run configs: model, permissions, budgets, runtime, repo.

Operators write these by hand (YAML in git), so they reject unknown fields: a misspelt
``can_comit`` is an error, not a silently ignored permission.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nexus_events.contract import capabilities
from nexus_events.contract.approver_policy import parse_principals
from nexus_events.contract.subjects import validate_token


class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSpec(Spec):
    provider: str = Field("openai", description="Provider label (openai, vllm, ollama, ...).")
    name: str = Field(..., min_length=1, description="Model name sent to the chat API.")
    base_url: str | None = Field(
        None, description="OpenAI-compatible API base URL; None uses the runner's default."
    )
    temperature: float = Field(0.2, ge=0, le=2, description="Sampling temperature.")
    max_output_tokens: int = Field(4096, gt=0, description="Upper bound of tokens per reply.")
    context_tokens: int | None = Field(
        None,
        gt=0,
        description="The model's context window in tokens, the runner's budget for what it sends"
        " (docs/resume.md); None = the runner's default for a known model name, else its"
        " NEXUS_CONTEXT_DEFAULT_TOKENS.",
    )


# How much a run may do without asking (docs/guardrails.md): `off` asks for every call,
# `curated` runs reads and writes inside the workspace only, `all_but_destructive` runs all
# but destructive calls. Destructive calls ask whatever the dial.
AutoApprove = Literal["off", "curated", "all_but_destructive"]


class Permissions(Spec):
    can_commit: bool = Field(False, description="The runner may create commits.")
    can_push: bool = Field(False, description="The runner may push its branch.")
    can_open_pr: bool = Field(False, description="The runner may open a pull request.")
    can_merge: bool = Field(False, description="The runner may merge a pull request.")
    approval_required_tools: list[str] = Field(
        default_factory=list, description="Tools whose every call waits for a human approval."
    )
    network_egress: list[str] = Field(
        default_factory=list, description="Hosts the run may reach besides NATS and the LLM."
    )
    auto_approve: AutoApprove = Field(
        "all_but_destructive",
        description="Which tool calls run without a human: off (none), curated (reads and"
        " writes inside the workspace), all_but_destructive (all but destructive ones).",
    )
    approvers: list[str] | None = Field(
        None,
        description="Who may decide this agent's approvals (docs/approvals.md), e.g."
        " ['chat:slack:C0123', 'slack:U1', 'requester', 'nats:ops']; None = the deployment's"
        " default (NEXUS_APPROVERS_DEFAULT, else approver-chats and the requester).",
    )

    @field_validator("approvers")
    @classmethod
    def _approvers(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else list(parse_principals(value))


class Budgets(Spec):
    max_turns: int = Field(40, gt=0, description="Most LLM turns in one run.")
    max_tokens: int = Field(400_000, gt=0, description="Most tokens (in + out) in one run.")
    max_cost_usd: float = Field(5.0, ge=0, description="Most spend in USD in one run.")
    max_wall_seconds: int = Field(3600, gt=0, description="Most wall-clock seconds in one run.")


class ResumePolicy(Spec):
    """What the scheduler does when a run's runner dies (docs/resume.md)."""

    max_attempts: int = Field(
        2,
        ge=1,
        le=10,
        description="Attempts a run may have: a lost runner is resumed as attempt n+1 until"
        " this many have run, then the run ends lost. 1 = never resume. Attempts that ended"
        " in a sleep do not count.",
    )
    max_sleep_seconds: int = Field(
        86_400,
        ge=0,
        le=30 * 86_400,
        description="Longest one `sleep` of the agent's runs may last (docs/resume.md, Sleep);"
        " a longer or past wake time is refused to the model. 0 = the agent may not sleep.",
    )


class RuntimeSpec(Spec):
    image: str | None = Field(None, description="Runner image (Kubernetes runtime).")
    cpu: str = Field("1", description="CPU request/limit, Kubernetes quantity.")
    memory: str = Field("2Gi", description="Memory request/limit, Kubernetes quantity.")
    timeout_seconds: int | None = Field(
        None, gt=0, description="Hard deadline of the Job; defaults to budgets.max_wall_seconds."
    )


class ToolGrant(Spec):
    name: str = Field(..., min_length=1, description="Tool name, e.g. run_shell.")
    options: dict[str, Any] = Field(default_factory=dict, description="Tool-specific options.")

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        # `tools: [read_file, run_shell]` is the common way to write a grant.
        return {"name": value} if isinstance(value, str) else value


class SkillRef(Spec):
    name: str = Field(..., description="Skill name.")
    version: str | None = Field(None, description="Pinned version; None means the latest.")
    load: Literal["always", "on_demand"] = Field(
        "always",
        description="always: its content is in the system prompt; on_demand: only its name and"
        " description are, and the model reads it with the read_skill tool.",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        # `skills: [python, git@2]` pins with `@`.
        if isinstance(value, str):
            name, _, version = value.partition("@")
            return {"name": name, "version": version or None}
        return value

    @field_validator("name")
    @classmethod
    def _token(cls, value: str) -> str:
        return validate_token(value, "skill name")


class RepoSpec(Spec):
    url: str = Field(..., min_length=1, description="Git URL (https, ssh) or a local path.")
    ref: str | None = Field(None, description="Base branch, tag or commit; None = default branch.")
    branch: str | None = Field(None, description="Work branch; None = nexus/<run_id>.")

    @model_validator(mode="before")
    @classmethod
    def _from_url(cls, value: Any) -> Any:
        return {"url": value} if isinstance(value, str) else value


# MCP server names go into function tool names (`mcp_<server>__<tool>`), which OpenAI limits
# to [A-Za-z0-9_-]; a double underscore would make the split ambiguous.
_MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]|_(?=[A-Za-z0-9-])){0,31}")
# An environment variable name as POSIX shells accept it.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class McpServerSpec(Spec):
    """An MCP server whose tools the agent may use.

    The runner starts a ``stdio`` server inside the run's workspace with exactly the
    environment named here (values come from the runner's named secrets, never from the
    definition or the operator's environment) or connects to a ``http`` (streamable HTTP)
    server. Only the tools listed in ``tools`` are offered to the model; each call asks a
    human unless the tool is listed in ``auto_approve``.
    """

    name: str = Field(
        ...,
        description="Server name, used in tool names mcp_<name>__<tool>: 1-32 letters,"
        " digits, '-' and single '_'.",
    )
    transport: Literal["stdio", "http"] = Field(
        "stdio", description="stdio (a local process) or http (streamable HTTP)."
    )
    command: str | None = Field(None, description="stdio: the executable to start.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="stdio: environment variable -> name of a runner secret holding its value.",
    )
    url: str | None = Field(None, description="http: the server's streamable HTTP endpoint.")
    tools: list[str] = Field(
        ..., min_length=1, description="Tools of the server granted to the agent; '*' = all."
    )
    auto_approve: list[str] = Field(
        default_factory=list,
        description="Granted tools that run without a human's approval; '*' = all.",
    )
    startup_timeout: float | None = Field(
        None, gt=0, description="Seconds to start and list tools; None = the runner's default."
    )
    call_timeout: float | None = Field(
        None, gt=0, description="Seconds for one tool call; None = the runner's default."
    )

    @field_validator("name")
    @classmethod
    def _server_name(cls, value: str) -> str:
        if _MCP_SERVER_NAME.fullmatch(value) is None:
            raise ValueError(
                "must be 1-32 letters, digits, '-' and single '_', starting with a letter or"
                " digit and not ending with '_'"
            )
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key, secret in value.items():
            if _ENV_NAME.fullmatch(key) is None:
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if not secret.strip():
                raise ValueError(f"{key}: the name of a secret is required")
        return value

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServerSpec:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError("command is required for a stdio server")
            if self.url is not None:
                raise ValueError("url is only for an http server")
        else:
            if not self.url:
                raise ValueError("url is required for an http server")
            if self.command is not None or self.args or self.env:
                raise ValueError("command, args and env are only for a stdio server")
        return self


# Classes of a shell command as the runner's guard sees it (docs/guardrails.md).
CommandClass = Literal[
    "read_only", "workspace_write", "outside_workspace", "network", "destructive"
]
_REGEX_PREFIX = "re:"


def _check_pattern(value: str, what: str) -> str:
    """A glob, or a regular expression written ``re:<pattern>``: refused here if it does not
    compile, so a bad rule stops `agents apply`, not a run."""
    if value.startswith(_REGEX_PREFIX):
        try:
            re.compile(value[len(_REGEX_PREFIX) :])
        except re.error as exc:
            raise ValueError(f"{what}: not a valid regular expression: {exc}") from None
    return value


class HookRule(Spec):
    """One declarative policy rule: every matcher given must match; the first rule of the
    strictest decision wins (deny over ask over allow)."""

    name: str | None = Field(None, description="Rule name recorded with the decision.")
    tool: str = Field("*", min_length=1, description="Tool name glob (or re:<regex>).")
    args: dict[str, str] = Field(
        default_factory=dict,
        description="Argument name -> glob (or re:<regex>) its value must match.",
    )
    path: str | None = Field(
        None, description="Glob (or re:<regex>) on the call's path argument, workspace-relative."
    )
    command_class: list[CommandClass] = Field(
        default_factory=list, description="Shell command classes the rule applies to."
    )
    decision: Literal["allow", "ask", "deny", "redact"] = Field(
        ..., description="before: allow, ask or deny; after: deny (withhold) or redact."
    )
    redact: list[str] = Field(
        default_factory=list, description="after: regular expressions redacted from the output."
    )
    reason: str = Field("", description="Why, recorded in the event and told to the model.")

    @field_validator("tool", "path")
    @classmethod
    def _glob_or_regex(cls, value: str | None) -> str | None:
        return None if value is None else _check_pattern(value, "pattern")

    @field_validator("args")
    @classmethod
    def _arg_patterns(cls, value: dict[str, str]) -> dict[str, str]:
        for key, pattern in value.items():
            _check_pattern(pattern, f"args.{key}")
        return value

    @field_validator("redact")
    @classmethod
    def _redact_patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            _check_pattern(_REGEX_PREFIX + pattern, "redact")
        return value

    @model_validator(mode="after")
    def _redact_has_patterns(self) -> HookRule:
        if self.decision == "redact" and not self.redact:
            raise ValueError("decision redact needs redact: [patterns]")
        return self

    def label(self, index: int) -> str:
        return self.name or f"#{index + 1}"


# Sandboxed tool names go into function tool names, which OpenAI limits to [A-Za-z0-9_-]{1,64}.
_SANDBOX_TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


class SandboxLimits(Spec):
    """What one call of a sandboxed tool may use (docs/sandbox.md); each has a hard stop."""

    memory_mb: int = Field(32, ge=4, le=512, description="JavaScript heap and linear memory, MB.")
    stack_kb: int = Field(1024, ge=64, le=8192, description="JavaScript stack, KB.")
    wall_seconds: float = Field(
        5.0, gt=0, le=300, description="Wall-clock seconds of one call, host calls included."
    )
    host_calls: int = Field(10_000, ge=1, le=1_000_000, description="Host calls per call.")
    state_mutations: int = Field(
        1_000, ge=0, le=1_000_000, description="Writes to the run's key/value state per call."
    )


def _sandbox_name(value: str) -> str:
    if _SANDBOX_TOOL_NAME.fullmatch(value) is None:
        raise ValueError("must be 1-64 letters, digits, '_' and '-', starting with a letter")
    return value


def _capability_tokens(value: list[str]) -> list[str]:
    """Tokens that all parse (nexus_events.contract.capabilities fails closed), else a
    ValueError."""
    try:
        capabilities.parse_all(value)
    except capabilities.CapabilityError as exc:
        raise ValueError(str(exc)) from None
    return value


class SandboxTool(Spec):
    """A tool defined in JavaScript, run in QuickJS on WebAssembly inside the runner.

    The source defines ``async function run(args)``; what it returns is the tool's output.
    It reaches the outside only through the host object ``nexus``, and every host call is
    checked against ``capabilities`` (tokens, nexus_events.contract.capabilities): an unknown or
    malformed token refuses the whole definition.
    """

    name: str = Field(..., description="Tool name offered to the model: [A-Za-z][A-Za-z0-9_-]*.")
    description: str = Field(..., min_length=1, description="What the tool does, for the model.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the arguments (an object schema).",
    )
    source: str = Field(
        ..., min_length=1, max_length=200_000, description="JavaScript defining run(args)."
    )
    capabilities: list[str] = Field(
        default_factory=list,
        description="Capability tokens: workspace:read:<glob>, workspace:write:<glob>,"
        " events:emit:<name>, memory:read:<scope>, http:<host>, state:read:<key>,"
        " state:write:<key>.",
    )
    limits: SandboxLimits = Field(default_factory=SandboxLimits, description="Per-call limits.")

    _name = field_validator("name")(classmethod(lambda cls, v: _sandbox_name(v)))

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError("must be a JSON Schema of type object")
        return value

    _tokens = field_validator("capabilities")(classmethod(lambda cls, v: _capability_tokens(v)))

    @property
    def read_only(self) -> bool:
        """Only read tokens: plan mode may offer it."""
        return capabilities.Grants.of(self.capabilities).read_only


def unique_sandbox_tools(value: list[SandboxTool]) -> list[SandboxTool]:
    names = [t.name for t in value]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate sandboxed tool name(s): {', '.join(dupes)}")
    return value


class HookScript(Spec):
    """A policy hook written in JavaScript, run sandboxed like a sandboxed tool (docs/sandbox.md).

    The source defines ``function hook(call)`` (synchronous), called with ``{tool, args}``
    before a call or ``{tool, args, output}`` after it. Before, it returns ``{decision:
    "allow"|"ask"|"deny", reason}`` (or nothing: no opinion); after, ``{decision: "deny",
    reason}`` to withhold the output or ``{output}`` to replace it. A hook that fails or
    breaks a limit denies (fails closed). Only synchronous host calls are available to it:
    workspace.read/write, state.get/set, now.
    """

    name: str = Field(..., description="Hook name, recorded with its decision.")
    on: Literal["before_tool_call", "after_tool_call"] = Field(..., description="When it runs.")
    tool: str = Field("*", min_length=1, description="Tool name glob (or re:<regex>).")
    source: str = Field(
        ..., min_length=1, max_length=200_000, description="JavaScript defining hook(call)."
    )
    capabilities: list[str] = Field(default_factory=list, description="Capability tokens.")
    limits: SandboxLimits = Field(
        default_factory=lambda: SandboxLimits(wall_seconds=1.0), description="Per-call limits."
    )

    _name = field_validator("name")(classmethod(lambda cls, v: _sandbox_name(v)))

    @field_validator("tool")
    @classmethod
    def _glob_or_regex(cls, value: str) -> str:
        return _check_pattern(value, "tool")

    _tokens = field_validator("capabilities")(classmethod(lambda cls, v: _capability_tokens(v)))


class Hooks(Spec):
    """Policy hooks of an agent (or a skill, merged into its agents' at assembly)."""

    before_tool_call: list[HookRule] = Field(
        default_factory=list, description="Rules judging a call before it runs."
    )
    after_tool_call: list[HookRule] = Field(
        default_factory=list, description="Rules judging a call's output before it is recorded."
    )
    scripts: list[HookScript] = Field(
        default_factory=list,
        description="Hooks in JavaScript, run sandboxed after the rules (docs/sandbox.md).",
    )

    @field_validator("before_tool_call")
    @classmethod
    def _before(cls, value: list[HookRule]) -> list[HookRule]:
        for i, rule in enumerate(value):
            if rule.decision == "redact":
                raise ValueError(f"rule {rule.label(i)}: redact applies after_tool_call only")
        return value

    @field_validator("after_tool_call")
    @classmethod
    def _after(cls, value: list[HookRule]) -> list[HookRule]:
        for i, rule in enumerate(value):
            if rule.decision not in ("redact", "deny"):
                raise ValueError(f"rule {rule.label(i)}: after_tool_call decides redact or deny")
        return value

    def merged(self, other: Hooks) -> Hooks:
        return Hooks(
            before_tool_call=[*self.before_tool_call, *other.before_tool_call],
            after_tool_call=[*self.after_tool_call, *other.after_tool_call],
            scripts=[*self.scripts, *other.scripts],
        )
