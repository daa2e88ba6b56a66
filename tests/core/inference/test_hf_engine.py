"""HFEngine: exact logprobs, prefix-cache equivalence, batching, weight versions, faults."""

from __future__ import annotations

import asyncio

import pytest
import torch

from uni_agent_core.inference import (
    EngineClosedError,
    EngineStepError,
    FinishReason,
    GenerateRequest,
    HFEngine,
)
from uni_agent_core.inference.consistency import max_abs_diff, teacher_forced_logprobs


def _chat_prompt(tokenizer, text: str) -> list[int]:
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


def _run(coro):
    return asyncio.run(coro)


async def _until_generated(engine: HFEngine, tokens: int) -> None:
    """Wait until the engine has sampled at least `tokens` tokens in total."""
    while engine.generated_tokens < tokens:
        await asyncio.sleep(0.001)


@pytest.mark.parametrize("policy", ["tiny_policy", "smollm2_policy"])
@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
def test_logprobs_equal_teacher_forced_pass(policy, temperature, request) -> None:
    model, tokenizer = request.getfixturevalue(policy)
    prompt = _chat_prompt(tokenizer, "Write a python function that adds two numbers.")

    async def go():
        engine = HFEngine(model, tokenizer)
        try:
            return await engine.generate(
                GenerateRequest(
                    prompt_ids=prompt, max_new_tokens=24, temperature=temperature, seed=3
                )
            )
        finally:
            await engine.close()

    out = _run(go())
    assert len(out.token_ids) > 0
    reference = teacher_forced_logprobs(model, prompt, out.token_ids, temperature or 1.0)
    assert max_abs_diff(out.logprobs, reference) <= 1e-4
    assert out.policy_version == [0] * len(out.token_ids)


@pytest.mark.parametrize("policy", ["tiny_policy", "smollm2_policy"])
def test_prefix_cache_hit_matches_cold_call(policy, request) -> None:
    model, tokenizer = request.getfixturevalue(policy)
    prompt = _chat_prompt(tokenizer, "Name three primary colours and explain each briefly.")

    async def go():
        engine = HFEngine(model, tokenizer)
        cold = await engine.generate(
            GenerateRequest(prompt_ids=prompt, max_new_tokens=20, temperature=0.0)
        )
        # Turn 2 of a conversation: the previous prompt and answer plus a new user message.
        turn2 = (
            prompt
            + cold.token_ids
            + tokenizer(
                "\n<|im_start|>user\nAnd more?<|im_end|>\n<|im_start|>assistant\n",
                add_special_tokens=False,
            )["input_ids"]
        )
        warm1 = await engine.generate(
            GenerateRequest(prompt_ids=prompt, max_new_tokens=20, temperature=0.0)
        )
        warm2 = await engine.generate(
            GenerateRequest(prompt_ids=turn2, max_new_tokens=20, temperature=0.0)
        )
        await engine.close()
        cold_engine = HFEngine(model, tokenizer, prefix_cache_tokens=0)
        cold2 = await cold_engine.generate(
            GenerateRequest(prompt_ids=turn2, max_new_tokens=20, temperature=0.0)
        )
        await cold_engine.close()
        return cold, warm1, warm2, cold2, len(turn2)

    cold, warm1, warm2, cold2, turn2_len = _run(go())
    assert cold.cached_prefix_tokens == 0
    assert warm1.cached_prefix_tokens == len(prompt) - 1
    assert warm1.token_ids == cold.token_ids
    assert max_abs_diff(warm1.logprobs, cold.logprobs) <= 1e-4
    assert warm2.cached_prefix_tokens >= len(prompt) + len(cold.token_ids) - 1
    assert cold2.cached_prefix_tokens == 0
    assert warm2.token_ids == cold2.token_ids
    assert max_abs_diff(warm2.logprobs, cold2.logprobs) <= 1e-4
    assert warm2.prompt_tokens == turn2_len


def test_32_concurrent_requests_complete_with_exact_logprobs(tiny_policy) -> None:
    model, tokenizer = tiny_policy
    base = _chat_prompt(tokenizer, "hello")
    requests = [
        GenerateRequest(
            prompt_ids=base + [100 + i] * (i % 5 + 1), max_new_tokens=8 + i, temperature=1.0, seed=i
        )
        for i in range(32)
    ]

    async def go():
        engine = HFEngine(model, tokenizer, max_batch_size=16)
        outs = await asyncio.gather(*(engine.generate(r) for r in requests))
        stats = engine.stats()
        await engine.close()
        return outs, stats

    outs, stats = _run(go())
    assert len(outs) == 32
    for request, out in zip(requests, outs, strict=True):
        assert out.request_id == request.request_id
        assert len(out.token_ids) == request.max_new_tokens  # random weights: no early EOS
        assert out.finish_reason == FinishReason.LENGTH
        reference = teacher_forced_logprobs(model, request.prompt_ids, out.token_ids)
        assert max_abs_diff(out.logprobs, reference) <= 1e-4
    assert stats.running_requests == 0 and stats.waiting_requests == 0


def test_seeded_sampling_is_the_same_alone_and_in_a_batch(tiny_policy) -> None:
    model, tokenizer = tiny_policy
    prompt = _chat_prompt(tokenizer, "seed test")
    request = GenerateRequest(prompt_ids=prompt, max_new_tokens=12, temperature=1.0, seed=7)

    async def go():
        engine = HFEngine(model, tokenizer, prefix_cache_tokens=0)
        alone = await engine.generate(request.model_copy(update={"request_id": "a"}))
        others = [
            GenerateRequest(prompt_ids=prompt + [5] * i, max_new_tokens=12, seed=100 + i)
            for i in range(1, 6)
        ]
        together = await asyncio.gather(
            engine.generate(request.model_copy(update={"request_id": "b"})),
            *(engine.generate(o) for o in others),
        )
        await engine.close()
        return alone, together[0]

    alone, batched = _run(go())
    assert alone.token_ids == batched.token_ids
    assert max_abs_diff(alone.logprobs, batched.logprobs) <= 1e-4


def test_top_k_one_and_tiny_top_p_are_greedy(tiny_policy) -> None:
    model, tokenizer = tiny_policy
    prompt = _chat_prompt(tokenizer, "truncation")

    async def go():
        engine = HFEngine(model, tokenizer)
        greedy = await engine.generate(
            GenerateRequest(prompt_ids=prompt, max_new_tokens=10, temperature=0)
        )
        top_k = await engine.generate(
            GenerateRequest(prompt_ids=prompt, max_new_tokens=10, top_k=1, seed=1)
        )
        top_p = await engine.generate(
            GenerateRequest(prompt_ids=prompt, max_new_tokens=10, top_p=1e-6, seed=2)
        )
        await engine.close()
        return greedy, top_k, top_p

    greedy, top_k, top_p = _run(go())
    assert top_k.token_ids == greedy.token_ids
    assert top_p.token_ids == greedy.token_ids


def test_stop_tokens_and_length_limits(tiny_policy) -> None:
    model, tokenizer = tiny_policy
    prompt = _chat_prompt(tokenizer, "stops")

    async def go():
        engine = HFEngine(model, tokenizer, max_model_len=len(prompt) + 6)
        free = await engine.generate(
            GenerateRequest(prompt_ids=prompt, max_new_tokens=4, temperature=0)
        )
        stop_on = free.token_ids[1]
        stopped = await engine.generate(
            GenerateRequest(
                prompt_ids=prompt, max_new_tokens=4, temperature=0, stop_token_ids=[stop_on]
            )
        )
        window = await engine.generate(
            GenerateRequest(prompt_ids=prompt, max_new_tokens=50, temperature=0)
        )
        with pytest.raises(ValueError, match="context window"):
            await engine.generate(GenerateRequest(prompt_ids=prompt + [1] * 6, max_new_tokens=1))
        await engine.close()
        return free, stopped, window

    free, stopped, window = _run(go())
    assert free.finish_reason == FinishReason.LENGTH and len(free.token_ids) == 4
    first_stop = free.token_ids.index(free.token_ids[1])
    assert stopped.finish_reason == FinishReason.STOP
    assert stopped.token_ids == free.token_ids[: first_stop + 1]  # the stop token is kept
    assert window.finish_reason == FinishReason.LENGTH and len(window.token_ids) == 6


def _perturbed(model) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    return {
        name: tensor + 0.05 * torch.randn(tensor.shape, generator=generator)
        for name, tensor in model.state_dict().items()
    }


def test_weight_update_mid_generation_resumes_on_new_weights() -> None:
    from uni_agent_core.models import load_policy

    model, tokenizer = load_policy("tiny")  # its own copy: the weights change here
    reference_model, _ = load_policy("tiny")
    new_state = _perturbed(model)
    reference_model.load_state_dict(new_state)
    prompt = _chat_prompt(tokenizer, "partial rollout")

    async def go():
        engine = HFEngine(model, tokenizer)
        task = asyncio.create_task(
            engine.generate(
                GenerateRequest(prompt_ids=prompt, max_new_tokens=40, temperature=1.0, seed=5)
            )
        )
        await _until_generated(engine, 10)
        await engine.update_weights(new_state, version=1)
        out = await task
        stats = engine.stats()
        await engine.close()
        return out, stats

    out, stats = _run(go())
    assert out.finish_reason == FinishReason.LENGTH and len(out.token_ids) == 40
    switch = out.policy_version.index(1)
    assert 10 <= switch < 40
    assert out.policy_version == [0] * switch + [1] * (40 - switch)
    assert stats.policy_version == 1
    # Tokens sampled after the update have the new policy's logprobs, computed over the
    # prompt plus the tokens generated before the switch (re-prefilled, not re-tokenized).
    reference = teacher_forced_logprobs(reference_model, prompt, out.token_ids)
    assert max_abs_diff(out.logprobs[switch:], reference[switch:]) <= 1e-4
    assert max_abs_diff(out.logprobs[:switch], reference[:switch]) > 1e-3


def test_update_weights_rejects_a_mismatched_state(tiny_policy) -> None:
    model, tokenizer = tiny_policy

    async def go():
        engine = HFEngine(model, tokenizer)
        with pytest.raises(ValueError, match="does not match"):
            await engine.update_weights({"nonsense.weight": torch.zeros(1)}, version=3)
        await engine.close()

    _run(go())


def test_pause_abort_returns_partial_outputs_and_keep_resumes(tiny_policy) -> None:
    model, tokenizer = tiny_policy
    prompt = _chat_prompt(tokenizer, "pause")

    async def go():
        engine = HFEngine(model, tokenizer)
        kept = asyncio.create_task(
            engine.generate(GenerateRequest(prompt_ids=prompt, max_new_tokens=30, seed=1))
        )
        await _until_generated(engine, 5)
        await engine.pause()
        held_at = engine.generated_tokens
        await asyncio.sleep(0.05)
        assert engine.generated_tokens == held_at and not kept.done()
        await engine.resume()
        kept_out = await kept
        aborted = asyncio.create_task(
            engine.generate(GenerateRequest(prompt_ids=prompt, max_new_tokens=30, seed=2))
        )
        await _until_generated(engine, held_at + 30 + 3)
        await engine.pause(mode="abort")
        aborted_out = await aborted
        await engine.resume()
        await engine.close()
        return kept_out, aborted_out

    kept_out, aborted_out = _run(go())
    assert kept_out.finish_reason == FinishReason.LENGTH and len(kept_out.token_ids) == 30
    assert aborted_out.finish_reason == FinishReason.ABORT
    assert 0 < len(aborted_out.token_ids) < 30
    assert len(aborted_out.logprobs) == len(aborted_out.token_ids)


def test_cancelled_request_leaves_the_engine_serving(tiny_policy) -> None:
    model, tokenizer = tiny_policy
    prompt = _chat_prompt(tokenizer, "cancel")

    async def go():
        engine = HFEngine(model, tokenizer)
        # ignore_eos: a sampled EOS must not finish the doomed request before it is cancelled
        doomed = asyncio.create_task(
            engine.generate(GenerateRequest(prompt_ids=prompt, max_new_tokens=200, ignore_eos=True))
        )
        survivor = asyncio.create_task(
            engine.generate(GenerateRequest(prompt_ids=prompt, max_new_tokens=20))
        )
        await _until_generated(engine, 6)
        assert not doomed.done()
        doomed.cancel()
        out = await survivor
        with pytest.raises(asyncio.CancelledError):
            await doomed
        await asyncio.sleep(0.02)
        stats = engine.stats()
        await engine.close()
        return out, stats

    out, stats = _run(go())
    assert len(out.token_ids) == 20
    assert stats.running_requests == 0


class _FlakyDecoder(torch.nn.Module):
    """Wraps a decoder and raises on chosen forward calls."""

    def __init__(self, inner, fail_calls: set[int]):
        super().__init__()
        self.inner = inner
        self.fail_calls = fail_calls
        self.calls = 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        if self.calls in self.fail_calls:
            raise RuntimeError("injected failure")
        return self.inner(*args, **kwargs)


class _FlakyModel(torch.nn.Module):
    """A causal LM whose decoder raises on chosen forward calls (the engine runs the decoder,
    then the head)."""

    def __init__(self, inner, fail_calls: set[int]):
        super().__init__()
        self.inner = inner
        self.config = inner.config
        self.generation_config = inner.generation_config
        self.flaky = _FlakyDecoder(inner.base_model, fail_calls)

    @property
    def base_model(self):
        return self.flaky

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()


def test_model_failure_fails_that_step_and_engine_recovers(tiny_policy) -> None:
    model, tokenizer = tiny_policy
    prompt = _chat_prompt(tokenizer, "faults")

    async def go():
        engine = HFEngine(_FlakyModel(model, fail_calls={3}), tokenizer)
        with pytest.raises(EngineStepError, match="injected failure"):
            await engine.generate(GenerateRequest(prompt_ids=prompt, max_new_tokens=10))
        out = await engine.generate(GenerateRequest(prompt_ids=prompt, max_new_tokens=5))
        await engine.close()
        with pytest.raises(EngineClosedError):
            await engine.generate(GenerateRequest(prompt_ids=prompt, max_new_tokens=5))
        return out

    assert len(_run(go()).token_ids) == 5


def test_close_aborts_pending_requests(tiny_policy) -> None:
    model, tokenizer = tiny_policy
    prompt = _chat_prompt(tokenizer, "close")

    async def go():
        engine = HFEngine(model, tokenizer, max_batch_size=1)
        tasks = [
            asyncio.create_task(
                engine.generate(GenerateRequest(prompt_ids=prompt, max_new_tokens=500))
            )
            for _ in range(3)
        ]
        await _until_generated(engine, 3)
        await engine.close()
        return await asyncio.gather(*tasks)

    outs = _run(go())
    assert all(o.finish_reason == FinishReason.ABORT for o in outs)


def test_streaming_yields_tokens_as_they_are_sampled(tiny_policy) -> None:
    model, tokenizer = tiny_policy
    prompt = _chat_prompt(tokenizer, "stream")

    async def go():
        engine = HFEngine(model, tokenizer)
        chunks, final = [], None
        async for item in engine.generate_stream(
            GenerateRequest(prompt_ids=prompt, max_new_tokens=12, seed=4)
        ):
            if isinstance(item, list):
                chunks.append(item)
            else:
                final = item
        plain = await engine.generate(GenerateRequest(prompt_ids=prompt, max_new_tokens=12, seed=4))
        await engine.close()
        return chunks, final, plain

    chunks, final, plain = _run(go())
    assert len(chunks) >= 6  # one chunk per scheduler step, not one at the end
    assert [t for chunk in chunks for t in chunk] == final.token_ids == plain.token_ids
