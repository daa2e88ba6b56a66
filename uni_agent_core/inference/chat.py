"""`agent-rl chat`: one chat turn with a policy through `HFEngine`, printed with its figures."""

from __future__ import annotations

import asyncio
import time

from uni_agent_core.inference.hf_engine import HFEngine
from uni_agent_core.inference.types import GenerateRequest


async def _chat(model: str, prompt: str, max_new_tokens: int, temperature: float) -> str:
    engine = HFEngine.from_policy(model)
    try:
        prompt_ids = engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        prompt_ids = engine.tokenizer(prompt_ids, add_special_tokens=False)["input_ids"]
        start = time.perf_counter()
        out = await engine.generate(
            GenerateRequest(
                prompt_ids=prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature
            )
        )
        elapsed = time.perf_counter() - start
    finally:
        await engine.close()
    text = engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    print(text)
    mean_lp = sum(out.logprobs) / max(1, len(out.logprobs))
    print(
        f"[{model}] {len(prompt_ids)} prompt tokens, {len(out.token_ids)} sampled "
        f"({out.finish_reason}), {len(out.token_ids) / elapsed:.1f} tok/s, "
        f"mean logprob {mean_lp:.3f}, policy version {out.policy_version[-1]}"
    )
    return text


def chat_once(model: str, prompt: str, max_new_tokens: int = 64, temperature: float = 0.0) -> int:
    """Run one chat turn and print the reply; returns a process exit code."""
    asyncio.run(_chat(model, prompt, max_new_tokens, temperature))
    return 0
