"""Checkpoints: manifest last, incomplete ones never picked, pruning, full state round trip."""

import json
import random

import numpy as np
import torch

from uni_agent_core.curriculum.task_sampler import EpochSampler
from uni_agent_core.rundir.checkpoint import (
    MANIFEST,
    latest_complete,
    list_complete,
    prune,
    restore_checkpoint,
    save_checkpoint,
)


def _Model():  # noqa: N802 - a fresh tiny policy, as the trainer checkpoints it
    from uni_agent_core.models import load_policy

    return load_policy("tiny")[0]


def _save(tmp_path, step, model, optimizer):
    return save_checkpoint(
        tmp_path,
        step,
        model=model,
        optimizer=optimizer,
        state={"version": step, "sampler": {"epoch": 0, "position": step}},
    )


def test_round_trip_of_model_optimizer_rng_and_state(tmp_path) -> None:
    model = _Model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    random.seed(3)
    torch.manual_seed(3)
    np.random.seed(3)
    path = _save(tmp_path, 3, model, optimizer)
    expected = (random.random(), torch.rand(1).item(), np.random.rand())
    saved = {k: v.clone() for k, v in model.state_dict().items()}

    other = _Model()
    other_optimizer = torch.optim.AdamW(other.parameters(), lr=0.1)
    checkpoint = latest_complete(tmp_path)
    assert checkpoint is not None and checkpoint.path == path and checkpoint.step == 3
    restore_checkpoint(checkpoint, model=other, optimizer=other_optimizer)
    assert all(torch.equal(other.state_dict()[k], saved[k]) for k in saved)
    assert other_optimizer.state_dict()["state"][0]["step"] == 1
    assert (random.random(), torch.rand(1).item(), np.random.rand()) == expected
    assert checkpoint.state["sampler"] == {"epoch": 0, "position": 3}


def test_a_checkpoint_without_manifest_or_with_a_torn_file_is_never_picked(tmp_path) -> None:
    model = _Model()
    optimizer = torch.optim.AdamW(model.parameters())
    _save(tmp_path, 1, model, optimizer)
    second = _save(tmp_path, 2, model, optimizer)
    (second / MANIFEST).unlink()  # killed while saving
    assert latest_complete(tmp_path).step == 1
    third = _save(tmp_path, 3, model, optimizer)
    with (third / "optimizer.pt").open("ab") as handle:
        handle.write(b"torn")
    assert latest_complete(tmp_path).step == 1
    manifest = json.loads((tmp_path / "step-000001" / MANIFEST).read_text())
    assert "state.json" in manifest["files"] and "model/model.safetensors" in manifest["files"]


def test_prune_keeps_the_newest_complete(tmp_path) -> None:
    model = _Model()
    optimizer = torch.optim.AdamW(model.parameters())
    for step in (1, 2, 3, 4):
        _save(tmp_path, step, model, optimizer)
    (tmp_path / "step-000002" / MANIFEST).unlink()
    prune(tmp_path, keep=2)
    assert [c.step for c in list_complete(tmp_path)] == [3, 4]
    assert not (tmp_path / "step-000002").exists()


def test_epoch_sampler_resumes_exactly() -> None:
    ids = [f"t{i}" for i in range(5)]
    first = EpochSampler(ids, seed=7)
    drawn = [first.next_task() for _ in range(7)]
    assert sorted(drawn[:5]) == sorted(ids)
    state = first.state_dict()
    upcoming = [first.next_task() for _ in range(6)]
    again = EpochSampler(ids, seed=7)
    again.load_state_dict(state)
    assert [again.next_task() for _ in range(6)] == upcoming
