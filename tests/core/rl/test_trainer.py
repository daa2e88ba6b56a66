"""The embedded trainer on crafted episodes with the tiny policy."""

import copy

import pytest
import torch
from support.episodes import scored_trajectory

from uni_agent_core.config.training import TrainerConfig
from uni_agent_core.models import load_policy
from uni_agent_core.rl.trainer import EmbeddedTrainer, micro_batches
from uni_agent_core.types import ExitReason, RolloutResult


@pytest.fixture(scope="module")
def policy():
    model, tokenizer = load_policy("tiny")
    return model


def _episode(model, task, sample, reward, seed, exit_reason=ExitReason.SUBMITTED, version=0):
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(5, 4000, (6,), generator=generator).tolist()
    response = torch.randint(5, 4000, (8,), generator=generator).tolist()
    mask = [1, 1, 1, 0, 0, 1, 1, 1]  # a tool result in the middle is context
    trajectory = scored_trajectory(model, f"{task}-{sample}", prompt, response, mask, version)
    return RolloutResult(
        task_id=task,
        sample_index=sample,
        reward=reward,
        exit_reason=exit_reason,
        trajectories=[trajectory],
        turns=2,
    )


def _trainer(model, **overrides):
    config = TrainerConfig(
        mode="sync",
        lr=1e-3,
        group_size=2,
        batch_size=2,
        max_response_tokens=64,
        max_context_tokens=64,
    )
    return EmbeddedTrainer(copy.deepcopy(model), config, pad_token_id=0, **overrides)


def _params(trainer):
    return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


def test_a_step_updates_weights_and_reports_consistency(policy) -> None:
    trainer = _trainer(policy)
    before = _params(trainer)
    results = [
        _episode(policy, "a", 0, 1.0, 1),
        _episode(policy, "a", 1, 0.0, 2),
        _episode(policy, "b", 0, 0.0, 3),
        _episode(policy, "b", 1, 1.0, 4),
    ]
    outcome = trainer.train_step(results)
    assert outcome.updated and trainer.version == 1
    assert not torch.equal(before, _params(trainer))
    assert outcome.metrics["train/logprob_pearson"] >= 0.9999
    assert outcome.metrics["train/prob_diff_mean"] <= 1e-3
    assert outcome.tokens == 4 * 6 and outcome.rows == 4


def test_flat_groups_are_not_trained_on(policy) -> None:
    trainer = _trainer(policy)
    before = _params(trainer)
    flat = [_episode(policy, "a", 0, 1.0, 1), _episode(policy, "a", 1, 1.0, 2)]
    outcome = trainer.train_step(flat)
    assert not outcome.updated and trainer.version == 0
    assert torch.equal(before, _params(trainer))
    assert "train/logprob_pearson" in outcome.metrics


def test_abnormal_exits_are_masked(policy) -> None:
    base = [_episode(policy, "a", 0, 1.0, 1), _episode(policy, "a", 1, 0.0, 2)]
    crashed = _episode(policy, "a", 2, 0.0, 3, exit_reason=ExitReason.SANDBOX_ERROR)
    with_crash, without = _trainer(policy), _trainer(policy)
    with_crash.train_step([*base, crashed])
    without.train_step(base)
    assert torch.equal(_params(with_crash), _params(without))


def test_gradient_accumulation_equals_one_batch(policy) -> None:
    results = [_episode(policy, "a", i, float(i % 2), 10 + i) for i in range(4)]
    small, large = _trainer(policy, micro_batch_tokens=14), _trainer(policy)
    for trainer in (small, large):  # SGD: the update is the gradient itself (Adam's sign-like
        # first step would magnify float-level noise on near-zero gradients)
        trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
    small.train_step(results)
    large.train_step(results)
    assert torch.allclose(_params(small), _params(large), atol=1e-6)
    assert not torch.equal(_params(small), _params(_trainer(policy)))


def test_gradient_checkpointing_gives_the_same_update(policy) -> None:
    results = [_episode(policy, "a", i, float(i % 2), 20 + i) for i in range(4)]
    plain, checkpointed = _trainer(policy), _trainer(policy, gradient_checkpointing=True)
    assert checkpointed.model.training and checkpointed.model.is_gradient_checkpointing
    for trainer in (plain, checkpointed):
        trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
    outcomes = [plain.train_step(results), checkpointed.train_step(results)]
    assert torch.allclose(_params(plain), _params(checkpointed), atol=1e-6)
    assert outcomes[1].metrics["train/logprob_pearson"] >= 0.9999


def test_micro_batches_respect_the_token_budget() -> None:
    assert micro_batches([10, 10, 10, 30], 30) == [[0, 1, 2], [3]]
    assert micro_batches([40, 5], 30) == [[0], [1]]


def test_unsupported_penalties_are_refused(policy) -> None:
    config = TrainerConfig(algorithm={"kl_coef": 0.1})
    with pytest.raises(ValueError, match="kl_coef"):
        EmbeddedTrainer(policy, config, pad_token_id=0)


def _in_group(result, group_id):
    return result.model_copy(update={"group_id": group_id})


def test_two_groups_of_one_task_in_a_step_stay_two_groups(policy) -> None:
    # Task "a" launched twice in one step (an epoch wrap): group a@0 is flat (both solved), group
    # a@1 has variance. Grouped by task they would be one group of mean 0.75 whose solved
    # episodes get advantages; grouped by launch only a@1 trains, with +/- advantages.
    flat = [_in_group(_episode(policy, "a", i, 1.0, 30 + i), "a@0") for i in range(2)]
    mixed = [
        _in_group(_episode(policy, "a", 0, 1.0, 40), "a@1"),
        _in_group(_episode(policy, "a", 1, 0.0, 41), "a@1"),
    ]
    both, alone = _trainer(policy), _trainer(policy)
    for trainer in (both, alone):
        trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
    outcome = both.train_step([*flat, *mixed])
    alone.train_step(mixed)
    assert outcome.metrics["train/trained_episodes"] == 2.0
    assert torch.allclose(_params(both), _params(alone), atol=1e-6)


def test_group_metrics_count_groups_not_tasks(policy) -> None:
    from uni_agent_core.rl.metrics import episode_metrics, zero_variance_groups

    results = [
        _in_group(_episode(policy, "a", 0, 1.0, 50), "a@0"),
        _in_group(_episode(policy, "a", 1, 1.0, 51), "a@0"),
        _in_group(_episode(policy, "a", 0, 0.0, 52), "a@1"),
        _in_group(_episode(policy, "a", 1, 1.0, 53), "a@1"),
    ]
    assert zero_variance_groups(results) == {"a@0"}
    assert episode_metrics(results, 0)["train/zero_std_group_frac"] == 0.5
    ungrouped = [r.model_copy(update={"group_id": ""}) for r in results]
    assert zero_variance_groups(ungrouped) == set()  # one task, one group of mixed rewards
