"""UniAgentLoop inside verl's own agent-loop machinery, on CPU with the tiny policy.

verl's registry, config wrappers and `hydra.utils.instantiate` build the loop exactly as
`AgentLoopWorker` does; the server manager is `EngineServerManager` over `HFEngine`, wrapped to
record every engine call so the TITO invariant is checked at verl's boundary.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402

from uni_agent_core.config.loading import parse_recipe  # noqa: E402
from uni_agent_core.gateway.tito import tito_violations  # noqa: E402
from uni_agent_core.rl.verl.launch import plan_launch, write_launch_files  # noqa: E402
from uni_agent_core.rl.verl.local_server import EngineServerManager  # noqa: E402
from uni_agent_core.types import EngineCall, TaskSpec, Trajectory  # noqa: E402


def tiny_verl_recipe(isolation: str):
    return parse_recipe(
        {
            "name": "tiny-verl",
            "seed": 3,
            "policy": {"name": "tiny"},
            "engine": {"type": "openai_server", "api": "vllm", "model": "tiny"},
            "gateway": {"sampling": {"max_tokens": 24}},
            "sandbox": {"type": "local", "isolation": isolation},
            "harness": {"type": "react", "max_turns": 3},
            "tasks": {"type": "micro_swe", "n": 2, "seed": 5, "levels": ["L0"]},
            "trainer": {
                "backend": {"type": "verl", "device": "cuda", "n_gpus_per_node": 1},
                "mode": "colocated_async",
                "batch_size": 1,
                "group_size": 2,
                "max_context_tokens": 4096,
                "max_response_tokens": 2048,
            },
        }
    )


class RecordingServerManager(EngineServerManager):
    """Records what verl's server manager was asked and what it returned."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[list[int], object]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        output = await super().generate(
            request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs
        )
        self.calls.append((list(prompt_ids), output))
        return output


def as_trajectory(output, chain_id: int) -> Trajectory:
    mask = list(output.response_mask)
    return Trajectory(
        session_id="verl",
        chain_id=chain_id,
        prompt_ids=list(output.prompt_ids),
        response_ids=list(output.response_ids),
        loss_mask=mask,
        logprobs=list(output.response_logprobs),
        policy_versions=[0 if m else -1 for m in mask],
    )


def engine_calls(calls, outputs) -> list[EngineCall]:
    """The recorded calls, each attributed to the output whose tokens it prefixes."""
    records = []
    for prompt, output in calls:
        chain = next(
            i
            for i, o in enumerate(outputs)
            if (list(o.prompt_ids) + list(o.response_ids))[: len(prompt)] == prompt
        )
        records.append(
            EngineCall(
                chain_id=chain,
                prompt_ids=prompt,
                output_ids=list(output.token_ids),
                output_logprobs=list(output.log_probs),
                policy_version=[0] * len(output.token_ids),
                finish_reason=output.stop_reason,
            )
        )
    return records


def test_registered_under_uni_agent() -> None:
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    import uni_agent_core.rl.verl.agent_loop as agent_loop

    target = "uni_agent_core.rl.verl.agent_loop.UniAgentLoop"
    assert _agent_loop_registry["uni_agent"]["_target_"] == target
    assert agent_loop.AGENT_NAME == "uni_agent"


def test_uni_agent_loop_runs_a_react_episode_as_verl_builds_it(tmp_path: Path) -> None:
    import hydra
    from verl.experimental.agent_loop import AgentLoopOutput
    from verl.experimental.agent_loop.agent_loop import (
        DictConfigWrap,
        ToolListWrap,
        _agent_loop_registry,
    )
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    import uni_agent_core.rl.verl.agent_loop as agent_loop
    from uni_agent_core.inference import HFEngine

    isolation = "bubblewrap" if shutil.which("bwrap") else "none"
    recipe = tiny_verl_recipe(isolation)
    launch = plan_launch(recipe, run_dir=tmp_path / "run")
    write_launch_files(launch)
    # AgentLoopWorker: the agent-loop config file overrides the decorator's registry entry.
    registered = dict(_agent_loop_registry)
    for entry in OmegaConf.load(launch.inputs.agent_loop_config):
        _agent_loop_registry[entry.name] = entry
    config = launch.config
    rollout = config.actor_rollout_ref.rollout
    engine = HFEngine.from_policy("tiny")
    server = RecordingServerManager(
        engine, response_length=rollout.response_length, max_model_len=rollout.max_model_len
    )
    row = pd.read_parquet(launch.inputs.train_files).iloc[0].to_dict()
    broken = TaskSpec.model_validate_json(row["extra_info"]["task_spec"])
    broken.source["repo_dir"] = str(tmp_path / "missing-repo")

    async def run_episode():
        loop = hydra.utils.instantiate(
            config=_agent_loop_registry["uni_agent"],
            trainer_config=DictConfigWrap(config=config),
            server_manager=server,
            tokenizer=engine.tokenizer,
            processor=None,
            hf_model_type="llama",
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
            tools=ToolListWrap([]),
        )
        assert isinstance(loop, agent_loop.UniAgentLoop)
        sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
        common = {"raw_prompt": list(row["prompt"]), "index": 0, "agent_name": "uni_agent"}
        try:
            outputs = await loop.run(
                sampling,
                extra_info=row["extra_info"],
                uid="u0",
                session_id=0,
                global_steps=0,
                **common,
            )
            calls = len(server.calls)
            # A sandbox that fails before the first model call: one masked output, no crash.
            failed = await loop.run(
                sampling,
                extra_info={"task_spec": broken.model_dump_json()},
                uid="u1",
                session_id=1,
                global_steps=0,
                **common,
            )
            assert len(server.calls) == calls
            return outputs, failed
        finally:
            await agent_loop.close_episode_services()
            await engine.close()
            _agent_loop_registry.clear()
            _agent_loop_registry.update(registered)

    outputs, failed = asyncio.run(run_episode())
    assert len(failed) == 1 and failed[0].response_mask == [0]
    assert failed[0].extra_fields["exit_reason"] == "sandbox_error"
    assert failed[0].reward_score == 0.0 and failed[0].as_dict()["prompts"].numel() > 0
    assert outputs and server.calls
    for output in outputs:
        validated = AgentLoopOutput.model_validate(output.model_dump())
        n = len(validated.response_ids)
        assert n == len(validated.response_mask) == len(validated.response_logprobs) > 0
        assert set(validated.response_mask) <= {0, 1} and sum(validated.response_mask) > 0
        assert len(validated.prompt_ids) + n <= rollout.max_model_len
        assert validated.reward_score in (0.0, 1.0)
        assert validated.extra_fields["exit_reason"]
        assert validated.extra_fields["min_global_steps"] == 0
        assert "reward_extra_info" in validated.extra_fields
        tensors = validated.as_dict()  # what verl's TransferQueue path stores
        assert tensors["responses"].shape == tensors["response_mask"].shape
        assert tensors["rm_scores"][-1] == validated.reward_score
        list_of_dict_to_tensordict([{**tensors, "uid": "u0", "session_id": 0}])
        # Context tokens carry logprob 0; sampled tokens the engine's own logprobs.
        for lp, m in zip(validated.response_logprobs, validated.response_mask, strict=True):
            assert m or lp == 0.0
    trajectories = [as_trajectory(o, i) for i, o in enumerate(outputs)]
    assert tito_violations(trajectories, engine_calls(server.calls, outputs)) == []
