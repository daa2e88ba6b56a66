"""Policy loading: the tiny build, smollm2 conversion, hf:<dir>, chat template properties."""

from __future__ import annotations

import json

import pytest
import torch

from uni_agent_core.models import (
    PolicyUnavailableError,
    load_policy,
    prepare_policy,
    resolve_policy,
)
from uni_agent_core.models.tiny import TOOL_TAG_TOKENS, build_tiny_model, build_tiny_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "shell",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "List the files."},
    {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "shell", "arguments": {"cmd": "ls"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "shell", "arguments": '{"cmd": "cat a.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "content": "print(1)"},
    {"role": "assistant", "content": "Done."},
    {"role": "user", "content": "Thanks!"},
]


def test_tiny_build_is_deterministic() -> None:
    first, second = build_tiny_tokenizer(), build_tiny_tokenizer()
    assert first.get_vocab() == second.get_vocab()
    assert len(first) == 4096
    model_a, model_b = build_tiny_model(first), build_tiny_model(second)
    for (name, a), (_, b) in zip(
        model_a.state_dict().items(), model_b.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    params = sum(p.numel() for p in model_a.parameters())
    assert 1_000_000 < params < 10_000_000


def test_tiny_tokenizer_keeps_chatml_and_tool_tags_as_single_tokens() -> None:
    _, tokenizer = load_policy("tiny")
    for token in ["<|im_start|>", "<|im_end|>", "<|endoftext|>", *TOOL_TAG_TOKENS]:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, token
    assert tokenizer.eos_token == "<|im_end|>"
    # Tool tags survive decoding with special tokens skipped (parsers read them from text).
    ids = tokenizer("<tool_call>x</tool_call>", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call>"


@pytest.mark.parametrize("name", ["tiny", "smollm2-135m"])
def test_chat_template_renders_tools_and_is_prefix_stable(name: str) -> None:
    _, tokenizer = load_policy(name)
    full = tokenizer.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    assert '<tools>\n{"type": "function"' in full
    assert '<tool_call>\n{"name": "shell", "arguments": {"cmd": "ls"}}\n</tool_call>' in full
    assert '{"name": "shell", "arguments": {"cmd": "cat a.py"}}' in full
    assert "<tool_response>\nprint(1)\n</tool_response><|im_end|>\n" in full
    for k in range(1, len(CONVERSATION)):
        prefix = tokenizer.apply_chat_template(CONVERSATION[:k], tools=TOOLS, tokenize=False)
        assert full.startswith(prefix), f"render of the first {k} messages is not a prefix"
    with_prompt = tokenizer.apply_chat_template(
        CONVERSATION, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert with_prompt == full + "<|im_start|>assistant\n"


def test_encoding_adds_no_bos() -> None:
    for name in ["tiny", "smollm2-135m"]:
        _, tokenizer = load_policy(name)
        assert (
            tokenizer("hi", add_special_tokens=True)["input_ids"]
            == tokenizer("hi", add_special_tokens=False)["input_ids"]
        )


def test_smollm2_answers_paris_greedily() -> None:
    model, tokenizer = load_policy("smollm2-135m")
    assert next(model.parameters()).dtype == torch.float32
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20)
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer


def test_hf_directory_policy_loads_in_place(tmp_path) -> None:
    tiny_dir = prepare_policy("tiny")
    model, tokenizer = load_policy(f"hf:{tiny_dir}")
    assert model.config.model_type == "qwen2"
    assert tokenizer.chat_template
    with pytest.raises(PolicyUnavailableError, match="no config.json"):
        prepare_policy(f"hf:{tmp_path}")


def test_unknown_policy_names_the_choices() -> None:
    with pytest.raises(ValueError, match="tiny, smollm2-135m, hf:<dir>"):
        resolve_policy("gpt-5")
    with pytest.raises(ValueError, match="needs a directory"):
        resolve_policy("hf:")


def test_prepare_builds_once_into_the_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENT_RL_CACHE", str(tmp_path))
    path = prepare_policy("tiny")
    assert path == tmp_path / "models" / "tiny"
    marker = path / ".agent-rl-complete"
    stamp = marker.stat().st_mtime_ns
    assert prepare_policy("tiny") == path
    assert marker.stat().st_mtime_ns == stamp, "a complete cached build must not be rebuilt"
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    assert not [p for p in tmp_path.joinpath("models").iterdir() if p.name.startswith(".tiny-")]
