"""The trainer's fast path (shared prefix once, old logprobs from the loss's own forward, the
head at loss positions only) gives the reference path's loss and gradients."""

import copy

import pytest
import torch
from support.episodes import scored_trajectory

from uni_agent_core.config.training import TrainerConfig
from uni_agent_core.models import load_policy
from uni_agent_core.rl.logprobs import token_logprobs
from uni_agent_core.rl.prefix_forward import SharedPrefix, common_prefix_length, row_logprobs
from uni_agent_core.rl.trainer import EmbeddedTrainer
from uni_agent_core.types import ExitReason, RolloutResult

SYSTEM = list(range(100, 140))  # the prefix every episode shares (system + tools)


@pytest.fixture(scope="module")
def policy():
    model, _ = load_policy("tiny")
    return model


def _episode(model, task, sample, reward, seed, *, statement_len=5, version=0):
    """System prefix, a task statement shared by the task's group, then a sampled response
    with a tool result (context) in the middle; lengths differ per episode (padding)."""
    generator = torch.Generator().manual_seed(seed)
    statement = torch.randint(
        5, 4000, (statement_len,), generator=torch.Generator().manual_seed(hash(task) % 1000)
    ).tolist()
    prompt = SYSTEM + statement
    n = 6 + seed % 5
    response = torch.randint(5, 4000, (n,), generator=generator).tolist()
    mask = [1] * 3 + [0] * 2 + [1] * (n - 5)
    trajectory = scored_trajectory(model, f"{task}-{sample}", prompt, response, mask, version)
    return RolloutResult(
        task_id=task,
        sample_index=sample,
        group_id=f"{task}@0",
        reward=reward,
        exit_reason=ExitReason.SUBMITTED,
        trajectories=[trajectory],
        turns=2,
    )


def _batch(model):
    return [
        _episode(model, task, i, float((i + j) % 2), 10 * j + i)
        for j, task in enumerate(["a", "b", "c"])
        for i in range(3)
    ]


def _trainer(model, *, shared_prefix, micro_batch_tokens=8192, trainable_layers=None, **algorithm):
    config = TrainerConfig(
        mode="sync",
        lr=1e-3,
        group_size=3,
        batch_size=3,
        max_response_tokens=64,
        max_context_tokens=128,
        algorithm=algorithm,
    )
    return EmbeddedTrainer(
        copy.deepcopy(model),
        config,
        pad_token_id=0,
        shared_prefix=shared_prefix,
        micro_batch_tokens=micro_batch_tokens,
        trainable_layers=trainable_layers,
    )


def _gradients(trainer, results):
    """The step's loss and gradients (the optimizer step is skipped)."""
    trainer.optimizer.step = lambda: None
    trainer.optimizer.zero_grad = lambda set_to_none=True: None
    outcome = trainer.train_step(results)
    grads = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    return outcome, grads


def _relative(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize(
    "algorithm",
    [
        {},
        {"policy_loss": "gspo", "loss_agg_mode": "seq-mean-token-mean"},
        {"loss_agg_mode": "seq-mean-token-sum-norm"},
        {"rollout_correction": {"is_level": "sequence"}},
    ],
    ids=["grpo-token-mean", "gspo", "dr-grpo", "sequence-is"],
)
@pytest.mark.parametrize("micro_batch_tokens", [8192, 20], ids=["one-batch", "micro-batches"])
def test_fast_path_loss_and_gradients_equal_the_reference(policy, algorithm, micro_batch_tokens):
    results = _batch(policy)
    fast, fast_grads = _gradients(
        _trainer(policy, shared_prefix=True, micro_batch_tokens=micro_batch_tokens, **algorithm),
        results,
    )
    reference, reference_grads = _gradients(
        _trainer(policy, shared_prefix=False, **algorithm), results
    )
    assert fast.metrics["train/shared_prefix_tokens"] == len(SYSTEM)
    # each group's task statement (5 tokens, the last one predicting the first sampled token
    # stays in the rows) runs once per group, nested in the step's prefix
    assert fast.metrics["train/group_prefix_tokens_mean"] == 4
    # the surrogate's value is a mean of advantages at ratio 1 (near 0): compare it absolutely
    assert fast.metrics["train/loss"] == pytest.approx(
        reference.metrics["train/loss"], rel=1e-5, abs=1e-6
    )
    assert reference_grads.norm() > 0
    assert _relative(fast_grads, reference_grads) < 1e-5
    assert fast.metrics["train/logprob_pearson"] >= 0.9999
    for key in ("train/logprob_pearson", "train/prob_diff_mean", "train/consistency_tokens"):
        assert fast.metrics[key] == pytest.approx(reference.metrics[key], rel=1e-4, abs=1e-7)


def test_one_group_whose_prefix_is_the_steps_gives_the_reference_gradients(policy) -> None:
    results = _batch(policy)[:3]  # one group: its prefix adds nothing to the step's
    fast, fast_grads = _gradients(_trainer(policy, shared_prefix=True), results)
    _, reference_grads = _gradients(_trainer(policy, shared_prefix=False), results)
    assert fast.metrics["train/group_prefix_tokens_mean"] == 0
    assert _relative(fast_grads, reference_grads) < 1e-5


def test_fast_path_steps_like_the_reference(policy) -> None:
    results = _batch(policy)
    fast, reference = _trainer(policy, shared_prefix=True), _trainer(policy, shared_prefix=False)
    for trainer in (fast, reference):
        trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
        trainer.train_step(results)
    after = [
        torch.cat([p.detach().flatten() for p in t.model.parameters()]) for t in (fast, reference)
    ]
    assert torch.allclose(after[0], after[1], atol=1e-6)


def test_frozen_lower_layers_leave_the_top_layers_gradients_as_they_were(policy) -> None:
    """`trainable_layers=1`: only the top layer and the final norm get gradients, in the
    direction they have when every weight trains (clipping scales the whole vector), on the
    fast path and the reference path alike; a step moves those and nothing else."""
    results = _batch(policy)
    everything = _trainer(policy, shared_prefix=False)
    _gradients(everything, results)
    top = f"layers.{len(policy.base_model.layers) - 1}."

    def trained(name: str) -> bool:
        return top in name or name.endswith("model.norm.weight")

    def direction(model) -> torch.Tensor:
        grads = torch.cat([p.grad.flatten() for n, p in model.named_parameters() if trained(n)])
        return grads / grads.norm()

    expected = direction(everything.model)
    for shared_prefix in (True, False):
        trainer = _trainer(policy, shared_prefix=shared_prefix, trainable_layers=1)
        assert 0 < trainer.trainable_parameters < sum(p.numel() for p in policy.parameters())
        _gradients(trainer, results)
        for name, parameter in trainer.model.named_parameters():
            assert (parameter.grad is not None) == trained(name), name
        assert _relative(direction(trainer.model), expected) < 5e-5
    stepped = _trainer(policy, shared_prefix=True, trainable_layers=1)
    stepped.train_step(results)
    for (name, before), after in zip(
        policy.named_parameters(), stepped.model.parameters(), strict=True
    ):
        assert (not torch.equal(before, after)) == trained(name), name


def test_trainable_layers_outside_the_model_are_refused(policy) -> None:
    layers = len(policy.base_model.layers)
    with pytest.raises(ValueError, match=f"the policy has {layers} decoder layers"):
        _trainer(policy, shared_prefix=True, trainable_layers=layers + 1)


def test_row_logprobs_equal_full_rows_at_loss_positions(policy) -> None:
    ids = torch.tensor([SYSTEM + [7, 8, 9, 10, 11], SYSTEM + [7, 12, 13, 0, 0]])
    attention = torch.tensor([[1] * 45, [1] * 43 + [0, 0]])
    loss = torch.zeros_like(ids)
    loss[0, 41:45] = 1
    loss[1, 42:43] = 1
    with torch.no_grad():
        full = token_logprobs(policy, ids, attention)
        prefix = SharedPrefix(policy, ids[0, :40])
        fast = row_logprobs(prefix, ids, attention, loss)
    assert fast.shape == (2, 5)
    assert torch.allclose(fast, (full * loss)[:, 40:], atol=1e-5)


def test_a_loss_position_inside_the_prefix_is_refused(policy) -> None:
    ids = torch.tensor([SYSTEM + [7, 8]])
    loss = torch.zeros_like(ids)
    loss[0, 40] = 1  # predicted from position 39, inside the prefix
    with pytest.raises(ValueError, match="inside the shared prefix"):
        row_logprobs(SharedPrefix(policy, ids[0, :40]), ids, torch.ones_like(ids), loss)


def test_common_prefix_length() -> None:
    rows = [torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 5]), torch.tensor([1, 2, 3])]
    assert common_prefix_length(rows, limit=10) == 2
    assert common_prefix_length(rows, limit=1) == 1
    assert common_prefix_length(rows, limit=-1) == 0
    assert common_prefix_length([torch.tensor([4, 5])], limit=10) == 2


def test_warm_start_nll_gradients_equal_full_rows(policy) -> None:
    from uni_agent_core.rl.batch import trajectories_to_batch
    from uni_agent_core.rl.sft import _nll_backward

    rows = [t for r in _batch(policy)[:4] for t in r.trajectories]
    batch = trajectories_to_batch(rows, pad_token_id=0)
    fast_model, full_model = copy.deepcopy(policy), copy.deepcopy(policy)
    loss = _nll_backward(fast_model, batch, list(range(4)), "cpu")
    mask = batch.loss_mask_B_T.float()
    logprobs = token_logprobs(full_model, batch.input_ids_B_T, batch.attention_mask_B_T)
    full = -(logprobs * mask).sum() / mask.sum()
    full.backward()
    assert loss == pytest.approx(float(full.detach()), rel=1e-5)
    grads = [
        torch.cat([p.grad.flatten() for p in m.parameters()]) for m in (fast_model, full_model)
    ]
    assert _relative(grads[0], grads[1]) < 1e-5
