"""The pieces between verl and agent-rl: engine adapter, chain selection, output conversion."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("verl")

from verl.workers.rollout.replica import TokenOutput as VerlTokenOutput  # noqa: E402

from uni_agent_core.inference.types import FinishReason, GenerateRequest  # noqa: E402
from uni_agent_core.rl.verl.agent_loop import (  # noqa: E402
    chain_output,
    select_chains,
    task_of_row,
)
from uni_agent_core.rl.verl.engine_adapter import (  # noqa: E402
    VerlServerEngine,
    VerlServerError,
)
from uni_agent_core.types import ExitReason, RolloutResult, TaskSpec, Trajectory  # noqa: E402

EOS = 2


class CannedServerManager:
    """Answers verl's `generate` with a canned output; remembers the last call."""

    def __init__(self, output: VerlTokenOutput) -> None:
        self.output = output
        self.last: tuple[str, list[int], dict] | None = None

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        self.last = (request_id, prompt_ids, dict(sampling_params))
        return self.output


def generate(output: VerlTokenOutput, **request) -> tuple[object, CannedServerManager]:
    server = CannedServerManager(output)
    engine = VerlServerEngine(server, eos_token_ids=[EOS])
    request = GenerateRequest(prompt_ids=[5, 6, 7], max_new_tokens=3, **request)
    return asyncio.run(engine.generate(request)), server


def test_request_maps_to_verl_sampling_params_and_session_routing() -> None:
    out = VerlTokenOutput(token_ids=[9, EOS], log_probs=[-0.1, -0.2], stop_reason="completed")
    result, server = generate(out, session_id="sess-1", seed=11, temperature=0.7, top_k=0)
    request_id, prompt, params = server.last
    assert request_id == "sess-1" and prompt == [5, 6, 7]
    assert params == {
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": -1,
        "max_tokens": 3,
        "logprobs": True,
        "seed": 11,
    }
    assert result.token_ids == [9, EOS] and result.logprobs == [-0.1, -0.2]
    assert result.finish_reason == FinishReason.STOP


def test_finish_reasons_are_recovered_from_the_tokens() -> None:
    full = VerlTokenOutput(token_ids=[9, 9, 9], log_probs=[0.0] * 3, stop_reason="completed")
    assert generate(full)[0].finish_reason == FinishReason.LENGTH
    aborted = VerlTokenOutput(token_ids=[9], log_probs=[0.0], stop_reason="aborted")
    assert generate(aborted)[0].finish_reason == FinishReason.ABORT


def test_missing_logprobs_fail_closed() -> None:
    out = VerlTokenOutput(token_ids=[9, EOS], log_probs=None, stop_reason="completed")
    with pytest.raises(VerlServerError, match="calculate_log_probs"):
        generate(out)


def test_policy_versions_span_a_resumed_partial_rollout() -> None:
    out = VerlTokenOutput(
        token_ids=[9, 9, EOS],
        log_probs=[0.0] * 3,
        stop_reason="completed",
        extra_fields={"global_steps": 5, "min_global_steps": 4, "max_global_steps": 5},
    )
    result, _ = generate(out)
    assert result.policy_version == [4, 5, 5]


def trajectory(chain_id: int, sampled: int, context: int = 2) -> Trajectory:
    mask = [1] * sampled + [0] * context
    return Trajectory(
        session_id="s",
        chain_id=chain_id,
        prompt_ids=[1, 2, 3],
        response_ids=list(range(10, 10 + sampled + context)),
        loss_mask=mask,
        logprobs=[-0.5 if m else 0.0 for m in mask],
        policy_versions=[3 if m else -1 for m in mask],
        num_turns=2,
    )


def episode(trajectories, exit_reason=ExitReason.SUBMITTED, reward=1.0) -> RolloutResult:
    return RolloutResult(
        task_id="t",
        sample_index=0,
        reward=reward,
        exit_reason=exit_reason,
        trajectories=trajectories,
        resolved=reward == 1.0,
        started_version=3,
    )


def test_chain_selection_policies() -> None:
    chains = [trajectory(0, 5), trajectory(1, 9), trajectory(2, 3)]
    assert [t.chain_id for t in select_chains(chains, "all")] == [0, 1, 2]
    assert [t.chain_id for t in select_chains(chains, "longest")] == [1]
    assert [t.chain_id for t in select_chains(chains, "last")] == [2]
    assert select_chains([], "longest") == []


def test_chain_output_keeps_masks_logprobs_and_version_span() -> None:
    chain = trajectory(0, 4)
    out = chain_output(chain, episode([chain]), max_tokens=32, mask_abnormal=True)
    assert out.response_ids == chain.response_ids and out.response_mask == chain.loss_mask
    assert out.response_logprobs == chain.logprobs and out.reward_score == 1.0
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (3, 3)
    assert out.extra_fields["reward_extra_info"]["acc"] == 1.0
    assert out.as_dict()["rm_scores"][-1] == 1.0


def test_abnormal_exits_are_masked() -> None:
    chain = trajectory(0, 6, context=4)
    result = episode([chain], exit_reason=ExitReason.TIMEOUT, reward=0.0)
    out = chain_output(chain, result, max_tokens=32, mask_abnormal=True)
    assert out.response_mask == [0] * 10 and len(out.response_logprobs) == 10
    assert out.extra_fields["masked"] and not out.extra_fields["truncated"]
    kept = chain_output(chain, result, max_tokens=32, mask_abnormal=False)
    assert sum(kept.response_mask) == 6 and not kept.extra_fields["masked"]


def test_a_chain_over_the_context_is_cut_and_masked_not_an_error() -> None:
    chain = trajectory(0, 6, context=4)  # 3 prompt + 10 response tokens
    out = chain_output(chain, episode([chain]), max_tokens=11, mask_abnormal=True)
    assert len(out.response_ids) == len(out.response_logprobs) == 8
    assert out.response_mask == [0] * 8
    assert out.extra_fields["truncated"] and out.extra_fields["masked"]


def test_task_spec_comes_from_extra_info() -> None:
    task = TaskSpec(instance_id="x", problem_statement="fix it")
    row = {"extra_info": {"task_spec": task.model_dump_json()}}
    assert task_of_row(row) == task
    assert task_of_row({"task_spec": json.loads(task.model_dump_json())}) == task
    with pytest.raises(ValueError, match="agent-rl verl launch"):
        task_of_row({"extra_info": {"index": 0}})
