"""Mixed precision: bf16 compute on a copy, float32 master weights and optimizer state, and a
bf16 trainer whose logprobs agree with a bf16 engine's."""

import asyncio
import copy

import pytest
import torch

from uni_agent_core.config.training import TrainerConfig
from uni_agent_core.inference import GenerateRequest, HFEngine
from uni_agent_core.models import load_policy
from uni_agent_core.rl.precision import ComputeCopy
from uni_agent_core.rl.trainer import EmbeddedTrainer
from uni_agent_core.rundir.checkpoint import latest_complete, restore_checkpoint, save_checkpoint
from uni_agent_core.types import ExitReason, RolloutResult, Trajectory


@pytest.fixture(scope="module")
def tiny():
    model, _ = load_policy("tiny")
    return model


def _config() -> TrainerConfig:
    return TrainerConfig(
        mode="sync",
        lr=1e-3,
        group_size=2,
        batch_size=2,
        max_response_tokens=256,
        max_context_tokens=512,
    )


def test_float32_computes_on_the_master_itself(tiny) -> None:
    model = copy.deepcopy(tiny)
    precision = ComputeCopy(model, "float32")
    assert precision.model is model and not precision.mixed


def test_a_bf16_copy_keeps_float32_master_weights_and_optimizer_state(tiny) -> None:
    trainer = EmbeddedTrainer(
        copy.deepcopy(tiny), _config(), pad_token_id=0, compute_dtype="bfloat16"
    )
    assert trainer.compute_model is not trainer.model
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    assert {p.dtype for p in trainer.compute_model.parameters()} == {torch.bfloat16}
    assert {t.dtype for t in trainer.engine_state().values()} == {torch.bfloat16}
    # the copy's gradients land, in float32, on the master
    ids = torch.randint(5, 4000, (1, 12))
    trainer.compute_model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
    trainer.precision.grads_to_master()
    master_grads = [p.grad for p in trainer.model.parameters()]
    assert all(g is not None and g.dtype == torch.float32 for g in master_grads)
    assert all(p.grad is None for p in trainer.compute_model.parameters())
    trainer.optimizer.step()
    state = trainer.optimizer.state[next(iter(trainer.model.parameters()))]
    assert state["exp_avg"].dtype == torch.float32
    # the step's new master weights reach the copy, rounded to bf16
    trainer.precision.refresh()
    for master, compute in zip(
        trainer.model.parameters(), trainer.compute_model.parameters(), strict=True
    ):
        assert torch.equal(compute, master.to(torch.bfloat16))


def test_a_restored_checkpoint_reaches_the_compute_copy(tiny, tmp_path) -> None:
    trained = EmbeddedTrainer(
        copy.deepcopy(tiny), _config(), pad_token_id=0, compute_dtype="bfloat16"
    )
    with torch.no_grad():
        for p in trained.model.parameters():
            p.add_(0.01)
    save_checkpoint(tmp_path, 1, model=trained.model, optimizer=trained.optimizer, state={})
    fresh = EmbeddedTrainer(
        copy.deepcopy(tiny), _config(), pad_token_id=0, compute_dtype="bfloat16"
    )
    checkpoint = latest_complete(tmp_path)
    assert checkpoint is not None
    restore_checkpoint(checkpoint, model=fresh.model, optimizer=fresh.optimizer)
    fresh.weights_restored()
    for saved, compute in zip(
        trained.model.parameters(), fresh.compute_model.parameters(), strict=True
    ):
        assert torch.equal(compute, saved.detach().to(torch.bfloat16))


async def _sample(engine: HFEngine, prompts: list[list[int]]) -> list:
    try:
        return await asyncio.gather(
            *(
                engine.generate(
                    GenerateRequest(prompt_ids=p, max_new_tokens=24, temperature=1.0, seed=i)
                )
                for i, p in enumerate(prompts)
            )
        )
    finally:
        await engine.close()


@pytest.mark.slow
def test_a_bf16_step_agrees_with_a_bf16_engine() -> None:
    """Episodes sampled by a bf16 engine (concurrently: batched, KV-cached kernels) and trained
    by the bf16 trainer: logprob Pearson >= 0.999, and the TIS metrics say how far apart."""
    model, tokenizer = load_policy("smollm2-135m")
    trainer = EmbeddedTrainer(model, _config(), pad_token_id=0, compute_dtype="bfloat16")
    engine = HFEngine(copy.deepcopy(trainer.compute_model), tokenizer, max_batch_size=4)
    statements = ["Fix the off-by-one in range(n).", "Rename the helper to parse_line."]
    prompts = [
        tokenizer(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
            ),
            add_special_tokens=False,
        )["input_ids"]
        for text in statements
        for _ in range(2)
    ]
    outputs = asyncio.run(_sample(engine, prompts))
    results = []
    for index, (prompt, out) in enumerate(zip(prompts, outputs, strict=True)):
        sampled = list(out.token_ids)
        trajectory = Trajectory(
            session_id=f"s{index}",
            chain_id=0,
            prompt_ids=list(prompt),
            response_ids=sampled,
            loss_mask=[1] * len(sampled),
            logprobs=list(out.logprobs),
            policy_versions=[0] * len(sampled),
        )
        results.append(
            RolloutResult(
                task_id=f"t{index // 2}",
                sample_index=index % 2,
                reward=float(index % 2),
                exit_reason=ExitReason.SUBMITTED,
                trajectories=[trajectory],
                turns=1,
            )
        )
    outcome = trainer.train_step(results)
    assert outcome.updated
    metrics = outcome.metrics
    assert metrics["train/consistency_tokens"] == sum(len(o.token_ids) for o in outputs)
    assert metrics["train/logprob_pearson"] >= 0.999
    assert 0.9 <= metrics["train/tis_weight_mean"] <= 1.1
    assert metrics["train/tis_clipped_frac"] <= 0.01


def test_a_bf16_warm_start_fits_float32_master_weights(tiny) -> None:
    from support.episodes import scored_trajectory

    from uni_agent_core.rl.sft import supervised_warm_start

    model = copy.deepcopy(tiny)
    generator = torch.Generator().manual_seed(0)
    rows = [
        scored_trajectory(
            model,
            f"gold-{i}",
            torch.randint(5, 4000, (6,), generator=generator).tolist(),
            torch.randint(5, 4000, (8,), generator=generator).tolist(),
            [1] * 8,
            0,
        )
        for i in range(4)
    ]
    report = supervised_warm_start(
        model, rows, epochs=3, lr=1e-3, compute_dtype="bfloat16", echo=lambda _: None
    )
    assert report.loss_by_epoch[-1] < report.loss_by_epoch[0]
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert not torch.equal(next(iter(model.parameters())), next(iter(tiny.parameters()))), (
        "the master weights were not stepped"
    )
