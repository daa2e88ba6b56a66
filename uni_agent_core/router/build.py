"""Turning a recipe's `engine` and `router` sections into the one `Engine` the gateway uses."""

from __future__ import annotations

from collections.abc import Sequence

from uni_agent_core.config import PolicyConfig
from uni_agent_core.config.inference import EngineConfig, HFEngineConfig, RouterConfig
from uni_agent_core.inference.types import Engine
from uni_agent_core.router.policies import make_policy
from uni_agent_core.router.router import Router


def router_over(
    engines: Sequence[Engine],
    config: RouterConfig,
    names: Sequence[str],
    *,
    always: bool = False,
) -> Engine:
    """One engine as is (unless `always`); several behind a `Router` with the recipe's policy."""
    if len(engines) == 1 and not always:
        return engines[0]
    policy = make_policy(
        config.policy,
        balance_tolerance=config.balance_tolerance,
        balance_min_tokens=config.balance_min_tokens,
        kv_free_threshold=config.kv_free_threshold,
        kv_read_weight=config.kv_read_weight,
        defer_overcommit=config.defer_overcommit,
        defer_uncached_tokens=config.defer_uncached_tokens,
        cache_threshold=config.cache_threshold,
        balance_abs_threshold=config.balance_abs_threshold,
        balance_rel_threshold=config.balance_rel_threshold,
        max_tree_tokens=config.cache_aware_max_tree_tokens,
    )
    return Router(
        engines,
        policy,
        names=names,
        kv_capacity_tokens=config.kv_capacity_tokens,
        unhealthy_after_failures=config.unhealthy_after_failures,
        health_check_interval_s=config.health_check_interval_s,
        invalidate_on_update=config.cache_salt_by_version,
        max_tracked_sessions=config.max_tracked_sessions,
        defer_retry_s=config.defer_retry_s,
        max_defer_s=config.max_defer_s,
        working_set_s=config.working_set_s,
    )


def build_routed_engine(
    policy: PolicyConfig,
    engine: EngineConfig,
    router: RouterConfig | None = None,
    *,
    lendable: Engine | None = None,
) -> Engine:
    """The recipe's replicas (`router.replicas` HF engines, or one per server URL), routed.

    `lendable` (role switching: the trainer's own model) joins the router parked, out of the
    pool until `Router.lend`; with it there is always a `Router`, even over one replica.
    """
    from uni_agent_core.inference.builder import build_engines

    config = router or RouterConfig()
    replicas = config.replicas or 1
    engines = build_engines(policy, engine, replicas=replicas)
    if isinstance(engine, HFEngineConfig):
        names = [f"hf-{i}" for i in range(len(engines))]
        if config.kv_capacity_tokens is None and engine.prefix_cache_tokens:
            config = config.model_copy(update={"kv_capacity_tokens": engine.prefix_cache_tokens})
    else:
        names = list(engine.base_urls or [])
    routed = router_over(engines, config, names, always=lendable is not None)
    if lendable is not None:
        assert isinstance(routed, Router)
        routed.add_lendable(lendable, "trainer")
    return routed
