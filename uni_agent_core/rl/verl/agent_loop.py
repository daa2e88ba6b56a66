"""`UniAgentLoop`: one agent-rl episode per verl sample, registered as verl agent loop `uni_agent`.

verl's agent-loop worker instantiates the loop per sample (`hydra.utils.instantiate` with the
trainer config, the worker's server manager and tokenizer) and awaits `run(sampling_params,
**row)`. The loop:

1. reads the sample's `TaskSpec` from the row (`extra_info.task_spec`, written by
   `uni_agent_core.rl.verl.data`) — with its per-sample harness, sandbox and reward overrides;
2. runs the episode exactly as the embedded trainer does (`RolloutDriver`: a seeded gateway
   session, the task's sandbox and harness, the diff scored by the verifier in a fresh sandbox),
   the gateway's engine being `VerlServerEngine` over the worker's server manager, with the
   gateway session id as verl's request id (sticky routing keeps the prefix cache);
3. returns one `AgentLoopOutput` per selected chain of the session: `prompt_ids`,
   `response_ids`, `response_mask` (1 exactly on sampled tokens), `response_logprobs` (the
   servers' own), `reward_score`, `num_turns`, and `extra_fields` with the policy-version span
   (`min_global_steps`/`max_global_steps`, which verl's metrics read; its staleness control uses
   the step the prompt was submitted at), exit reason and chain id.

It runs under verl's v1 trainers only (`trainer.use_v1=true`): they take a list of outputs per
sample and pass each sample's `session_id` (its index in the group).

The gateway, its session manager and the rollout driver are built once per worker process and
event loop (`episode_service`) and shared by every loop instance of that worker.

Chain selection (`trainer.backend.chain_selection`) when the harness split a session into
several chains (history compaction, subagents): `all` trains on every chain (each with the
episode's reward), `longest` on the chain with the most sampled tokens, `last` on the chain
opened last (the final context). An episode that recorded no chain (the sandbox failed before
the first model call) still returns one output — the task prompt and a single end token with
mask 0 — because verl needs one output per session and cannot take an empty response. With
`all`, a session's chains are separate samples sharing the group's uid, so in GRPO's baseline a
session weighs as many samples as it has chains.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from verl.experimental.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, register

from uni_agent_core.config.backend import ChainSelection, VerlBackendConfig
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.rl.verl.engine_adapter import VerlServerEngine
from uni_agent_core.rl.verl.names import AGENT_NAME, RECIPE_ENV
from uni_agent_core.rollout.driver import RolloutDriver, episode_seed
from uni_agent_core.rollout.stack import episode_concurrency
from uni_agent_core.types import RolloutResult, TaskSpec, Trajectory

logger = logging.getLogger(__name__)


def task_of_row(row: dict[str, Any]) -> TaskSpec:
    """The `TaskSpec` of a verl dataset row (`extra_info.task_spec`, JSON or a mapping)."""
    extra = row.get("extra_info") or {}
    spec = extra.get("task_spec") if isinstance(extra, dict) else None
    spec = spec if spec is not None else row.get("task_spec")
    if spec is None:
        raise ValueError(
            "the verl row carries no agent-rl task (extra_info.task_spec); write the dataset "
            "with `agent-rl verl launch` (uni_agent_core.rl.verl.data)"
        )
    return TaskSpec.model_validate(json.loads(spec) if isinstance(spec, str) else spec)


def select_chains(trajectories: list[Trajectory], policy: ChainSelection) -> list[Trajectory]:
    """The chains of one session that become training samples."""
    if policy == "all" or len(trajectories) <= 1:
        return list(trajectories)
    if policy == "longest":
        return [max(trajectories, key=lambda t: (t.trainable_tokens, t.chain_id))]
    if policy == "last":
        return [max(trajectories, key=lambda t: t.chain_id)]
    raise ValueError(f"unknown chain selection {policy!r}; use all, longest or last")


def chain_output(
    trajectory: Trajectory,
    result: RolloutResult,
    *,
    max_tokens: int,
    mask_abnormal: bool,
) -> AgentLoopOutput:
    """One chain of an episode as verl's `AgentLoopOutput`.

    verl's v1 trainers keep samples unpadded, so the only length limit is the context
    (`max_tokens`, the servers' `max_model_len`): a longer chain (the gateway caps sessions at
    the recipe's context, so only a misconfigured run gets here) loses its tail and is masked,
    rather than failing the whole group.
    """
    room = max(0, max_tokens - len(trajectory.prompt_ids))
    cut = len(trajectory.response_ids) > room
    mask = list(trajectory.loss_mask[:room])
    masked = (mask_abnormal and result.abnormal) or cut
    if masked:
        mask = [0] * len(mask)
    span = trajectory.version_span or (result.started_version, result.started_version)
    return AgentLoopOutput(
        prompt_ids=list(trajectory.prompt_ids),
        response_ids=list(trajectory.response_ids[:room]),
        response_mask=mask,
        response_logprobs=list(trajectory.logprobs[:room]),
        reward_score=float(result.reward),
        num_turns=trajectory.num_turns,
        metrics=AgentLoopMetrics(
            generate_sequences=result.timings.get("agent", 0.0),
            compute_score=result.timings.get("verify", 0.0),
        ),
        extra_fields={
            "min_global_steps": span[0],
            "max_global_steps": span[1],
            "exit_reason": str(result.exit_reason),
            "chain_id": trajectory.chain_id,
            "agent_rl_session": trajectory.session_id,
            "masked": masked,
            "truncated": cut,
            "reward_extra_info": {
                "acc": float(result.resolved),
                "leak_flagged": float(result.leak_flagged),
            },
        },
    )


def empty_episode_output(
    result: RolloutResult, prompt_ids: list[int], end_token_id: int
) -> AgentLoopOutput:
    """The output of an episode that recorded no chain: nothing trainable, the reward kept."""
    return AgentLoopOutput(
        prompt_ids=prompt_ids,
        response_ids=[end_token_id],
        response_mask=[0],
        response_logprobs=[0.0],
        reward_score=float(result.reward),
        num_turns=0,
        metrics=AgentLoopMetrics(),
        extra_fields={
            "min_global_steps": result.started_version,
            "max_global_steps": result.started_version,
            "exit_reason": str(result.exit_reason),
            "chain_id": -1,
            "masked": True,
            "truncated": False,
            "reward_extra_info": {"acc": 0.0, "leak_flagged": float(result.leak_flagged)},
        },
    )


# -- the per-worker episode service --------------------------------------------------------------


@dataclass
class EpisodeService:
    """Gateway + session manager + rollout driver over one verl server manager."""

    engine: VerlServerEngine
    driver: RolloutDriver
    gateway_url: str
    exits: AsyncExitStack


_services: dict[tuple[int, int, str], EpisodeService] = {}


def per_worker_concurrency(recipe: Recipe) -> int:
    """This worker's share of the recipe's episode cap (at least one)."""
    backend = recipe.trainer.backend
    workers = backend.agent_loop_workers if isinstance(backend, VerlBackendConfig) else 1
    return max(1, -(-episode_concurrency(recipe) // workers))


_service_locks: dict[int, asyncio.Lock] = {}


async def episode_service(
    server_manager: Any, tokenizer: Any, recipe: Recipe, *, eos_token_ids: list[int]
) -> EpisodeService:
    """The worker's shared episode service for this server manager (built on first use).

    Episodes in flight per worker are the recipe's cap divided among verl's agent-loop workers,
    so sandboxes and sessions stay within `trainer.max_concurrent_episodes` overall.
    """
    from uni_agent_core.gateway.embedded import serving_gateway
    from uni_agent_core.rollout.build import build_session_manager

    loop_id = id(asyncio.get_running_loop())
    key = (loop_id, id(server_manager), recipe.name)
    lock = _service_locks.setdefault(loop_id, asyncio.Lock())
    async with lock:
        if key in _services:
            return _services[key]
        engine = VerlServerEngine(server_manager, eos_token_ids=eos_token_ids)
        manager = build_session_manager(recipe, engine, tokenizer)
        exits = AsyncExitStack()
        url = await exits.enter_async_context(serving_gateway(manager))
        driver = RolloutDriver.for_recipe(
            recipe, manager=manager, gateway_url=url, max_concurrency=per_worker_concurrency(recipe)
        )
        service = _services[key] = EpisodeService(engine, driver, url, exits)
        logger.info("uni_agent: gateway for verl's rollout servers on %s", url)
        return service


async def close_episode_services() -> None:
    """Stop the gateways this event loop started (tests; a worker process just exits)."""
    loop_id = id(asyncio.get_running_loop())
    for key in [k for k in _services if k[0] == loop_id]:
        service = _services.pop(key)
        await service.engine.close()
        await service.exits.aclose()


_recipes: dict[str, Recipe] = {}


def recipe_at(path: str) -> Recipe:
    """The validated recipe of a file (loaded once per process)."""
    from uni_agent_core.config import load_recipe

    if path not in _recipes:
        _recipes[path] = load_recipe(path)
    return _recipes[path]


@functools.lru_cache(maxsize=8)
def configured_eos_ids(model_path: str | None) -> tuple[int, ...]:
    """EOS ids from a model directory's generation config (read once per process)."""
    if not model_path:
        return ()
    try:
        from transformers import GenerationConfig

        configured = GenerationConfig.from_pretrained(model_path).eos_token_id
    except (OSError, ValueError):
        return ()
    if configured is None:
        return ()
    return (configured,) if isinstance(configured, int) else tuple(configured)


def eos_ids(tokenizer: Any, model_path: str | None) -> list[int]:
    """End-of-generation ids: the model's generation config and the tokenizer's EOS."""
    ids = set(configured_eos_ids(model_path))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return sorted(ids)


@register(AGENT_NAME)
class UniAgentLoop(AgentLoopBase):
    """verl agent loop running agent-rl episodes (any harness, sandbox and verifier)."""

    def __init__(self, *args: Any, recipe_path: str | None = None, **kwargs: Any) -> None:
        """Args:
        recipe_path: the agent-rl recipe (harness, sandbox, reward, gateway, seed); the
            agent-loop config written by `agent-rl verl launch` sets it, else
            `$AGENT_RL_VERL_RECIPE`.
        *args, **kwargs: what verl passes every agent loop (`trainer_config`, `server_manager`,
            `tokenizer`, `processor`, `dataset_cls`, `data_config`, ...).
        """
        kwargs.pop("name", None)
        super().__init__(*args, **kwargs)
        path = recipe_path or os.environ.get(RECIPE_ENV)
        if not path:
            raise ValueError(
                f"UniAgentLoop needs the agent-rl recipe: set recipe_path in the agent-loop "
                f"config or ${RECIPE_ENV}"
            )
        self.recipe = recipe_at(str(path))
        backend = self.recipe.trainer.backend
        self.chain_selection: ChainSelection = (
            backend.chain_selection if isinstance(backend, VerlBackendConfig) else "all"
        )
        self.max_tokens = int(self.rollout_config.max_model_len)
        model_path = self.config.get("actor_rollout_ref", {}).get("model", {}).get("path")
        self.eos_token_ids = eos_ids(self.tokenizer, model_path)

    # verl's v1 trainers take a list of outputs (one per chain); the base class still types one.
    async def run(  # type: ignore[override]
        self, sampling_params: dict[str, Any], **row: Any
    ) -> list[AgentLoopOutput]:
        if "session_id" not in row:
            raise ValueError(
                "UniAgentLoop returns one output per chain, which verl's v1 trainers take "
                "(trainer.use_v1=true; they pass each sample's session_id)"
            )
        task = task_of_row(row)
        step = int(row.get("global_steps") or 0)
        sample_index = int(row["session_id"])
        service = await episode_service(
            self.server_manager, self.tokenizer, self.recipe, eos_token_ids=self.eos_token_ids
        )
        service.engine.observe_version(step)
        # The prompt's uid keeps a task drawn again at the same step (a refill, a new epoch)
        # from repeating the same samples.
        draw = f"{task.instance_id}/{row.get('uid', '')}"
        seed = episode_seed(self.recipe.seed, step, draw, sample_index)
        result = await service.driver.episode(task, sample_index, seed=seed)
        chains = select_chains(result.trajectories, self.chain_selection)
        if chains:
            mask_abnormal = self.recipe.trainer.mask_abnormal_exits
            return [
                chain_output(t, result, max_tokens=self.max_tokens, mask_abnormal=mask_abnormal)
                for t in chains
            ]
        messages = list(row.get("raw_prompt") or [])
        messages = messages or [{"role": "user", "content": task.problem_statement}]
        # verl annotates the attribute with the `AutoTokenizer` factory; it holds what that made
        # (typed Any, as tokenizers are throughout).
        tokenizer: Any = self.tokenizer
        prompt = tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        end = self.eos_token_ids[0] if self.eos_token_ids else 0
        return [empty_episode_output(result, [int(t) for t in prompt], end)]


__all__ = [
    "AGENT_NAME",
    "UniAgentLoop",
    "chain_output",
    "empty_episode_output",
    "close_episode_services",
    "select_chains",
    "task_of_row",
]
