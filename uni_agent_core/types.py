"""Records shared across modules: trajectories, engine calls and exit reasons.

A `Trajectory` is one chain of a gateway session in token space: what the trainer learns from.
An `EngineCall` is one generation the gateway asked an engine for; the TITO invariant
(docs/architecture.md, "Trajectory") ties the two together: every call's prompt is its chain's
tokens so far, and every call's output appears verbatim as a trainable span of that chain.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class ExitReason(StrEnum):
    """How an agent episode ended (set by harnesses, or by the rollout driver for
    `test_timeout`; abnormal ones are masked from the loss)."""

    SUBMITTED = "submitted"
    FINISHED = "finished"
    MAX_TURNS = "max_turns"
    MAX_TOKENS = "max_tokens"
    TIMEOUT = "timeout"
    FORMAT_ERROR_BUDGET = "format_error_budget"
    SANDBOX_ERROR = "sandbox_error"
    HARNESS_ERROR = "harness_error"
    ENGINE_ERROR = "engine_error"
    GATEWAY_ERROR = "gateway_error"
    """The episode's gateway session could not be opened: the gateway held `max_sessions`
    already (reward 0; the driver's failure boundary, `rollout/driver.py`)."""
    TEST_TIMEOUT = "test_timeout"
    """The harness ended the episode, then the verifier's test command passed
    `reward.test_timeout_s` (reward 0). Kept in the loss: the diff may be what hangs."""


class TaskSpec(BaseModel):
    """One task: SWE-bench row fields (the `swe` environment's), its environment, and how to
    build and check it.

    `FAIL_TO_PASS`/`PASS_TO_PASS` accept the published JSON-string form as well as lists.
    The per-sample overrides (`harness`, `sandbox`, `reward`, `prompt`) are recipe sections
    (as plain mappings, validated by the consumer) that replace the run's defaults for this
    task only, so one async batch can mix harnesses, sandbox backends and rewards.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    instance_id: str
    repo: str = ""
    base_commit: str = ""
    problem_statement: str
    patch: str = ""
    """The gold patch (never shown to the agent)."""
    test_patch: str = ""
    """The hidden tests, applied only in the verifier's fresh sandbox."""
    FAIL_TO_PASS: list[str] = Field(default_factory=list)
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    version: str = ""
    source: dict[str, Any] = Field(default_factory=dict)
    """How to build the repository: an image, a local tarball, or a generator seed."""
    test_cmd: str = ""
    log_parser: str = "pytest"
    difficulty: str | None = None
    harness: dict[str, Any] | None = None
    sandbox: dict[str, Any] | None = None
    reward: dict[str, Any] | None = None
    prompt: str | None = None
    env: str = "swe"
    """The task's environment (`envs/environment.py`): how its episodes start and are scored.
    A registered name (`swe`, `shell`) or a user's `package.module:Class`; set by its source."""
    env_data: dict[str, Any] = Field(default_factory=dict)
    """What a non-SWE environment needs of the task, in its own schema (a shell task's setup
    and hidden check scripts). Never shown to the agent."""

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _decode_test_lists(cls, value: Any) -> Any:
        if isinstance(value, str):
            decoded = json.loads(value) if value.strip() else []
            if not isinstance(decoded, list):
                raise ValueError("must be a JSON list of test names")
            return decoded
        return value


class EngineCall(BaseModel):
    """One engine generation made by the gateway, in call order."""

    model_config = ConfigDict(extra="forbid")

    chain_id: int
    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float]
    policy_version: list[int]
    finish_reason: str
    superseded: bool = False
    """The output was later dropped from its chain by a rollback (the client rewrote that
    assistant turn), so it is not a trainable span any more."""


class Trajectory(BaseModel):
    """One chain of a session: prompt tokens, then response tokens with per-token masks.

    `loss_mask` is 1 exactly on tokens the engine sampled for this chain and 0 on context
    (tool results, user turns, separators, generation prompts, rolled-back rewrites); context
    tokens have logprob 0.0 and policy version -1.
    """

    model_config = ConfigDict(extra="forbid")

    session_id: str
    chain_id: int
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    policy_versions: list[int]
    finish_reason: str | None = None
    num_turns: int = 0
    exit_reason: ExitReason | None = None
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_alignment(self) -> Trajectory:
        n = len(self.response_ids)
        lengths = (len(self.loss_mask), len(self.logprobs), len(self.policy_versions))
        if lengths != (n, n, n):
            raise ValueError(
                f"misaligned trajectory: {n} response ids, mask/logprobs/versions {lengths}"
            )
        return self

    @property
    def trainable_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def version_span(self) -> tuple[int, int] | None:
        """(oldest, newest) policy version among sampled tokens, None if none were sampled."""
        versions = [v for v, m in zip(self.policy_versions, self.loss_mask, strict=True) if m]
        return (min(versions), max(versions)) if versions else None


ABNORMAL_EXITS: frozenset[ExitReason] = frozenset(
    {
        ExitReason.TIMEOUT,
        ExitReason.SANDBOX_ERROR,
        ExitReason.HARNESS_ERROR,
        ExitReason.ENGINE_ERROR,
        ExitReason.GATEWAY_ERROR,
    }
)
"""Exits caused by the infrastructure, not the policy: kept in statistics, masked from the loss
(`trainer.mask_abnormal_exits`)."""

UNFINISHED_EXITS: frozenset[ExitReason] = frozenset(
    {
        ExitReason.MAX_TURNS,
        ExitReason.MAX_TOKENS,
        ExitReason.TIMEOUT,
        ExitReason.FORMAT_ERROR_BUDGET,
    }
)
"""Exits where the harness stopped the agent before it submitted or finished (a turn, token or
wall-clock budget, or the format-error budget, ran out): what `reward.unfinished` applies to."""


class ModelCall(BaseModel):
    """One engine call of an episode as the gateway served it: an MLflow trace's model-call
    span (`tracking/traces.py`). Token ids stay in the chains; `response_start` says where the
    call's output lies in its chain's `response_ids` (a superseded call's output was cut from
    the chain and is carried in `dropped_ids`)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    chain_id: int
    continuation: str
    """`append` (extends its chain), `rollback` (rewrote the chain's latest action) or `new`
    (opened the chain)."""
    opened_by: str | None = None
    """For a `new` call: why the gateway opened a chain (`gateway/chain.py::why_new_chain`)."""
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    finish_reason: str
    replica: str | None = None
    """The engine replica that served it (a router's replica name; None for one engine)."""
    started_at: float
    """Unix time (seconds) the engine call started."""
    latency_s: float
    response_start: int
    """Index in the chain's `response_ids` where this call's output starts."""
    superseded: bool = False
    """A later request rewrote this action: the chain was rolled back under it."""
    dropped_ids: list[int] = Field(default_factory=list)
    """A superseded call's output tokens (no longer in its chain)."""
    tool_calls: list[dict[str, str]] = Field(default_factory=list)
    """The tool calls parsed from the reply: `name` and `arguments` (clipped)."""


class ToolCall(BaseModel):
    """One tool call a white-box harness ran in the sandbox (black-box harnesses run theirs
    out of sight: their calls are known only as the model's `ModelCall.tool_calls`)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: str
    """As the model wrote them (clipped)."""
    output: str = ""
    """The observation shown to the model (clipped)."""
    error: bool = False
    exit_code: int | None = None
    """The command's exit status, for tools that run one."""
    started_at: float = 0.0
    seconds: float = 0.0


class Verification(BaseModel):
    """What the verifier did with an episode's diff (the trace's verifier span)."""

    model_config = ConfigDict(extra="forbid")

    tests_run: int = 0
    passed: int = 0
    failed: int = 0
    patch_applied: bool = True
    timed_out: bool = False
    status: str = ""
    error: str | None = None
    started_at: float = 0.0
    seconds: float = 0.0


class RolloutResult(BaseModel):
    """One episode (one sample of a task's group): what it earned and its token chains."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    sample_index: int
    reward: float
    exit_reason: ExitReason
    group_id: str = ""
    """The GRPO group the episode was launched in. Advantages, the zero-variance filter and the
    step's group metrics compare episodes of one group only: two groups of one task in a step
    (an epoch wrap, a probe, a group launched ahead) stay two groups. Empty means the episode's
    own task is its group (`group_key`)."""
    harness: str = ""
    """The harness that played it: its type, or its name in a `mix` (per-harness metrics)."""
    task_env: str = ""
    """The task's environment (`swe`, `shell`, a user's): the kind of task, per-kind metrics."""
    trajectories: list[Trajectory] = Field(default_factory=list)
    """Every chain the gateway recorded for the episode (several when the harness split it)."""
    turns: int = 0
    """Model calls the harness made."""
    resolved: bool = False
    leak_flagged: bool = False
    started_version: int = 0
    """The engine's policy version when the episode started."""
    timings: dict[str, float] = Field(default_factory=dict)
    """Seconds spent per phase: `sandbox`, `agent`, `verify`."""
    error: str | None = None
    task_level: str | None = None
    """The task's difficulty level, when its source has one (viewer filters)."""
    started_at: float = 0.0
    """Unix time (seconds) the episode started."""
    calls: list[ModelCall] = Field(default_factory=list)
    """Every engine call, in order (what the trace shows; the tokens are in `trajectories`)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """The tool calls a white-box harness ran, in order."""
    verification: Verification | None = None
    """The verifier's run (None when the episode never reached it)."""
    diff: str = ""
    """The agent's working-tree diff (clipped), what the verifier scored."""

    @property
    def group_key(self) -> str:
        """The id episodes are grouped by: `group_id`, or the task where none was given."""
        return self.group_id or self.task_id

    @property
    def abnormal(self) -> bool:
        return self.exit_reason in ABNORMAL_EXITS

    @property
    def sampled_tokens(self) -> int:
        return sum(t.trainable_tokens for t in self.trajectories)

    @property
    def oldest_version(self) -> int | None:
        spans = [t.version_span for t in self.trajectories if t.version_span is not None]
        return min(span[0] for span in spans) if spans else None
