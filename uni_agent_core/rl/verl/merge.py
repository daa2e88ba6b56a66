"""verl FSDP checkpoints -> Hugging Face model directories (for evaluation and vLLM).

verl's trainer writes `<trainer.default_local_dir>/global_step_<N>/actor/` (the run's
`verl/checkpoints/`, `docs/architecture.md`, "The run directory") and then
`latest_checkpointed_iteration.txt` holding N. The actor directory, from verl's
`FSDPCheckpointManager`, holds `fsdp_config.json` (`FSDP_version`, `world_size`), one
`model_world_size_<W>_rank_<r>.pt` per rank (sharded state dicts of DTensors), optimizer and extra
state, and `huggingface/` (model config, generation config, tokenizer; no weights).

- `find_verl_checkpoints`: the complete checkpoints under a `default_local_dir`, oldest first;
  steps newer than the tracker file are still being written and left out.
- `merge_verl_checkpoint`: runs verl's own merger (`python -m verl.model_merger merge --backend
  fsdp`) in a child process, into a staging directory renamed to the target when it succeeded.
  The merger writes bf16 weights (whatever the training dtype), config and tokenizer.

A Megatron actor checkpoint (`actor/model/dist_ckpt/`, verl's `MegatronCheckpointManager`) is
merged the same way with `--backend megatron`; that merger needs megatron-core and runs on the
GPU pool's nodes, so it is not exercised on CPU machines. This module does not import verl; the
child process does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TRACKER_FILE = "latest_checkpointed_iteration.txt"
FSDP_CONFIG = "fsdp_config.json"
HF_SUBDIR = "huggingface"
_STEP_DIR = re.compile(r"global_step_(\d+)")
# Tokenizer-side files the merger's `save_pretrained` may not reproduce; copied when absent.
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)


MEGATRON_DIST_CKPT = Path("model") / "dist_ckpt"
"""Where verl's Megatron checkpoint manager keeps an actor's distributed checkpoint."""


def checkpoint_backend(actor_dir: Path) -> str:
    """`megatron` for a Megatron actor checkpoint, else `fsdp` (verl's merger's `--backend`)."""
    return "megatron" if (Path(actor_dir) / MEGATRON_DIST_CKPT).is_dir() else "fsdp"


def checkpoint_problems(actor_dir: Path) -> list[str]:
    """What keeps `actor_dir` from being a complete verl actor checkpoint (empty: none)."""
    actor_dir = Path(actor_dir)
    if not actor_dir.is_dir():
        return [f"{actor_dir} is not a directory"]
    if checkpoint_backend(actor_dir) == "megatron":
        if not (actor_dir / HF_SUBDIR / "config.json").is_file():
            return [f"no {HF_SUBDIR}/config.json (model config and tokenizer)"]
        return []
    config_path = actor_dir / FSDP_CONFIG
    if not config_path.is_file():
        nested = actor_dir / "actor"
        hint = f" (pass {nested})" if (nested / FSDP_CONFIG).is_file() else ""
        return [f"no {FSDP_CONFIG}: not a verl FSDP actor checkpoint{hint}"]
    try:
        world_size = int(json.loads(config_path.read_text())["world_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"unreadable {FSDP_CONFIG} (no integer world_size): {exc!r}"]
    problems = [
        f"missing or empty model shard {name}"
        for name in (f"model_world_size_{world_size}_rank_{rank}.pt" for rank in range(world_size))
        if not (actor_dir / name).is_file() or (actor_dir / name).stat().st_size == 0
    ]
    if not (actor_dir / HF_SUBDIR / "config.json").is_file():
        problems.append(f"no {HF_SUBDIR}/config.json (model config and tokenizer)")
    return problems


def find_verl_checkpoints(verl_dir: Path) -> list[tuple[int, Path]]:
    """`(global step, actor dir)` of the complete checkpoints under verl's `default_local_dir`,
    oldest first (the newest is last). A missing directory has none."""
    verl_dir = Path(verl_dir)
    if not verl_dir.is_dir():
        return []
    tracker = verl_dir / TRACKER_FILE
    latest: int | None = None
    if tracker.is_file():
        try:
            latest = int(tracker.read_text().strip())
        except ValueError:
            latest = None
    found = []
    for step_dir in verl_dir.iterdir():
        match = _STEP_DIR.fullmatch(step_dir.name)
        if match is None or not step_dir.is_dir():
            continue
        step = int(match.group(1))
        if latest is not None and step > latest:
            continue  # being written: verl updates the tracker after the whole step is saved
        actor_dir = step_dir / "actor"
        if not checkpoint_problems(actor_dir):
            found.append((step, actor_dir))
    return sorted(found)


def merge_verl_checkpoint(actor_dir: Path, target_dir: Path, *, timeout_s: float = 1800) -> Path:
    """Merge a verl actor checkpoint into a Hugging Face model directory with verl's merger.

    Args:
        actor_dir: `.../global_step_<N>/actor`, as verl's FSDP (or Megatron) checkpoint manager
            wrote it.
        target_dir: the HF directory to create; must not exist or be empty.
        timeout_s: the merger is killed after this long.

    Returns:
        `target_dir`: `config.json`, bf16 `model.safetensors` (or shards and index), tokenizer.

    Raises:
        ValueError: `actor_dir` is missing or partial, or `target_dir` is not empty.
        RuntimeError: the merger failed or timed out (the message ends with its output).
    """
    actor_dir, target_dir = Path(actor_dir).resolve(), Path(target_dir).resolve()
    problems = checkpoint_problems(actor_dir)
    if problems:
        raise ValueError(f"incomplete verl checkpoint {actor_dir}: " + "; ".join(problems))
    if target_dir.exists() and (not target_dir.is_dir() or any(target_dir.iterdir())):
        raise ValueError(f"merge target {target_dir} exists and is not an empty directory")
    target_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target_dir.name}.merging-", dir=target_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would keep other users (an inference server) out
    backend = checkpoint_backend(actor_dir)
    command = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", backend]
    command += ["--local_dir", str(actor_dir), "--target_dir", str(staging)]
    try:
        try:
            result = subprocess.run(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout_s,
                env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(
                f"verl's merger did not finish {actor_dir} in {timeout_s:g}s: {_tail(exc.output)}"
            ) from None
        if result.returncode != 0 or not (staging / "config.json").is_file():
            raise RuntimeError(
                f"verl's merger failed on {actor_dir} (exit {result.returncode}): "
                f"{_tail(result.stdout)}"
            )
        for name in _TOKENIZER_FILES:
            source = actor_dir / HF_SUBDIR / name
            if source.is_file() and not (staging / name).exists():
                shutil.copy2(source, staging / name)
        for path in staging.rglob("*"):  # transformers writes model.safetensors 0600
            path.chmod(0o755 if path.is_dir() else 0o644)
        staging.replace(target_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target_dir


def _tail(output: str | bytes | None, lines: int = 20) -> str:
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    return "\n".join((output or "").strip().splitlines()[-lines:]) or "(no output)"
