"""Checkpoints: model, optimizer, RNG, data cursor and curriculum state, manifest written last.

A checkpoint is a directory `step-<NNNNNN>/` holding `model/` (safetensors, loadable with
`from_pretrained`), `optimizer.pt`, `rng.pt` and `state.json`; `manifest.json` lists every file
with its size and the sha256 of `model/` (`weights_digest`), and is written last (atomically), so
a directory without a manifest — a run killed while saving — is never taken for a checkpoint.
Stages that reuse work done with a checkpoint (evaluations) key it on that digest, never on the
directory's name: a retrained `step-000002` is other weights. `latest_complete` returns the
newest directory whose manifest and files agree; `prune` keeps the newest N complete ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from uni_agent_core.errors import UserError

MANIFEST = "manifest.json"
_PREFIX = "step-"


class CheckpointNotFoundError(UserError, ValueError):
    """No complete checkpoint where one was asked for (`latest`, or a named directory)."""


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint on disk."""

    path: Path
    step: int
    state: dict[str, Any]
    """`state.json`: step, policy version, sampler cursor, pending tasks, curriculum."""


def weights_digest(directory: Path) -> str:
    """The sha256 of a model directory's content: every file's relative name and bytes, in name
    order (reads the weights once: seconds per GB)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + b"\0")
        with path.open("rb") as handle:
            while block := handle.read(1 << 22):
                digest.update(block)
    return digest.hexdigest()


def policy_weights_digest(policy: str) -> str | None:
    """The `weights_digest` of an `hf:<dir>` policy (a warm start rewrites the same directory);
    None for a built policy (`tiny`, `smollm2-135m`), whose name fixes its weights."""
    if not policy.startswith("hf:"):
        return None
    directory = Path(policy.removeprefix("hf:")).expanduser()
    return weights_digest(directory) if directory.is_dir() else None


def checkpoint_digest(checkpoint: Checkpoint) -> str:
    """The digest of a checkpoint's `model/`: the one its manifest stored at save time, or (a
    checkpoint saved before manifests held one) computed now."""
    manifest = json.loads((checkpoint.path / MANIFEST).read_text())
    return manifest.get("model_sha256") or weights_digest(checkpoint.path / "model")


def _files(root: Path) -> dict[str, int]:
    return {
        str(path.relative_to(root)): path.stat().st_size
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }


def save_checkpoint(
    directory: Path,
    step: int,
    *,
    model: Any,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
) -> Path:
    """Write checkpoint `step` under `directory`; returns its path.

    Args:
        directory: the run's checkpoint directory.
        step: training steps completed.
        model: the trained model (`save_pretrained`).
        optimizer: its optimizer.
        state: JSON-serialisable run state (version, sampler cursor, curriculum, ...).
    """
    target = directory / f"{_PREFIX}{step:06d}"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    model.save_pretrained(target / "model", safe_serialization=True)
    torch.save(optimizer.state_dict(), target / "optimizer.pt")
    rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    torch.save(rng, target / "rng.pt")
    (target / "state.json").write_text(json.dumps({"step": step, **state}, indent=2))
    manifest = {
        "step": step,
        "files": _files(target),
        "model_sha256": weights_digest(target / "model"),
    }
    scratch = target / (MANIFEST + ".tmp")
    scratch.write_text(json.dumps(manifest, indent=2))
    os.replace(scratch, target / MANIFEST)
    return target


def _complete(path: Path) -> dict[str, Any] | None:
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        return None
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError:
        return None
    for name, size in manifest.get("files", {}).items():
        file = path / name
        if not file.is_file() or file.stat().st_size != size:
            return None
    return manifest


def list_complete(directory: Path) -> list[Checkpoint]:
    """Complete checkpoints under `directory`, oldest first."""
    found: list[Checkpoint] = []
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob(f"{_PREFIX}*")):
        manifest = _complete(path)
        if manifest is not None:
            state = json.loads((path / "state.json").read_text())
            found.append(Checkpoint(path=path, step=int(manifest["step"]), state=state))
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def latest_complete(directory: Path) -> Checkpoint | None:
    """The newest complete checkpoint, or None."""
    complete = list_complete(directory)
    return complete[-1] if complete else None


def restore_checkpoint(
    checkpoint: Checkpoint, *, model: Any, optimizer: torch.optim.Optimizer
) -> None:
    """Load the model weights, optimizer state and RNG states of `checkpoint`."""
    from uni_agent_core.inference.weights import load_weights

    load_weights(model, checkpoint.path / "model")
    optimizer.load_state_dict(torch.load(checkpoint.path / "optimizer.pt", weights_only=False))
    rng = torch.load(checkpoint.path / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])


def prune(directory: Path, keep: int | None) -> list[Path]:
    """Delete all but the newest `keep` complete checkpoints, and incomplete ones older than the
    newest complete one; returns what was deleted."""
    complete = list_complete(directory)
    if not complete:
        return []
    newest = complete[-1].step
    doomed = [c.path for c in complete[: -keep or None]] if keep else []
    kept = {c.path for c in complete}
    for path in directory.glob(f"{_PREFIX}*"):
        if path not in kept and int(path.name.removeprefix(_PREFIX)) < newest:
            doomed.append(path)
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed
