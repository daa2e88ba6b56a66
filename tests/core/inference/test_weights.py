"""load_weights: state dicts and save_pretrained directories, with name checks."""

from __future__ import annotations

import pytest
import torch

from uni_agent_core.inference.weights import load_weights
from uni_agent_core.models import load_policy


def test_weights_round_trip_through_a_saved_directory(tmp_path) -> None:
    source, _ = load_policy("tiny")
    target, _ = load_policy("tiny")
    with torch.no_grad():
        for parameter in source.parameters():
            parameter.add_(0.01)
    source.save_pretrained(tmp_path, safe_serialization=True)
    load_weights(target, tmp_path)
    for (name, a), (_, b) in zip(
        source.state_dict().items(), target.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_mismatched_or_missing_weights_are_rejected(tmp_path) -> None:
    model, _ = load_policy("tiny")
    state = dict(model.state_dict())
    state.pop("model.norm.weight")
    with pytest.raises(ValueError, match="model.norm.weight"):
        load_weights(model, state)
    with pytest.raises(FileNotFoundError, match="safetensors"):
        load_weights(model, tmp_path)
