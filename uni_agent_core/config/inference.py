"""The inference sections: the engine that generates tokens and the router that spreads load.

`engine` is a discriminated union on `type`: `hf` runs the policy in-process (the embedded
default); `openai_server` talks to vLLM/SGLang servers (token ids in, token ids + logprobs out).
`router` picks a replica per request by prefix-cache residency and token load.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from uni_agent_core.config.base import ConfigModel, Duration, HostDevice


class HFEngineConfig(ConfigModel):
    """In-process Hugging Face engine: batched generation with a KV and prefix cache."""

    type: Literal["hf"] = "hf"
    """Selects the in-process engine."""
    device: HostDevice = "auto"
    """Device that runs generation; `auto` picks cuda, then npu, then cpu."""
    max_batch_size: int = Field(default=8, ge=1)
    """Most sequences decoded together in one forward pass."""
    prefix_cache_tokens: int = Field(default=65_536, ge=0)
    """Token capacity of the prefix (KV) cache reused across turns of a session; 0 disables it."""
    max_model_len: int | None = Field(default=None, ge=1)
    """Longest prompt + output the engine accepts; None uses the model's own limit."""


KV_READ_WEIGHT_H200 = 34.1e-9 / 29.5e-6
"""Decode's KV read per context token, in prefill-token equivalents: HBM time per KV token over
GEMM time per prompt token for Llama-3.1-8B on an H200 (the router simulator's `vllm_h200`
profile, `router/sim/profiles.py`, states the sources)."""

SGLANG_MAX_TREE_TOKENS = 2**26 // 4
"""sglang-router's `max_tree_size` default (2**26 characters per worker) at ~4 characters a
token: far beyond a replica's KV, so within a rollout batch its trees never forget."""

DEFER_OVERCOMMIT = 0.9
"""`token_load` load control: requests whose context is cached nowhere are held back while the
live sessions' contexts exceed this share of the replicas' KV capacity (`router/load_control.py`).
"""

DEFER_UNCACHED_TOKENS = 16_384
"""...and only those with more than this many prompt tokens cached on no replica: a short new
prompt takes little KV; a long context prefilled from scratch evicts other sessions' caches."""

DEFER_RETRY_S = 15.0
"""Seconds a request held back by load control waits before it is considered again."""

MAX_DEFER_S = 300.0
"""Seconds after which a held request is sent whatever the pressure."""

WORKING_SET_S = 60.0
"""Load control's working-set window: a session counts toward the live contexts while it has a
request in flight or one started or ended within this many seconds."""

DEFAULT_MAX_TRACKED_SESSIONS = 65_536
"""Sessions whose last replica a router remembers by default: far above the live sessions of a
rollout batch (hundreds to a few thousand); about 13 MB when full (~200 bytes per session, its
id included)."""


class OpenAIServerEngineConfig(ConfigModel):
    """vLLM or SGLang servers reached over HTTP, asked for token ids and logprobs."""

    type: Literal["openai_server"] = "openai_server"
    """Selects remote OpenAI-compatible inference servers."""
    api: Literal["vllm", "sglang"] = "vllm"
    """Server kind; decides which token-id and weight-update endpoints are used."""
    base_urls: list[str] | None = Field(default=None, min_length=1)
    """Server roots, one per replica (e.g. `http://10.0.0.5:8000`). Required unless the verl
    backend launches the servers itself, in which case their addresses are registered at run
    time and this must be omitted."""
    model: str
    """Model name the servers serve (`--served-model-name`)."""
    api_key_env: str | None = None
    """Name of the environment variable holding the servers' API key; None sends no key. Keys
    never go into recipes."""
    connect_timeout_s: Duration = 10.0
    """Seconds allowed to open a connection before the replica counts as unhealthy."""
    timeout_s: Duration | None = None
    """Per-request read timeout, at most a day; None (the default) waits as long as generation
    takes, because time limits belong on turns and sandboxes, not on model sampling."""
    max_retries: int = Field(default=2, ge=0)
    """Retries of a failed request on another healthy replica before it is an engine error."""
    max_model_len: int | None = Field(default=None, ge=1)
    """Longest prompt + output the servers accept (`--max-model-len`); None trusts the server."""

    @field_validator("base_urls")
    @classmethod
    def _check_urls(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        bad = [url for url in value if not url.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"base URLs must start with http:// or https://, got {bad}")
        if len(set(value)) != len(value):
            raise ValueError("base URLs must be distinct (one per replica)")
        return [url.rstrip("/") for url in value]


EngineConfig = Annotated[HFEngineConfig | OpenAIServerEngineConfig, Field(discriminator="type")]
"""An inference engine, chosen by its `type:` tag."""


class RouterConfig(ConfigModel):
    """How generation requests are spread over engine replicas."""

    policy: Literal["round_robin", "least_requests", "sticky", "cache_aware", "token_load"] = (
        "token_load"
    )
    """`token_load` (the default) routes by token cost: the prefill a replica would compute after
    its cached prefix plus the expected decode, added to its queued token work, keeping a session
    on its replica within a tolerance band and leaving it under KV-memory pressure;
    `cache_aware` by longest cached prefix with request-count rebalancing (SGLang router);
    `least_requests` by in-flight count (verl's agent loop); `sticky` pins a session to its
    first replica; `round_robin` in turn."""
    replicas: int | None = Field(default=None, ge=1)
    """Number of replicas; None means one per `engine.base_urls` entry (openai_server) or one
    (hf). With openai_server it must equal the number of base URLs when given."""
    balance_tolerance: float = Field(default=1.0, ge=0.0)
    """`token_load`: a session stays on its replica while that replica's token cost exceeds the
    cheapest one's by at most this fraction (1.0 = 100%)..."""
    balance_min_tokens: int = Field(default=4096, ge=0)
    """...or by at most this many tokens, so small absolute gaps never break affinity."""
    kv_free_threshold: float = Field(default=0.1, ge=0.0, le=1.0)
    """`token_load`: a replica whose free KV memory is below this share of its capacity gets no
    new work while others have room (a session's affinity to it is released)."""
    kv_read_weight: float = Field(default=KV_READ_WEIGHT_H200, ge=0.0)
    """`token_load`: cost of reading one context token's KV per decoded token, in units of one
    prefilled token (default: Llama-3.1-8B on an H200, HBM time per KV token over GEMM time per
    token); 0 prices decode by token count alone."""
    cache_threshold: float = Field(default=0.3, ge=0.0, le=1.0)
    """`cache_aware`: route to the longest cached prefix when it covers more than this share of
    the prompt, else to the replica with the least cached (sglang-gateway default 0.3)."""
    balance_abs_threshold: int = Field(default=64, ge=0)
    """`cache_aware`: requests are imbalanced when max - min in-flight exceeds this..."""
    balance_rel_threshold: float = Field(default=1.5, ge=1.0)
    """...and max exceeds this multiple of min; then the least-loaded replica is chosen."""
    cache_aware_max_tree_tokens: int = Field(default=SGLANG_MAX_TREE_TOKENS, ge=1)
    """`cache_aware`: size bound of its approximate per-replica trees (built from routed prompts
    only, as SGLang's router does)."""
    kv_capacity_tokens: int | None = Field(default=None, ge=1)
    """KV tokens per replica in the router's residency model; None takes the HF engine's
    `prefix_cache_tokens`, or the KV capacity remote servers report in their `/metrics` (read at
    each health check)."""
    cache_salt_by_version: bool = True
    """Salt prefix-cache keys with the policy version, so a weight update never reuses KV
    computed by older weights."""
    health_check_interval_s: float = Field(default=5.0, gt=0)
    """Seconds between replica health probes."""
    unhealthy_after_failures: int = Field(default=3, ge=1)
    """Consecutive failed probes or requests after which a replica stops receiving traffic."""
    defer_overcommit: float = Field(default=DEFER_OVERCOMMIT, ge=0.0)
    """`token_load` load control (`router/load_control.py`): while the contexts of the live
    sessions add up to more than this share of the replicas' KV capacity, a request whose prompt
    has more than `defer_uncached_tokens` cached on no replica waits (prefilled now, it would
    evict other sessions' caches, which would then be prefilled again); 0 turns it off. Needs
    known KV capacities (configured or reported)."""
    defer_uncached_tokens: int = Field(default=DEFER_UNCACHED_TOKENS, ge=0)
    """See `defer_overcommit`."""
    defer_retry_s: float = Field(default=DEFER_RETRY_S, gt=0)
    """A held request asks again after this many seconds..."""
    max_defer_s: float = Field(default=MAX_DEFER_S, ge=0)
    """...and is sent whatever the pressure once it has waited this long (0: never held). Keep it
    well below the request timeout of the harnesses that call the gateway."""
    working_set_s: float = Field(default=WORKING_SET_S, gt=0)
    """Load control's working-set window: a session counts toward the live contexts while it has
    a request in flight or one started or ended within this many seconds (one in a longer tool
    pause does not; an ended one leaves at once)."""
    max_tracked_sessions: int = Field(default=DEFAULT_MAX_TRACKED_SESSIONS, ge=1)
    """Sessions whose last replica (`sticky` and `token_load` affinity) and context size (load
    control) the router remembers, least recently routed forgotten first, so a long run's
    finished sessions cost no memory; a forgotten session is placed afresh. Keep it well above
    the sessions alive at once."""
