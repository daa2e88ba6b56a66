"""HFEngine on a CUDA device (skipped on machines without one)."""

from __future__ import annotations

import asyncio

import pytest

from uni_agent_core.inference import GenerateRequest, HFEngine
from uni_agent_core.inference.consistency import max_abs_diff, teacher_forced_logprobs


@pytest.mark.gpu
def test_cuda_engine_logprobs_match_teacher_forcing() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    engine = HFEngine.from_policy("tiny", device="cuda")
    prompt = engine.tokenizer("Fix the failing test in utils.py", add_special_tokens=False)[
        "input_ids"
    ]
    requests = [
        GenerateRequest(prompt_ids=prompt + [i + 5], max_new_tokens=16, seed=i) for i in range(8)
    ]

    async def go():
        try:
            return await asyncio.gather(*(engine.generate(r) for r in requests))
        finally:
            await engine.close()

    for request, out in zip(requests, asyncio.run(go()), strict=True):
        reference = teacher_forced_logprobs(engine.model, request.prompt_ids, out.token_ids)
        assert max_abs_diff(out.logprobs, reference) <= 1e-4
