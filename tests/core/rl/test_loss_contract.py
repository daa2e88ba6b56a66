"""A user's policy loss keeps the framework's contract: the loss mask and the rollout-correction
weights are applied exactly once (issue 49, finding 1), and its options come from the recipe."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from uni_agent_core.config import load_recipe
from uni_agent_core.rl.loss_contract import check_policy_loss
from uni_agent_core.rl.losses import (
    PolicyLossInputs,
    PolicyLossOutput,
    applies_is_weights,
    verl_policy_loss,
)
from uni_agent_core.rl.plugin_checks import plugin_problems

ROOT = Path(__file__).resolve().parents[3]
HERE = "test_loss_contract"


def as_in_the_docs(inputs: PolicyLossInputs, baseline: float = 0.0) -> PolicyLossOutput:
    """The loss `docs/extending.md` shows: per-token losses reduced by `aggregate`."""
    ratio = torch.exp(inputs.logprobs_B_T - inputs.old_logprobs_B_T)
    clipped = ratio.clamp(1 - inputs.clip_ratio_low, 1 + inputs.clip_ratio_high).detach()
    loss_B_T = -(inputs.advantages_B_T - baseline) * inputs.logprobs_B_T * clipped
    return PolicyLossOutput(loss=inputs.aggregate(loss_B_T))


def plain_mean(inputs: PolicyLossInputs) -> PolicyLossOutput:
    """Averages over every token, padding included, and skips `aggregate`."""
    return PolicyLossOutput(loss=(-inputs.advantages_B_T * inputs.logprobs_B_T).mean())


@applies_is_weights
def marked_but_unweighted(inputs: PolicyLossInputs) -> PolicyLossOutput:
    return PolicyLossOutput(loss=inputs.aggregate(-inputs.advantages_B_T * inputs.logprobs_B_T))


@applies_is_weights
def marked_and_weighted(inputs: PolicyLossInputs) -> PolicyLossOutput:
    loss_B_T = -inputs.advantages_B_T * inputs.logprobs_B_T
    if inputs.is_weights_B_T is not None:
        loss_B_T = loss_B_T * inputs.is_weights_B_T
    return PolicyLossOutput(loss=inputs.aggregate(loss_B_T))


def weighted_twice(inputs: PolicyLossInputs) -> PolicyLossOutput:
    """Applies the weights itself without the mark: `aggregate` applies them again."""
    loss_B_T = -inputs.advantages_B_T * inputs.logprobs_B_T * inputs.is_weights_B_T
    return PolicyLossOutput(loss=inputs.aggregate(loss_B_T))


def broken(inputs: PolicyLossInputs) -> PolicyLossOutput:
    raise KeyError("advantage")


def _step(loss, weights: torch.Tensor, options: dict | None = None) -> torch.Tensor:
    """The gradient the trainer's wrapper gives the sampled tokens' log-probabilities."""
    old = torch.tensor([[-1.0, -0.5, -2.0]])
    logprobs = old.clone().requires_grad_(True)
    config = SimpleNamespace(
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        global_batch_info={"dp_size": 1, "batch_num_tokens": 3, "global_batch_size": 1},
    )
    value, _ = verl_policy_loss(loss, options)(
        old_log_prob=old,
        log_prob=logprobs,
        advantages=torch.ones_like(old),
        response_mask=torch.ones_like(old),
        loss_agg_mode="token-mean",
        config=config,
        rollout_is_weights=weights,
    )
    value.backward()
    assert logprobs.grad is not None
    return logprobs.grad


def test_a_loss_written_from_the_docs_trains_with_the_rollout_correction() -> None:
    weights = torch.tensor([[1.0, 0.5, 2.0]])
    corrected = _step(as_in_the_docs, weights)
    uncorrected = _step(as_in_the_docs, None)
    torch.testing.assert_close(corrected, uncorrected * weights)


def test_a_marked_loss_gets_the_weights_once() -> None:
    weights = torch.tensor([[1.0, 0.5, 2.0]])
    torch.testing.assert_close(
        _step(marked_and_weighted, weights), _step(marked_and_weighted, None) * weights
    )


def test_recipe_options_reach_the_loss() -> None:
    ones = torch.ones(1, 3)
    torch.testing.assert_close(
        _step(as_in_the_docs, ones, {"baseline": 0.5}), _step(as_in_the_docs, ones) * 0.5
    )


def test_losses_that_keep_the_contract_pass_the_probe() -> None:
    check_policy_loss(as_in_the_docs)
    check_policy_loss(as_in_the_docs, {"baseline": 0.3})
    check_policy_loss(marked_and_weighted)


@pytest.mark.parametrize(
    ("loss", "says"),
    [
        (plain_mean, "outside the loss mask"),
        (marked_but_unweighted, "marked @applies_is_weights but its loss does not scale"),
        (weighted_twice, "inputs.aggregate scales again: mark it @applies_is_weights"),
        (broken, "failed on a probe batch: KeyError"),
    ],
)
def test_a_loss_that_breaks_the_contract_is_refused_in_one_line(loss, says) -> None:
    with pytest.raises(TypeError, match=says) as refused:
        check_policy_loss(loss)
    assert "\n" not in str(refused.value)


def _recipe(loss: str, *more: str):
    return load_recipe(
        ROOT / "recipes" / "ci-smoke.yaml", [f"trainer.algorithm.policy_loss={loss}", *more]
    )


def test_validation_names_the_loss_key_and_its_options(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert plugin_problems(_recipe(f"{HERE}:as_in_the_docs")) == []
    assert (
        plugin_problems(
            _recipe(f"{HERE}:as_in_the_docs", "trainer.algorithm.policy_loss_options={baseline: 1}")
        )
        == []
    )
    ((key, message),) = plugin_problems(_recipe(f"{HERE}:plain_mean"))
    assert key == "trainer.algorithm.policy_loss" and "outside the loss mask" in message
    ((key, message),) = plugin_problems(
        _recipe(f"{HERE}:as_in_the_docs", "trainer.algorithm.policy_loss_options={beta: 1}")
    )
    assert key == "trainer.algorithm.policy_loss" and "does not take" in message


def test_options_for_a_builtin_loss_are_a_recipe_error() -> None:
    with pytest.raises(ValueError, match="policy_loss_options are given to a loss of yours"):
        _recipe("vanilla", "trainer.algorithm.policy_loss_options={beta: 1}")


def test_the_example_loss_keeps_the_contract(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "plugins"))
    from my_plugins.reinforce_loss import clipped_reinforce

    check_policy_loss(clipped_reinforce)
