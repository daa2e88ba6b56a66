"""Policy models and tokenizers: `tiny`, `smollm2-135m` and any local HF directory."""

from uni_agent_core.models.registry import (
    PolicySource,
    PolicyUnavailableError,
    cache_root,
    describe_policies,
    load_policy,
    prepare_policy,
    resolve_policy,
)

__all__ = [
    "PolicySource",
    "PolicyUnavailableError",
    "cache_root",
    "describe_policies",
    "load_policy",
    "prepare_policy",
    "resolve_policy",
]
