"""The `tiny` policy: a few-million-parameter Qwen2 model with a locally trained tokenizer.

Built offline and deterministically: a byte-level BPE tokenizer is trained with `tokenizers` on a
corpus bundled with the package (a fixed selection of CPython standard-library sources), and a
Qwen2-architecture model is initialised from a fixed seed. The weights are random — the model
exists so that every part of the stack (gateway, harnesses, trainer) can run end to end on a CPU
in seconds, with real tokenization and real chat-template boundaries.
"""

from __future__ import annotations

import gzip
from importlib import resources
from pathlib import Path

from uni_agent_core.models.chat_template import chatml_tool_template

TINY_VOCAB_SIZE = 4096
TINY_SEED = 0
CHATML_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Tags the chat template and tool parsers use. Added as single (non-special) tokens so decoding
# keeps them in the text, as Qwen's tokenizers do.
TOOL_TAG_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]


def _corpus_lines() -> list[str]:
    data = resources.files("uni_agent_core.models").joinpath("assets/tiny_corpus.txt.gz")
    text = gzip.decompress(data.read_bytes()).decode("utf-8")
    return text.splitlines(keepends=True)


def build_tiny_tokenizer():
    """Train the byte-level BPE tokenizer of `tiny` (deterministic) and wrap it for transformers.

    Returns:
        A `transformers` fast tokenizer with ChatML specials, tool-call tags and the chat template.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB_SIZE - len(TOOL_TAG_TOKENS),
        min_frequency=2,
        special_tokens=CHATML_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus_lines(), trainer=trainer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TAG_TOKENS])

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    fast.chat_template = chatml_tool_template()
    return fast


def build_tiny_model(tokenizer):
    """Initialise the `tiny` Qwen2 model from a fixed seed (about 4M parameters)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        initializer_range=0.02,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    # The seed is set on a private generator state so building never perturbs the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False
    )
    return model.eval()


def build_tiny(target: Path) -> None:
    """Build the tokenizer and model of `tiny` and save them as an HF directory at `target`."""
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    tokenizer.save_pretrained(target)
    model.save_pretrained(target, safe_serialization=True)
