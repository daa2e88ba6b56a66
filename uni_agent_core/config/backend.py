"""The trainer backend: the embedded torch trainer or verl over Ray (GPU or Ascend NPU pools).

A discriminated union on `type`. Rules that only involve the backend's own fields (parallelism
shapes, device vs weight-sync transport) live here; rules that also involve the batch shape or
the async mode live on `TrainerConfig`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from uni_agent_core.config.base import AcceleratorDevice, ConfigModel, HostDevice, raise_conflicts

CheckpointEngine = Literal["naive", "nccl", "hccl", "nixl", "mooncake"]
"""verl weight-sync transports from trainer to rollout servers."""

ChainSelection = Literal["all", "longest", "last"]
"""Which chains of a session verl trains on when the harness split it (see `UniAgentLoop`)."""

_DEVICE_TRANSPORT: dict[str, CheckpointEngine] = {"cuda": "nccl", "npu": "hccl"}
_FOREIGN_TRANSPORT: dict[str, str] = {"cuda": "hccl", "npu": "nccl"}


class EmbeddedBackendConfig(ConfigModel):
    """agent-rl's own single-process torch trainer (the embedded default)."""

    type: Literal["embedded"] = "embedded"
    """Selects the embedded trainer."""
    device: HostDevice = "auto"
    """Device that runs the optimizer step."""
    micro_batch_tokens: int = Field(default=8192, ge=1)
    """Padded tokens per forward/backward micro-batch (counted after the step's shared prefix
    on the fast path, which on a CPU forwards one row at a time); gradients accumulate over
    micro-batches."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory (takes the reference path:
    HF turns the KV cache off under checkpointing, so `shared_prefix` does not apply)."""
    shared_prefix: bool = True
    """The fast path: the prompt prefix every row of a step shares runs once with exact
    gradients, the old logprobs come from the loss's own forward, and the LM head runs only
    at loss positions. False takes the reference path (the same update, slower)."""
    trainable_layers: int | None = Field(default=None, ge=1)
    """Train only the top N decoder layers (and the final norm; `rl/trainable.py`): the
    embeddings and the layers below stay frozen, so the backward pass runs over N layers. None
    trains every weight."""
    role_switching: bool = True
    """separate_async: while the trainer waits for its next batch, its own model serves
    rollouts as one more replica behind the router (reclaimed when the batch is ready)."""


class ActorParallelConfig(ConfigModel):
    """How the trained model is sharded over the trainer pool."""

    tensor_parallel_size: int = Field(default=1, ge=1)
    """Megatron tensor parallelism."""
    pipeline_parallel_size: int = Field(default=1, ge=1)
    """Megatron pipeline parallelism."""
    context_parallel_size: int = Field(default=1, ge=1)
    """Megatron context parallelism (splits long sequences)."""
    expert_parallel_size: int = Field(default=1, ge=1)
    """Megatron expert parallelism for MoE models."""
    ulysses_sequence_parallel_size: int = Field(default=1, ge=1)
    """FSDP Ulysses sequence parallelism (splits long sequences)."""
    param_offload: bool = False
    """Keep parameters on the host between uses."""
    optimizer_offload: bool = False
    """Keep optimizer state on the host."""

    @property
    def model_parallel_size(self) -> int:
        """Devices that hold one replica of the model (the data-parallel unit)."""
        return (
            self.tensor_parallel_size
            * self.pipeline_parallel_size
            * self.context_parallel_size
            * self.ulysses_sequence_parallel_size
        )


class RolloutPoolConfig(ConfigModel):
    """The inference servers verl launches (vLLM or SGLang, per `engine.api`)."""

    nnodes: int = Field(default=0, ge=0)
    """Nodes of the standalone rollout pool; 0 runs the servers on the trainer pool (sync and
    colocated_async). separate_async needs at least 1."""
    n_gpus_per_node: int = Field(default=8, ge=1)
    """Accelerators per rollout node."""
    tensor_parallel_size: int = Field(default=1, ge=1)
    """Tensor parallelism of each inference server."""
    gpu_memory_utilization: float = Field(default=0.7, gt=0.0, le=1.0)
    """Fraction of device memory the servers may take for weights and KV cache."""


class VerlBackendConfig(ConfigModel):
    """verl's trainer over Ray on a GPU or Ascend NPU pool."""

    type: Literal["verl"] = "verl"
    """Selects verl."""
    device: AcceleratorDevice = "cuda"
    """Accelerator kind of both pools."""
    ray_address: str | None = None
    """Ray cluster to join (`auto`, `ray://host:10001`); None starts a local one."""
    nnodes: int = Field(default=1, ge=1)
    """Nodes of the trainer pool."""
    n_gpus_per_node: int = Field(default=8, ge=1)
    """Accelerators per trainer node."""
    strategy: Literal["fsdp", "fsdp2", "megatron"] = "fsdp2"
    """Training engine; megatron for large MoE models (tensor/pipeline/expert parallelism)."""
    actor: ActorParallelConfig = Field(default_factory=ActorParallelConfig)
    """Sharding of the trained model."""
    rollout: RolloutPoolConfig = Field(default_factory=RolloutPoolConfig)
    """The inference servers verl launches."""
    checkpoint_engine: CheckpointEngine | None = None
    """Weight-sync transport to the rollout servers; None picks nccl on cuda, hccl on npu."""
    parameter_sync_step: int = Field(default=1, ge=1)
    """Optimizer steps between weight pushes to the rollout servers (separate_async); must be
    1 in sync and colocated_async modes."""
    ppo_mini_batch_size: int | None = Field(default=None, ge=1)
    """Tasks (prompt groups) per optimizer step, as in verl; None means
    `trainer.batch_size / parameter_sync_step`."""
    num_warmup_batches: int = Field(default=1, ge=0)
    """Batches submitted for generation before the first training step."""
    router_replay: Literal["disabled", "R2", "R3"] = "disabled"
    """MoE routing replay: R3 replays the rollout's expert choices in training (MoE only)."""
    role_switching: bool = True
    """separate_async: lend idle trainer devices to rollout while the trainer waits for data
    (verl's `hybrid_rollout.enable_switch`), reclaimed when enough of a batch is ready."""
    filter_groups: bool = False
    """verl's dynamic sampling: evict groups whose rewards are all equal and generate new ones
    in their place. verl's v1 trainers refill without bound, so a run whose policy never
    solves (or always solves) its tasks would spin; enable it when the curriculum keeps the
    task set in the learnable band. Off, such groups train with zero advantage (no gradient)."""
    chain_selection: ChainSelection = "all"
    """Chains of a split session that become samples: `all` (each with the episode's reward),
    `longest` (most sampled tokens) or `last` (the final context)."""
    agent_loop_workers: int = Field(default=8, ge=1)
    """verl agent-loop worker processes (each runs its own gateway for its episodes)."""

    @property
    def trainer_world_size(self) -> int:
        """Accelerators in the trainer pool."""
        return self.nnodes * self.n_gpus_per_node

    @property
    def data_parallel_size(self) -> int:
        """Model replicas in the trainer pool."""
        return self.trainer_world_size // self.actor.model_parallel_size

    @model_validator(mode="after")
    def _check_shapes(self) -> VerlBackendConfig:
        problems: list[tuple[str, str]] = []
        actor = self.actor
        if self.strategy == "megatron" and actor.ulysses_sequence_parallel_size != 1:
            problems.append(
                (
                    "actor.ulysses_sequence_parallel_size",
                    "Ulysses is an FSDP feature; with megatron use actor.context_parallel_size",
                )
            )
        if self.strategy != "megatron":
            for name in (
                "tensor_parallel_size",
                "pipeline_parallel_size",
                "context_parallel_size",
                "expert_parallel_size",
            ):
                if getattr(actor, name) != 1:
                    problems.append(
                        (
                            f"actor.{name}",
                            f"needs strategy megatron; {self.strategy} shards with FSDP "
                            "(use actor.ulysses_sequence_parallel_size for long sequences)",
                        )
                    )
        if self.router_replay == "R3":
            problems.append(
                (
                    "router_replay",
                    "R3 replays the rollout servers' expert routes, which agent-rl's gateway "
                    "does not record yet (UniAgentLoop returns no routed_experts); use R2 "
                    "(routes recorded in the training forward pass) or disabled",
                )
            )
        if self.router_replay != "disabled" and self.strategy != "megatron":
            problems.append(
                (
                    "router_replay",
                    f"{self.router_replay} replays MoE expert routing in verl's megatron engine; "
                    "use strategy megatron or router_replay disabled",
                )
            )
        if self.trainer_world_size % actor.model_parallel_size:
            problems.append(
                (
                    "actor",
                    f"model parallel size {actor.model_parallel_size} (tp*pp*cp*ulysses) does "
                    f"not divide the trainer pool's {self.trainer_world_size} devices "
                    "(nnodes * n_gpus_per_node)",
                )
            )
        rollout_devices = (
            self.rollout.nnodes * self.rollout.n_gpus_per_node
            if self.rollout.nnodes
            else self.trainer_world_size
        )
        if rollout_devices % self.rollout.tensor_parallel_size:
            problems.append(
                (
                    "rollout.tensor_parallel_size",
                    f"{self.rollout.tensor_parallel_size} does not divide the "
                    f"{rollout_devices} devices the rollout servers run on",
                )
            )
        if self.checkpoint_engine is None:
            self.checkpoint_engine = _DEVICE_TRANSPORT[self.device]
        elif self.checkpoint_engine == _FOREIGN_TRANSPORT[self.device]:
            problems.append(
                (
                    "checkpoint_engine",
                    f"{self.checkpoint_engine} does not run on {self.device}; use "
                    f"{_DEVICE_TRANSPORT[self.device]}",
                )
            )
        raise_conflicts(problems)
        return self


TrainerBackendConfig = Annotated[
    EmbeddedBackendConfig | VerlBackendConfig, Field(discriminator="type")
]
"""A trainer backend, chosen by its `type:` tag."""
