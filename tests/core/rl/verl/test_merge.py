"""verl FSDP checkpoints to HF directories: a checkpoint written by verl's own checkpoint manager
(tiny, FSDP2 on a CPU) merged by verl's own merger gives the source model's logits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("verl")

import torch  # noqa: E402
from support.verl_checkpoint import write_verl_fsdp_checkpoint  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from uni_agent_core.models import load_policy  # noqa: E402
from uni_agent_core.rl.verl.merge import find_verl_checkpoints, merge_verl_checkpoint  # noqa: E402

SHARD = "model_world_size_1_rank_0.pt"
# verl lists the engines it could not import (torchtitan, veomni, megatron, ...) on first use.
pytestmark = pytest.mark.filterwarnings("ignore:.* engine is not available:UserWarning")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """verl's `default_local_dir` with step 1 of tiny (weights moved off the stock ones), and
    the source weights rounded to bf16, the dtype verl's merger writes."""
    model, tokenizer = load_policy("tiny")
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.02 * torch.randn(parameter.shape, generator=generator))
    source = {k: v.detach().to(torch.bfloat16).float() for k, v in model.state_dict().items()}
    verl_dir = tmp_path_factory.mktemp("verl") / "checkpoints"
    write_verl_fsdp_checkpoint(model, tokenizer, verl_dir, step=1)
    return verl_dir, source


def test_merged_checkpoint_gives_the_source_logits(checkpoint, tmp_path):
    verl_dir, source = checkpoint
    actor_dir = verl_dir / "global_step_1" / "actor"
    assert find_verl_checkpoints(verl_dir) == [(1, actor_dir)]

    hf_dir = merge_verl_checkpoint(actor_dir, tmp_path / "hf")

    assert hf_dir == (tmp_path / "hf").resolve()
    assert json.loads((hf_dir / "config.json").read_text())["dtype"] == "bfloat16"
    merged = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    reference, tokenizer = load_policy("tiny")
    reference.load_state_dict(source)
    merged_tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    text = "def add(a, b):\n    return a + b\n"
    assert merged_tokenizer(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert merged_tokenizer.chat_template == tokenizer.chat_template
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        merged_logits, source_logits = merged(ids).logits, reference(ids).logits
    torch.testing.assert_close(merged_logits, source_logits, rtol=0, atol=0)


def test_partial_and_unfinished_checkpoints_are_refused(checkpoint, tmp_path):
    verl_dir, _ = checkpoint
    step_1 = verl_dir / "global_step_1"
    local = tmp_path / "checkpoints"
    shutil.copytree(step_1, local / "global_step_1")
    shutil.copytree(step_1, local / "global_step_2", ignore=shutil.ignore_patterns(SHARD))
    shutil.copytree(step_1, local / "global_step_3")  # newer than the tracker: still being saved
    (local / "latest_checkpointed_iteration.txt").write_text("2")

    assert find_verl_checkpoints(local) == [(1, local / "global_step_1" / "actor")]
    assert find_verl_checkpoints(tmp_path / "absent") == []
    with pytest.raises(ValueError, match=f"missing or empty model shard {SHARD}"):
        merge_verl_checkpoint(local / "global_step_2" / "actor", tmp_path / "hf")
    with pytest.raises(ValueError, match=r"not a verl FSDP actor checkpoint \(pass .*actor\)"):
        merge_verl_checkpoint(local / "global_step_1", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_a_megatron_checkpoint_goes_to_verls_megatron_merger(tmp_path, monkeypatch) -> None:
    """verl's Megatron merger needs megatron-core (GPU nodes): here only the choice of backend
    and the completeness check are exercised; the child process is a recorder."""
    import subprocess

    from uni_agent_core.rl.verl import merge

    actor = tmp_path / "global_step_4" / "actor"
    (actor / "model" / "dist_ckpt").mkdir(parents=True)
    assert merge.checkpoint_problems(actor) == [
        "no huggingface/config.json (model config and tokenizer)"
    ]
    (actor / "huggingface").mkdir()
    (actor / "huggingface" / "config.json").write_text("{}")
    assert merge.checkpoint_backend(actor) == "megatron" and merge.checkpoint_problems(actor) == []
    commands = []

    def recorder(command, **kwargs):
        commands.append(command)
        target = Path(command[command.index("--target_dir") + 1])
        (target / "config.json").write_text("{}")
        return subprocess.CompletedProcess(command, 0, stdout="")

    monkeypatch.setattr(merge.subprocess, "run", recorder)
    merge.merge_verl_checkpoint(actor, tmp_path / "merged")
    assert commands[0][commands[0].index("--backend") + 1] == "megatron"
