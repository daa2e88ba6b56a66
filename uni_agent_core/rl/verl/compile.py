"""A recipe compiled to verl: Hydra overrides for `verl.trainer.main_ppo` (the v1 trainers).

`verl_overrides(recipe, inputs)` maps every section verl consumes — trainer mode (`sync`,
`colocate_async`, `separate_async` with role switching as `hybrid_rollout.enable_switch`),
staleness (`trainer.v1.sampler.max_off_policy_*`), algorithm (`adv_estimator`,
`policy_loss.loss_mode`, clip ratios, KL, rollout correction), batch shape, the rollout engine
(`vllm`/`sglang`, `n`, prompt/response lengths, `calculate_log_probs`), pools and parallelism,
device (`cuda`/`npu`), checkpointing, the agent loop (`uni_agent` with the recipe's config
file) and dynamic sampling (verl's group filter on the reward: zero-variance groups are evicted
and refilled; the task set itself is the curriculum's, see `data`).

`compose_verl_config(overrides)` composes them with the config files shipped in the installed
verl wheel, in Hydra's struct mode: a key that does not exist there is an error, so a recipe that
composes is one every key of which verl knows. `check_verl_batch(config)` re-checks the
batch-size rules verl asserts at start-up on the composed config, with the key to change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uni_agent_core.config.backend import VerlBackendConfig
from uni_agent_core.config.inference import OpenAIServerEngineConfig
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.errors import UserError
from uni_agent_core.plugins import PluginKind, is_import_path, is_user_plugin

VERL_ENTRY_MODULE = "verl.trainer.main_ppo"
"""verl's trainer entry point (Hydra app `ppo_trainer`)."""

TRAINER_MODES = {
    "sync": "sync",
    "colocated_async": "colocate_async",
    "separate_async": "separate_async",
}
"""agent-rl `trainer.mode` -> verl `trainer.v1.trainer_mode`."""

ACTOR = "actor_rollout_ref.actor."
ROLLOUT = "actor_rollout_ref.rollout."

_PLAIN = re.compile(r"^[A-Za-z0-9_./@-]+$")


class VerlConfigError(UserError, ValueError):
    """The recipe cannot be run by verl as configured (the message names the key)."""


@dataclass(frozen=True)
class VerlInputs:
    """Files `agent-rl verl launch` writes for a run, referenced by the overrides."""

    train_files: Path
    val_files: Path
    agent_loop_config: Path
    model_path: str
    checkpoint_dir: Path


def verl_backend(recipe: Recipe) -> VerlBackendConfig:
    """The recipe's verl backend section, or a clear error for other backends."""
    backend = recipe.trainer.backend
    if not isinstance(backend, VerlBackendConfig):
        raise VerlConfigError(
            f"trainer.backend.type is {backend.type!r}; verl runs recipes with "
            "trainer.backend.type: verl (see recipes/*-gpu.yaml)"
        )
    return backend


def hydra_value(value: Any) -> str:
    """A Python value as a Hydra override value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.match(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def verl_overrides(recipe: Recipe, inputs: VerlInputs) -> list[str]:
    """Hydra overrides (`key=value`) that run `recipe` on verl's v1 trainer.

    Raises:
        VerlConfigError: the recipe lets harnesses change sampling per request
            (`gateway.sampling_override: allow`): verl recomputes training logprobs at
            `rollout.temperature`, so every sample must use it.
    """
    backend = verl_backend(recipe)
    if recipe.gateway.sampling_override == "allow":
        raise VerlConfigError(
            "gateway.sampling_override: allow lets a harness sample at another temperature "
            "than verl's rollout.temperature, which verl's logprob recomputation assumes; use "
            "ignore or reject on verl"
        )
    algorithm_plugins: tuple[tuple[str, PluginKind, str], ...] = (
        ("trainer.algorithm.policy_loss", "policy_loss", recipe.trainer.algorithm.policy_loss),
        (
            "trainer.algorithm.adv_estimator",
            "adv_estimator",
            recipe.trainer.algorithm.adv_estimator,
        ),
    )
    for key, kind, name in algorithm_plugins:
        if is_user_plugin(kind, name):
            how = "by import path" if is_import_path(name) else "as an installed plug-in"
            raise VerlConfigError(
                f"{key}: {name} is named {how}, which verl's workers do not resolve; "
                "register it in verl's registry from a module the workers import "
                "(uni_agent_core.rl.losses.register_for_verl, docs/extending.md) and name it "
                "here by its registered name"
            )
    trainer, algo = recipe.trainer, recipe.trainer.algorithm
    mode = TRAINER_MODES[trainer.mode]
    prompt_length = trainer.max_context_tokens - trainer.max_response_tokens
    sampling = recipe.gateway.sampling
    megatron = backend.strategy == "megatron"
    separate = trainer.mode == "separate_async"
    actor = backend.actor
    correction = algo.rollout_correction
    engine = recipe.engine
    assert isinstance(engine, OpenAIServerEngineConfig)  # the recipe requires it with verl
    settings: dict[str, Any] = {
        "model_engine": "megatron" if megatron else "dp",
        # data: the task rows written for this run; verl's validation is off (evaluation is
        # agent-rl's checkpoint-evaluation stage).
        "data.train_files": str(inputs.train_files),
        "data.val_files": str(inputs.val_files),
        "data.prompt_key": "prompt",
        "data.train_batch_size": trainer.batch_size,
        "data.max_prompt_length": prompt_length,
        "data.max_response_length": trainer.max_response_tokens,
        "data.return_raw_chat": True,
        "data.filter_overlong_prompts": False,
        "data.truncation": "error",
        "data.shuffle": True,
        "data.seed": trainer.seed if trainer.seed is not None else recipe.seed,
        # model
        "actor_rollout_ref.model.path": inputs.model_path,
        "actor_rollout_ref.model.custom_chat_template": (
            Path(recipe.policy.chat_template).read_text() if recipe.policy.chat_template else None
        ),
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.hybrid_engine": not (separate and not backend.role_switching),
        # actor: optimizer, batch, loss
        ACTOR + "optim.lr": trainer.lr,
        ACTOR + "optim.weight_decay": trainer.weight_decay,
        ACTOR + "optim.lr_warmup_steps": trainer.lr_warmup_steps,
        ACTOR + "optim.clip_grad": trainer.max_grad_norm,
        ACTOR + "ppo_mini_batch_size": backend.ppo_mini_batch_size,
        ACTOR + "use_dynamic_bsz": True,
        ACTOR + "ppo_max_token_len_per_gpu": trainer.max_context_tokens,
        ACTOR + "policy_loss.loss_mode": algo.policy_loss,
        ACTOR + "loss_agg_mode": algo.loss_agg_mode,
        ACTOR + "clip_ratio_low": algo.clip_ratio_low,
        ACTOR + "clip_ratio_high": algo.clip_ratio_high,
        ACTOR + "clip_ratio_c": algo.clip_ratio_c,
        ACTOR + "entropy_coeff": algo.entropy_coef,
        ACTOR + "use_kl_loss": algo.kl_coef > 0,
        ACTOR + "kl_loss_coef": algo.kl_coef,
        # rollout: verl launches the servers; every call returns logprobs
        ROLLOUT + "name": engine.api,
        ROLLOUT + "mode": "async",
        ROLLOUT + "n": trainer.group_size,
        ROLLOUT + "prompt_length": prompt_length,
        ROLLOUT + "response_length": trainer.max_response_tokens,
        ROLLOUT + "max_model_len": trainer.max_context_tokens,
        ROLLOUT + "tensor_model_parallel_size": backend.rollout.tensor_parallel_size,
        ROLLOUT + "gpu_memory_utilization": backend.rollout.gpu_memory_utilization,
        ROLLOUT + "temperature": sampling.temperature,
        ROLLOUT + "top_p": sampling.top_p,
        ROLLOUT + "top_k": sampling.top_k,
        ROLLOUT + "calculate_log_probs": True,
        ROLLOUT + "enable_prefix_caching": True,
        ROLLOUT + "seed": recipe.seed,
        ROLLOUT + "checkpoint_engine.backend": backend.checkpoint_engine,
        ROLLOUT + "agent.default_agent_loop": "uni_agent",
        ROLLOUT + "agent.agent_loop_config_path": str(inputs.agent_loop_config),
        ROLLOUT + "agent.num_workers": backend.agent_loop_workers,
        # algorithm
        "algorithm.adv_estimator": algo.adv_estimator,
        "algorithm.norm_adv_by_std_in_grpo": algo.norm_adv_by_std,
        "algorithm.use_kl_in_reward": False,
        "algorithm.rollout_correction.rollout_is": (
            None if correction.is_level == "none" else correction.is_level
        ),
        "algorithm.rollout_correction.rollout_is_threshold": correction.is_threshold,
        "algorithm.rollout_correction.bypass_mode": correction.bypass_mode,
        # dynamic sampling: groups whose rewards are all equal carry no signal; verl evicts and
        # refills them (opt-in: v1 refills without bound, see VerlBackendConfig.filter_groups)
        "algorithm.filter_groups.enable": backend.filter_groups,
        "algorithm.filter_groups.metric": "reward",
        # trainer: pools, v1 mode, staleness, checkpoints, tracking
        "trainer.device": backend.device,
        "trainer.nnodes": backend.nnodes,
        "trainer.n_gpus_per_node": backend.n_gpus_per_node,
        "trainer.total_training_steps": trainer.total_steps,
        "trainer.save_freq": trainer.checkpoint_interval,
        "trainer.resume_mode": "auto" if trainer.resume == "auto" else "disable",
        "trainer.default_local_dir": str(inputs.checkpoint_dir),
        "trainer.max_actor_ckpt_to_keep": trainer.keep_checkpoints,
        "trainer.project_name": recipe.tracking.experiment,
        "trainer.experiment_name": recipe.name,
        "trainer.logger": ["console", "mlflow"],
        "trainer.val_before_train": False,
        "trainer.test_freq": -1,
        "trainer.use_v1": True,
        "trainer.v1.trainer_mode": mode,
        # verl counts the versions a trajectory spans inclusively (on-policy = 1); our bound
        # counts the versions between its oldest token and the trainer (on-policy = 0).
        "trainer.v1.sampler.max_off_policy_threshold": (trainer.staleness.max_versions or 0) + 1,
        "trainer.v1.sampler.max_off_policy_strategy": trainer.staleness.policy,
    }
    if megatron:
        settings |= {
            ACTOR + "megatron.tensor_model_parallel_size": actor.tensor_parallel_size,
            ACTOR + "megatron.pipeline_model_parallel_size": (actor.pipeline_parallel_size),
            ACTOR + "megatron.context_parallel_size": actor.context_parallel_size,
            ACTOR + "megatron.expert_model_parallel_size": actor.expert_parallel_size,
            ACTOR + "megatron.param_offload": actor.param_offload,
            ACTOR + "megatron.optimizer_offload": actor.optimizer_offload,
        }
    else:
        settings |= {
            ACTOR + "strategy": backend.strategy,
            ACTOR + "ulysses_sequence_parallel_size": (actor.ulysses_sequence_parallel_size),
            ACTOR + "fsdp_config.param_offload": actor.param_offload,
            ACTOR + "fsdp_config.optimizer_offload": actor.optimizer_offload,
        }
    if backend.router_replay != "disabled":
        settings[ACTOR + "megatron.router_replay.mode"] = backend.router_replay
        settings[ROLLOUT + "enable_rollout_routing_replay"] = backend.router_replay == "R3"
    if trainer.mode != "sync":
        settings[f"trainer.v1.{mode}.num_warmup_batches"] = backend.num_warmup_batches
    if separate:
        settings |= {
            "trainer.v1.separate_async.parameter_sync_step": backend.parameter_sync_step,
            "trainer.v1.separate_async.hybrid_rollout.enable_switch": backend.role_switching,
            ROLLOUT + "nnodes": backend.rollout.nnodes,
            ROLLOUT + "n_gpus_per_node": backend.rollout.n_gpus_per_node,
        }
    return [f"{key}={hydra_value(value)}" for key, value in settings.items()]


def verl_config_dir() -> Path:
    """The Hydra config directory shipped in the installed verl wheel."""
    import verl

    return Path(verl.__file__).parent / "trainer" / "config"


def compose_verl_config(overrides: list[str]) -> Any:
    """verl's `ppo_trainer` config with `overrides`, composed against the installed wheel.

    Raises:
        VerlConfigError: an override names a key verl's schema does not have, or a bad value.
    """
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            return compose(config_name="ppo_trainer", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        import verl

        raise VerlConfigError(
            f"verl {verl.__version__} rejects the generated config: {exc}"
        ) from exc


def check_verl_batch(config: Any) -> None:
    """The batch-size rules verl asserts at start-up, checked on a composed config.

    Raises:
        VerlConfigError: naming the recipe key to change.
    """
    batch = int(config.data.train_batch_size)
    mini = int(config.actor_rollout_ref.actor.ppo_mini_batch_size)
    mode = config.trainer.v1.trainer_mode
    if mode == "separate_async":
        sync_step = int(config.trainer.v1.separate_async.parameter_sync_step)
        if batch != sync_step * mini:
            raise VerlConfigError(
                f"trainer.batch_size: verl separate_async asserts train_batch_size == "
                f"parameter_sync_step * ppo_mini_batch_size, got {batch} != {sync_step} * {mini}"
            )
    elif batch % mini:
        raise VerlConfigError(
            f"trainer.backend.ppo_mini_batch_size: {mini} does not divide train_batch_size {batch}"
        )
    max_model_len = int(config.actor_rollout_ref.rollout.max_model_len)
    needed = int(config.actor_rollout_ref.rollout.prompt_length) + int(
        config.actor_rollout_ref.rollout.response_length
    )
    if needed > max_model_len:
        raise VerlConfigError(
            f"trainer.max_context_tokens: prompt_length + response_length = {needed} exceeds the "
            f"servers' max_model_len {max_model_len}"
        )
