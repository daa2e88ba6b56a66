"""Tests of `OpenAIServerEngine` against an in-process fake vLLM + SGLang server.

The fake speaks vLLM's `POST /v1/completions` (`return_token_ids`, `logprobs`, `usage`) and
SGLang's `POST /generate` / `POST /update_weights_from_disk` wire formats, sampling
deterministically: next = (last * 31 + 7) % VOCAB, logprob of position i = -(0.5 + i / 8).
The first prompt token selects a fault (see the `F_*` constants).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from uni_agent_core.inference.openai_server import (
    EngineProtocolError,
    EngineServerError,
    EngineTimeoutError,
    EngineUnavailableError,
    OpenAIServerEngine,
)
from uni_agent_core.inference.server_wire import (
    parse_sglang_generate,
    parse_vllm_completion,
    sglang_finish_reason,
    vllm_finish_reason,
)
from uni_agent_core.inference.types import Engine, FinishReason, GenerateRequest

VOCAB = 1000
EOS = 2
MODEL = "fake-model"
F_DELAY = 900  # sleep prompt[1] * 10 ms before answering
F_DROP_LOGPROB = 901  # one logprob fewer than tokens
F_NO_TOKEN_IDS = 902  # vLLM: no token_ids / SGLang: no output_token_logprobs
F_HTTP_500 = 903
F_BAD_FINISH = 904  # a finish reason outside stop|length|abort
F_NULL_LOGPROB = 905
F_OTHER_PROMPT = 906  # vLLM echoes a prompt with an extra BOS
F_TRIM_STOP = 907  # the stop token is reported but missing from the output
PROMPT_EOS = [10, 645]  # (645 * 31 + 7) % 1000 == EOS


def fake_sample(
    prompt: list[int], max_new: int, stop_ids: list[int], ignore_eos: bool
) -> tuple[list[int], str, int | None]:
    """The fake's sampler: tokens, finish reason, matched stop token id."""
    out: list[int] = []
    last = prompt[-1]
    for _ in range(max_new):
        last = (last * 31 + 7) % VOCAB
        out.append(last)
        if last in stop_ids:
            return out, "stop", last
        if last == EOS and not ignore_eos:
            return out, "stop", EOS
    return out, "length", None


def fake_logprobs(n: int) -> list[float]:
    return [-(0.5 + i / 8) for i in range(n)]


@dataclass
class FakeState:
    bodies: list[tuple[str, Any]] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)
    events: list[tuple[str, int]] = field(default_factory=list)
    sequences: list[list[int]] = field(default_factory=list)
    model_lookups: int = 0
    inflight: int = 0
    max_inflight: int = 0
    weight_path: str | None = None
    metrics: str = ""
    generation: int = 0
    """Bumped by `reset`: a call still sleeping from an earlier test (its client gave up) must
    not decrement the next test's in-flight count when it finally ends."""

    def reset(self) -> None:
        generation = self.generation + 1
        self.__init__()  # type: ignore[misc]
        self.generation = generation

    def cached(self, prompt: list[int]) -> int:
        best = 0
        for seq in self.sequences:
            n = 0
            while n < min(len(seq), len(prompt)) and seq[n] == prompt[n]:
                n += 1
            best = max(best, n)
        return best


def _vllm_error(status: int, message: str, kind: str) -> JSONResponse:
    err = {"message": message, "type": kind, "param": None, "code": status}
    return JSONResponse({"error": err}, status_code=status)


def build_app(state: FakeState) -> FastAPI:
    app = FastAPI()

    async def enter(path: str, request: Request) -> Any:
        body = await request.json()
        state.bodies.append((path, body))
        state.auth.append(request.headers.get("authorization"))
        return body

    async def faults(prompt: list[int]) -> None:
        """Count the call as in flight while applying the fault its first token selects."""
        generation = state.generation
        state.inflight += 1
        state.max_inflight = max(state.max_inflight, state.inflight)
        try:
            if prompt and prompt[0] == F_DELAY:
                await asyncio.sleep(prompt[1] / 100)
        finally:
            if state.generation == generation:
                state.inflight -= 1

    @app.get("/metrics")
    async def metrics() -> Any:
        from fastapi.responses import PlainTextResponse

        return PlainTextResponse(state.metrics)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        state.model_lookups += 1
        return {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "vllm"}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = await enter("/v1/completions", request)
        if body.get("model") != MODEL:
            return _vllm_error(404, f"The model `{body.get('model')}` does not exist.", "NotFound")
        prompt = body["prompt"]
        if any(t >= VOCAB for t in prompt):
            return _vllm_error(400, f"Token id {max(prompt)} is out of vocabulary", "BadRequest")
        await faults(prompt)
        if prompt[0] == F_HTTP_500:
            return _vllm_error(500, "boom: EngineCore died", "InternalServerError")
        tokens, finish, matched = fake_sample(
            prompt, body["max_tokens"], body.get("stop_token_ids") or [], body["ignore_eos"]
        )
        cached = state.cached(prompt)
        state.sequences.append(prompt + tokens)
        lps: list[float | None] = list(fake_logprobs(len(tokens)))
        stop_reason = matched if matched in (body.get("stop_token_ids") or []) else None
        if prompt[0] == F_DROP_LOGPROB:
            lps = lps[:-1]
        if prompt[0] == F_NULL_LOGPROB:
            lps[0] = None
        if prompt[0] == F_BAD_FINISH:
            finish = "content_filter"
        if prompt[0] == F_TRIM_STOP:
            tokens, lps = tokens[:-1], lps[:-1]
        texts = [f"<{t}>" for t in tokens]
        choice: dict[str, Any] = {
            "index": 0,
            "text": "".join(texts),
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": stop_reason,
            "prompt_logprobs": None,
        }
        if body.get("logprobs") is not None:
            choice["logprobs"] = {
                "text_offset": [sum(len(x) for x in texts[:i]) for i in range(len(texts))],
                "token_logprobs": lps,
                "tokens": texts,
                "top_logprobs": [{x: lp} for x, lp in zip(texts, lps, strict=False)],
            }
        if body.get("return_token_ids") and prompt[0] != F_NO_TOKEN_IDS:
            choice["token_ids"] = tokens
            choice["prompt_token_ids"] = [1, *prompt] if prompt[0] == F_OTHER_PROMPT else prompt
        return {
            "id": "cmpl-fake",
            "object": "text_completion",
            "created": int(time.time()),
            "model": MODEL,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(tokens),
                "total_tokens": len(prompt) + len(tokens),
                "prompt_tokens_details": {"cached_tokens": cached},
            },
            "system_fingerprint": None,
        }

    @app.post("/generate")
    async def generate(request: Request) -> Any:
        body = await enter("/generate", request)
        prompt, sp = body["input_ids"], body["sampling_params"]
        if any(t >= VOCAB for t in prompt):
            msg = f"The input_ids {max(prompt)} exceeds the vocabulary size {VOCAB}."
            return JSONResponse({"error": {"message": msg}}, status_code=400)
        state.events.append(("generate-start", prompt[-1]))
        try:
            await faults(prompt)
        finally:
            state.events.append(("generate-end", prompt[-1]))
        if prompt[0] == F_HTTP_500:
            return JSONResponse({"error": {"message": "boom: scheduler died"}}, status_code=500)
        tokens, finish, matched = fake_sample(
            prompt, sp["max_new_tokens"], sp.get("stop_token_ids") or [], sp["ignore_eos"]
        )
        cached = state.cached(prompt)
        state.sequences.append(prompt + tokens)
        lps = fake_logprobs(len(tokens))
        reason: dict[str, Any] = (
            {"type": "stop", "matched": matched}
            if finish == "stop"
            else {"type": "length", "length": len(tokens)}
        )
        if prompt[0] == F_BAD_FINISH:
            reason = {"type": "cancelled"}
        triples = [[lp, t, None] for lp, t in zip(lps, tokens, strict=True)]
        if prompt[0] == F_DROP_LOGPROB:
            triples = triples[:-1]
        meta: dict[str, Any] = {
            "id": "fake-rid",
            "finish_reason": reason,
            "prompt_tokens": len(prompt),
            "weight_version": "default",
            "completion_tokens": len(tokens),
            "cached_tokens": cached,
            "e2e_latency": 0.001,
        }
        if body.get("return_logprob") and prompt[0] != F_NO_TOKEN_IDS:
            meta["output_token_logprobs"] = triples
        return {"text": "".join(f"<{t}>" for t in tokens), "output_ids": tokens, "meta_info": meta}

    @app.post("/update_weights_from_disk")
    async def update_weights(request: Request) -> Any:
        body = await enter("/update_weights_from_disk", request)
        state.events.append(("update", 0))
        path = body["model_path"]
        if not os.path.isdir(path):
            msg = f"Failed to get weights iterator: {path} (repository not found)."
            content = {"success": False, "message": msg, "num_paused_requests": 0}
            return JSONResponse(content, status_code=400)
        state.weight_path = path
        return {
            "success": True,
            "message": "Succeeded to update model weights.",
            "num_paused_requests": 0,
        }

    return app


@dataclass
class FakeServer:
    url: str
    state: FakeState


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeServer]:
    state = FakeState()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        build_app(state), log_level="warning", lifespan="off", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("fake inference server did not start")
        time.sleep(0.01)
    yield FakeServer(f"http://127.0.0.1:{port}", state)
    server.should_exit = True
    thread.join(timeout=5)
    sock.close()


@pytest.fixture
def fake(fake_server: FakeServer) -> FakeServer:
    fake_server.state.reset()
    return fake_server


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def req(prompt: list[int] | array, **kw: Any) -> GenerateRequest:
    return GenerateRequest(prompt_ids=prompt, **kw)


# --- happy paths -------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["vllm", "sglang"])
def test_tokens_logprobs_and_stop_token_round_trip(fake: FakeServer, api: str) -> None:
    async def main() -> Any:
        engine = OpenAIServerEngine(fake.url, api=api, model=MODEL)
        assert isinstance(engine, Engine)
        try:
            return await engine.generate(req([5, 6, 7], max_new_tokens=10, stop_token_ids=[488]))
        finally:
            await engine.close()

    out = run(main())
    assert out.token_ids == [224, 951, 488]  # 7*31+7=224, ... the stop token is included
    assert out.logprobs == [-0.5, -0.625, -0.75]
    assert out.finish_reason is FinishReason.STOP
    assert out.policy_version == [0, 0, 0]
    assert out.prompt_tokens == 3 and out.cached_prefix_tokens == 0


@pytest.mark.parametrize("api", ["vllm", "sglang"])
def test_a_compact_token_array_prompt_round_trips(fake: FakeServer, api: str) -> None:
    """The gateway sends prompts as int32 arrays: sent as JSON lists, echoes still checked."""

    async def main() -> Any:
        engine = OpenAIServerEngine(fake.url, api=api, model=MODEL)
        try:
            prompt = array("i", [5, 6, 7])
            return await engine.generate(req(prompt, max_new_tokens=10, stop_token_ids=[488]))
        finally:
            await engine.close()

    out = run(main())
    assert out.token_ids == [224, 951, 488] and out.prompt_tokens == 3


def test_token_arrays_must_hold_integers() -> None:
    assert list(req(array("q", [1, 2])).prompt_ids) == [1, 2]
    with pytest.raises(ValueError, match="typecode 'd'"):
        req(array("d", [1.5]))
    with pytest.raises(ValueError):
        req(array("i"))


@pytest.mark.parametrize("api", ["vllm", "sglang"])
def test_eos_length_ignore_eos_and_cached_tokens(fake: FakeServer, api: str) -> None:
    async def main() -> list[Any]:
        engine = OpenAIServerEngine(fake.url, api=api, model=MODEL)
        try:
            eos = await engine.generate(req(PROMPT_EOS, max_new_tokens=5))
            ignored = await engine.generate(req(PROMPT_EOS, max_new_tokens=3, ignore_eos=True))
            follow_up = await engine.generate(req([*PROMPT_EOS, EOS, 17], max_new_tokens=2))
            return [eos, ignored, follow_up, engine.stats()]
        finally:
            await engine.close()

    eos, ignored, follow_up, stats = run(main())
    assert (eos.token_ids, eos.finish_reason) == ([EOS], FinishReason.STOP)
    assert ignored.token_ids == fake_sample(PROMPT_EOS, 3, [], True)[0]
    assert ignored.finish_reason is FinishReason.LENGTH and len(ignored.logprobs) == 3
    assert eos.cached_prefix_tokens == 0 and ignored.cached_prefix_tokens == 2
    assert follow_up.cached_prefix_tokens == 3  # prompt + EOS of the first call
    assert stats.prefix_cache_lookups == 3 and stats.prefix_cache_hits == 2
    assert stats.extra["cached_prompt_tokens_total"] == 5


def test_vllm_exact_request_body_model_discovery_and_auth(fake: FakeServer) -> None:
    async def main() -> None:
        engine = OpenAIServerEngine(fake.url + "/", api="vllm", api_key="sekret")
        try:
            r = req(
                [3, 4],
                max_new_tokens=4,
                temperature=0.7,
                top_p=0.9,
                top_k=0,
                stop_token_ids=[9],
                seed=11,
            )
            await engine.generate(r)
            await engine.generate(req([3, 4], max_new_tokens=1, top_k=40))
        finally:
            await engine.close()

    run(main())
    assert fake.state.model_lookups == 1  # discovered once, then cached
    (path, body), (_, second) = fake.state.bodies
    assert path == "/v1/completions"
    assert body == {
        "model": MODEL,
        "prompt": [3, 4],
        "max_tokens": 4,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": -1,
        "stop_token_ids": [9],
        "ignore_eos": False,
        "logprobs": 0,
        "return_token_ids": True,
        "skip_special_tokens": False,
        "echo": False,
        "stream": False,
        "seed": 11,
    }
    assert second["top_k"] == 40 and "seed" not in second
    assert fake.state.auth == ["Bearer sekret", "Bearer sekret"]


def test_sglang_exact_request_body(fake: FakeServer) -> None:
    async def main() -> None:
        engine = OpenAIServerEngine(fake.url, api="sglang")
        try:
            await engine.generate(
                req(
                    [3, 4],
                    max_new_tokens=4,
                    temperature=0.0,
                    top_k=-1,
                    stop_token_ids=[9, 10],
                    ignore_eos=True,
                    seed=5,
                )
            )
        finally:
            await engine.close()

    run(main())
    assert fake.state.model_lookups == 0
    assert fake.state.bodies == [
        (
            "/generate",
            {
                "input_ids": [3, 4],
                "sampling_params": {
                    "max_new_tokens": 4,
                    "temperature": 0.0,
                    "top_p": 1.0,
                    "top_k": -1,
                    "stop_token_ids": [9, 10],
                    "ignore_eos": True,
                    "skip_special_tokens": False,
                    "no_stop_trim": True,
                    "sampling_seed": 5,
                },
                "return_logprob": True,
                "logprob_start_len": -1,
                "stream": False,
            },
        )
    ]
    assert fake.state.auth == [None]


# --- errors fail closed --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "prompt", "model", "status", "words"),
    [
        ("vllm", [1, 2], "other-model", 404, "The model `other-model` does not exist."),
        ("vllm", [1, 5000], MODEL, 400, "Token id 5000 is out of vocabulary"),
        ("vllm", [F_HTTP_500, 1], MODEL, 500, "boom: EngineCore died"),
        ("sglang", [1, 5000], None, 400, "exceeds the vocabulary size"),
        ("sglang", [F_HTTP_500, 1], None, 500, "boom: scheduler died"),
    ],
)
def test_http_errors_carry_the_server_message(
    fake: FakeServer, api: str, prompt: list[int], model: str | None, status: int, words: str
) -> None:
    async def main() -> None:
        engine = OpenAIServerEngine(fake.url, api=api, model=model)
        try:
            await engine.generate(req(prompt))
        finally:
            assert engine.stats().extra["requests_failed"] == 1
            await engine.close()

    with pytest.raises(EngineServerError) as info:
        run(main())
    assert info.value.status_code == status
    assert words in str(info.value) and words in info.value.server_message


@pytest.mark.parametrize(
    ("api", "fault", "words"),
    [
        ("vllm", F_DROP_LOGPROB, "misaligned engine output: 3 tokens but 2 logprobs"),
        ("vllm", F_NULL_LOGPROB, "token_logprobs[0] is None"),
        ("vllm", F_NO_TOKEN_IDS, "return_token_ids"),
        ("vllm", F_BAD_FINISH, "finish_reason 'content_filter'"),
        ("vllm", F_OTHER_PROMPT, "different prompt"),
        ("vllm", F_TRIM_STOP, "trimmed the stop token"),
        ("sglang", F_DROP_LOGPROB, "misaligned SGLang answer: 3 output_ids but 2"),
        ("sglang", F_NO_TOKEN_IDS, "output_token_logprobs"),
        ("sglang", F_BAD_FINISH, "'cancelled'"),
    ],
)
def test_bad_answers_fail_closed(fake: FakeServer, api: str, fault: int, words: str) -> None:
    async def main() -> None:
        engine = OpenAIServerEngine(fake.url, api=api, model=MODEL)
        try:
            await engine.generate(req([fault, 5, 6, 7], max_new_tokens=3, stop_token_ids=[488]))
        finally:
            await engine.close()

    with pytest.raises(EngineProtocolError) as info:
        run(main())
    assert words in str(info.value)


def test_finish_reason_mapping() -> None:
    assert vllm_finish_reason("stop") is FinishReason.STOP
    assert vllm_finish_reason("length") is FinishReason.LENGTH
    assert vllm_finish_reason("abort") is FinishReason.ABORT
    assert sglang_finish_reason({"type": "stop", "matched": 2}) is FinishReason.STOP
    assert sglang_finish_reason({"type": "length", "length": 4}) is FinishReason.LENGTH
    assert sglang_finish_reason({"type": "abort", "message": "paused"}) is FinishReason.ABORT
    for bad in ("repetition", "error", None, 3):
        with pytest.raises(EngineProtocolError):
            vllm_finish_reason(bad)
    for bad_sgl in (None, "stop", {"type": "error"}, {}):
        with pytest.raises(EngineProtocolError):
            sglang_finish_reason(bad_sgl)


def test_parsers_reject_more_tokens_than_asked() -> None:
    r = req([1], max_new_tokens=1)
    vllm = {
        "choices": [
            {
                "token_ids": [4, 5],
                "logprobs": {"token_logprobs": [-1.0, -1.0]},
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 1},
    }
    sglang = {
        "meta_info": {
            "output_token_logprobs": [[-1.0, 4, None], [-1.0, 5, None]],
            "finish_reason": {"type": "length"},
            "prompt_tokens": 1,
        }
    }
    with pytest.raises(EngineProtocolError, match="max_new_tokens=1"):
        parse_vllm_completion(vllm, r)
    with pytest.raises(EngineProtocolError, match="max_new_tokens=1"):
        parse_sglang_generate(sglang, r)


# --- transport: retries, timeouts, concurrency --------------------------------------------


def test_connection_refused_retries_then_raises() -> None:
    port = _free_port()  # nothing listens there any more

    async def main() -> None:
        engine = OpenAIServerEngine(f"http://127.0.0.1:{port}", api="sglang", max_retries=2)
        engine.retry_backoff_s = 0.01
        try:
            await engine.generate(req([1, 2]))
        finally:
            assert engine.stats().extra["retries"] == 2
            await engine.close()

    with pytest.raises(EngineUnavailableError, match="after 2 retries") as info:
        run(main())
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_retry_succeeds_once_the_server_listens(fake: FakeServer) -> None:
    port = _free_port()
    target = int(fake.url.rsplit(":", 1)[1])

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass  # the other side hung up; the test checks the engine, not the proxy
        finally:
            writer.close()

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def main() -> Any:
        engine = OpenAIServerEngine(f"http://127.0.0.1:{port}", api="sglang", max_retries=6)
        engine.retry_backoff_s = 0.05
        task = asyncio.create_task(engine.generate(req([5, 6, 7], max_new_tokens=2)))
        await asyncio.sleep(0.12)
        server = await asyncio.start_server(proxy, "127.0.0.1", port)
        try:
            return await task, engine.stats()
        finally:
            await engine.close()
            server.close()

    out, stats = run(main())
    assert out.token_ids == [224, 951]
    assert stats.extra["retries"] >= 1


def test_timeout_raises_engine_timeout(fake: FakeServer) -> None:
    async def main() -> None:
        engine = OpenAIServerEngine(fake.url, api="sglang", timeout_s=0.2)
        try:
            await engine.generate(req([F_DELAY, 100, 1]))
        finally:
            await engine.close()

    start = time.monotonic()
    with pytest.raises(EngineTimeoutError, match="timeout_s=0.2"):
        run(main())
    assert time.monotonic() - start < 0.9


@pytest.mark.parametrize("api", ["vllm", "sglang"])
def test_32_concurrent_requests_respect_max_concurrency(fake: FakeServer, api: str) -> None:
    async def main() -> list[Any]:
        engine = OpenAIServerEngine(fake.url, api=api, model=MODEL, max_concurrency=8)
        try:
            prompts = [[F_DELAY, 2, i] for i in range(32)]
            return await asyncio.gather(
                *(engine.generate(req(p, max_new_tokens=4, ignore_eos=True)) for p in prompts)
            )
        finally:
            await engine.close()

    outs = run(main())
    assert len(outs) == 32
    for i, out in enumerate(outs):
        assert out.token_ids == fake_sample([i], 4, [], True)[0]
        assert out.logprobs == fake_logprobs(4)
    assert fake.state.max_inflight == 8


# --- pause, weights, close -------------------------------------------------------------------


def test_pause_holds_new_calls_until_resume(fake: FakeServer) -> None:
    async def main() -> Any:
        engine = OpenAIServerEngine(fake.url, api="vllm", model=MODEL)
        try:
            await engine.pause()
            task = asyncio.create_task(engine.generate(req([5, 6, 7], max_new_tokens=2)))
            await asyncio.sleep(0.1)
            held = (task.done(), engine.stats(), list(fake.state.bodies))
            await engine.resume()
            return held, await task, engine.stats()
        finally:
            await engine.close()

    (done, paused_stats, bodies), out, stats = run(main())
    assert not done and bodies == []
    assert paused_stats.paused and paused_stats.waiting_requests == 1
    assert paused_stats.queued_tokens == 3 + 2
    assert out.token_ids == [224, 951]
    assert not stats.paused and stats.waiting_requests == 0 and stats.queued_tokens == 0


def test_pause_abort_drops_inflight_calls(fake: FakeServer) -> None:
    async def main() -> Any:
        engine = OpenAIServerEngine(fake.url, api="sglang")
        try:
            inflight = asyncio.create_task(engine.generate(req([F_DELAY, 100, 1])))
            await asyncio.sleep(0.1)
            await engine.pause(mode="abort")
            aborted = await inflight
            held = asyncio.create_task(engine.generate(req([5, 6, 7], max_new_tokens=1)))
            await asyncio.sleep(0.05)
            assert not held.done()
            await engine.resume()
            return aborted, await held
        finally:
            await engine.close()

    aborted, after = run(main())
    assert aborted.finish_reason is FinishReason.ABORT and aborted.token_ids == []
    assert after.token_ids == [224] and after.finish_reason is FinishReason.LENGTH


def test_sglang_update_weights_drains_then_stamps_version(fake: FakeServer, tmp_path) -> None:
    async def main() -> Any:
        engine = OpenAIServerEngine(fake.url, api="sglang")
        try:
            slow = asyncio.create_task(engine.generate(req([F_DELAY, 15, 7], max_new_tokens=2)))
            await asyncio.sleep(0.05)
            await engine.update_weights(tmp_path, version=7)
            after = await engine.generate(req([5, 6, 7], max_new_tokens=3))
            return await slow, after, engine.stats()
        finally:
            await engine.close()

    slow, after, stats = run(main())
    # Slow calls of earlier tests may still end on the server; look at this test's only.
    events = [name for name, tag in fake.state.events if tag in (7, 0)]
    assert events == ["generate-start", "generate-end", "update", "generate-start", "generate-end"]
    assert ("/update_weights_from_disk", {"model_path": str(tmp_path)}) in fake.state.bodies
    assert slow.policy_version == [0, 0]
    assert after.policy_version == [7, 7, 7]
    assert stats.policy_version == 7 and stats.extra["weight_updates"] == 1


def test_sglang_update_weights_failure_keeps_version(fake: FakeServer, tmp_path) -> None:
    async def main() -> Any:
        engine = OpenAIServerEngine(fake.url, api="sglang")
        try:
            with pytest.raises(EngineServerError, match="Failed to get weights iterator"):
                await engine.update_weights(str(tmp_path / "missing"), version=1)
            with pytest.raises(TypeError, match="checkpoint directory path"):
                await engine.update_weights({"w": 1}, version=1)
            return await engine.generate(req([5, 6, 7], max_new_tokens=1)), engine.stats()
        finally:
            await engine.close()

    out, stats = run(main())
    assert out.policy_version == [0] and stats.policy_version == 0


def test_vllm_update_weights_is_not_implemented(fake: FakeServer, tmp_path) -> None:
    async def main() -> None:
        engine = OpenAIServerEngine(fake.url, api="vllm", model=MODEL)
        try:
            await engine.update_weights(tmp_path, version=1)
        finally:
            await engine.close()

    with pytest.raises(NotImplementedError, match="verl's rollout workers"):
        run(main())
    assert fake.state.bodies == []


def test_close_aborts_waiting_and_inflight_calls(fake: FakeServer) -> None:
    async def main() -> Any:
        engine = OpenAIServerEngine(fake.url, api="sglang", max_concurrency=1)
        inflight = asyncio.create_task(engine.generate(req([F_DELAY, 100, 1])))
        waiting = asyncio.create_task(engine.generate(req([5, 6, 7])))
        await asyncio.sleep(0.1)
        start = time.monotonic()
        await engine.close()
        outs = await asyncio.gather(inflight, waiting)
        with pytest.raises(RuntimeError, match="closed"):
            await engine.generate(req([1]))
        return outs, time.monotonic() - start, engine.stats()

    (first, second), elapsed, stats = run(main())
    for out in (first, second):
        assert out.finish_reason is FinishReason.ABORT
        assert out.token_ids == out.logprobs == out.policy_version == []
    assert elapsed < 1.0
    assert stats.running_requests == stats.waiting_requests == stats.queued_tokens == 0
    assert stats.extra["requests_aborted"] == 2


def test_caller_cancellation_propagates_and_releases_the_slot(fake: FakeServer) -> None:
    async def main() -> Any:
        engine = OpenAIServerEngine(fake.url, api="sglang", max_concurrency=1)
        try:
            task = asyncio.create_task(engine.generate(req([F_DELAY, 100, 1])))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return await engine.generate(req([5, 6, 7], max_new_tokens=1)), engine.stats()
        finally:
            await engine.close()

    out, stats = run(main())
    assert out.token_ids == [224]
    assert stats.running_requests == 0 and stats.extra["requests_failed"] == 0


def test_constructor_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="api must be"):
        OpenAIServerEngine("http://x", api="tgi")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="base_url"):
        OpenAIServerEngine("127.0.0.1:8000")
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAIServerEngine("http://x", max_concurrency=0)
    with pytest.raises(ValueError, match="timeout_s"):
        OpenAIServerEngine("http://x", timeout_s=0)


def test_kv_capacity_and_free_memory_come_from_the_servers_metrics(fake: FakeServer) -> None:
    fake.state.metrics = (
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",engine="0"} 1.0\n'
    )

    async def main() -> tuple[int | None, ...]:
        engine = OpenAIServerEngine(fake.url, api="vllm", model=MODEL)
        before = engine.stats()
        free = await engine.refresh_server_stats()
        after = engine.stats()
        await engine.close()
        return (
            before.free_kv_tokens,
            before.kv_capacity_tokens,
            free,
            after.free_kv_tokens,
            after.kv_capacity_tokens,
        )

    assert run(main()) == (None, None, 12_000, 12_000, 16_000)
