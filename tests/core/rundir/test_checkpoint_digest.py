"""A checkpoint's weights are known by their content: the manifest's `model_sha256`."""

import json

import torch

from uni_agent_core.rundir.checkpoint import (
    MANIFEST,
    checkpoint_digest,
    latest_complete,
    policy_weights_digest,
    save_checkpoint,
    weights_digest,
)


class _Weights:
    def __init__(self, fill: float) -> None:
        self.fill = fill

    def save_pretrained(self, path, safe_serialization: bool = True) -> None:
        from safetensors.torch import save_file

        path.mkdir(parents=True, exist_ok=True)
        save_file({"w": torch.full((4,), self.fill)}, str(path / "model.safetensors"))


def _save(directory, fill: float):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    save_checkpoint(directory, 2, model=_Weights(fill), optimizer=optimizer, state={})
    return latest_complete(directory)


def test_the_manifest_holds_the_digest_of_the_model_and_it_follows_the_bytes(tmp_path) -> None:
    first = _save(tmp_path / "a", 1.0)
    stored = json.loads((first.path / MANIFEST).read_text())["model_sha256"]
    assert stored == weights_digest(first.path / "model") == checkpoint_digest(first)
    assert checkpoint_digest(_save(tmp_path / "b", 1.0)) == stored  # same bytes, same digest
    assert checkpoint_digest(_save(tmp_path / "a", 2.0)) != stored  # same name, other weights


def test_a_manifest_without_a_digest_is_hashed_on_demand(tmp_path) -> None:
    checkpoint = _save(tmp_path, 1.0)
    manifest = json.loads((checkpoint.path / MANIFEST).read_text())
    expected = manifest.pop("model_sha256")
    (checkpoint.path / MANIFEST).write_text(json.dumps(manifest))
    assert checkpoint_digest(checkpoint) == expected


def test_only_hf_directories_are_hashed_as_policies(tmp_path) -> None:
    _Weights(3.0).save_pretrained(tmp_path / "policy")
    assert policy_weights_digest(f"hf:{tmp_path / 'policy'}") == weights_digest(tmp_path / "policy")
    assert policy_weights_digest("tiny") is None
