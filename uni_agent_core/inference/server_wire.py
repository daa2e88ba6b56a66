"""Wire formats of the vLLM and SGLang HTTP servers that `OpenAIServerEngine` speaks.

Pure functions: build a request body from a `GenerateRequest`, parse a response body into
token ids, logprobs and a `FinishReason`, and turn an error response into a readable message.
Parsing fails closed: a response without token ids, with fewer (or null) logprobs than tokens,
with a prompt other than the one sent, or with a finish reason outside `stop|length|abort`
raises `EngineProtocolError`. Nothing here ever fabricates a logprob or re-tokenizes text.

Field names follow the servers' sources:
- vLLM `POST /v1/completions`: `CompletionRequest` / `CompletionResponseChoice` in
  `vllm/entrypoints/openai/completion/protocol.py` (`return_token_ids` since vLLM 0.10.2).
- SGLang `POST /generate`: `GenerateReqInput` in `python/sglang/srt/managers/io_struct.py`,
  `SamplingParams` in `python/sglang/srt/sampling/sampling_params.py`, `meta_info` as built
  by the tokenizer manager (`output_token_logprobs` = `[logprob, token_id, text|null]`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import httpx

from uni_agent_core.errors import AgentRLError
from uni_agent_core.inference.types import FinishReason, GenerateRequest

_MAX_ERROR_CHARS = 2000
_FINISH_VALUES = frozenset(reason.value for reason in FinishReason)


class EngineServerError(AgentRLError, RuntimeError):
    """The inference server answered with an HTTP error status."""

    def __init__(self, url: str, status_code: int, message: str) -> None:
        super().__init__(f"{url} answered HTTP {status_code}: {message}")
        self.url = url
        self.status_code = status_code
        self.server_message = message


class EngineProtocolError(AgentRLError, RuntimeError):
    """The server's answer breaks the engine contract (missing or misaligned ids/logprobs)."""


class EngineUnavailableError(AgentRLError, ConnectionError):
    """No connection to the server could be opened, even after the configured retries."""


class EngineTimeoutError(AgentRLError, TimeoutError):
    """The server did not answer within the engine's `timeout_s`."""


@dataclass(frozen=True)
class ParsedGeneration:
    """The contract-relevant part of one server answer."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    prompt_tokens: int
    cached_tokens: int


def _top_k(request: GenerateRequest) -> int:
    # Both servers take -1 for "disabled"; SGLang rejects 0.
    return request.top_k if request.top_k > 0 else -1


def vllm_completion_body(request: GenerateRequest, model: str) -> dict[str, Any]:
    """Build the JSON body of vLLM's `POST /v1/completions` for one token-id prompt.

    `logprobs: 0` asks for the sampled token's logprob only; `return_token_ids` makes vLLM
    return the sampled ids verbatim. Stop tokens (EOS or `stop_token_ids`) stay in vLLM's
    `token_ids` regardless of `include_stop_str_in_output`, which only concerns stop strings.

    Args:
        request: The generation request.
        model: The served model name (vLLM's `model` field).

    Returns:
        The request body.
    """
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(request.prompt_ids),
        "max_tokens": request.max_new_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "top_k": _top_k(request),
        "stop_token_ids": list(request.stop_token_ids),
        "ignore_eos": request.ignore_eos,
        "logprobs": 0,
        "return_token_ids": True,
        "skip_special_tokens": False,
        "echo": False,
        "stream": False,
    }
    if request.seed is not None:
        body["seed"] = request.seed
    return body


def sglang_generate_body(request: GenerateRequest) -> dict[str, Any]:
    """Build the JSON body of SGLang's `POST /generate` for one token-id prompt.

    `no_stop_trim` keeps a matched stop token in the output; `return_logprob` with the default
    `logprob_start_len=-1` returns logprobs of the output tokens only.

    Args:
        request: The generation request.

    Returns:
        The request body.
    """
    sampling: dict[str, Any] = {
        "max_new_tokens": request.max_new_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "top_k": _top_k(request),
        "stop_token_ids": list(request.stop_token_ids),
        "ignore_eos": request.ignore_eos,
        "skip_special_tokens": False,
        "no_stop_trim": True,
    }
    if request.seed is not None:
        sampling["sampling_seed"] = request.seed
    return {
        "input_ids": list(request.prompt_ids),
        "sampling_params": sampling,
        "return_logprob": True,
        "logprob_start_len": -1,
        "stream": False,
    }


def first_served_model(payload: Any) -> str:
    """Return the first model id of an OpenAI `GET /v1/models` answer.

    Raises:
        EngineProtocolError: The answer lists no model.
    """
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise EngineProtocolError(f"GET /v1/models listed no model: {_clip(payload)}")
    model = data[0].get("id")
    if not isinstance(model, str) or not model:
        raise EngineProtocolError(f"GET /v1/models gave a model without an id: {_clip(data[0])}")
    return model


def vllm_finish_reason(value: Any) -> FinishReason:
    """Map vLLM's `finish_reason` string to a `FinishReason`.

    Raises:
        EngineProtocolError: Any value other than `stop`, `length` or `abort`.
    """
    if isinstance(value, str) and value in _FINISH_VALUES:
        return FinishReason(value)
    raise EngineProtocolError(
        f"vLLM finish_reason {value!r} is not one of 'stop', 'length', 'abort'"
    )


def sglang_finish_reason(value: Any) -> FinishReason:
    """Map SGLang's `meta_info.finish_reason` (`{"type": ...}`) to a `FinishReason`.

    Raises:
        EngineProtocolError: A missing reason or a type other than `stop`, `length`, `abort`.
    """
    kind = value.get("type") if isinstance(value, dict) else None
    if isinstance(kind, str) and kind in _FINISH_VALUES:
        return FinishReason(kind)
    raise EngineProtocolError(
        f"SGLang finish_reason {value!r} has no type among 'stop', 'length', 'abort'"
    )


def parse_vllm_completion(payload: Any, request: GenerateRequest) -> ParsedGeneration:
    """Parse vLLM's `/v1/completions` answer to a request built by `vllm_completion_body`.

    Raises:
        EngineProtocolError: The answer lacks token ids or logprobs, misaligns them, echoes a
            different prompt, or drops the stop token it reports.
    """
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise EngineProtocolError(f"vLLM answer needs exactly one choice: {_clip(payload)}")
    choice = choices[0]
    token_ids = choice.get("token_ids")
    if token_ids is None:
        raise EngineProtocolError(
            "vLLM answer has no choices[0].token_ids: the server ignored return_token_ids "
            "(added in vLLM 0.10.2); upgrade the server, token ids are never re-derived from text"
        )
    token_ids = _int_list(token_ids, "vLLM choices[0].token_ids")
    logprobs_obj = choice.get("logprobs")
    raw_logprobs = logprobs_obj.get("token_logprobs") if isinstance(logprobs_obj, dict) else None
    logprobs = _aligned_logprobs(raw_logprobs, token_ids, "vLLM choices[0].logprobs.token_logprobs")
    finish = vllm_finish_reason(choice.get("finish_reason"))
    if finish is FinishReason.STOP:
        _check_stop_token(choice.get("stop_reason"), token_ids, "vLLM stop_reason")

    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    echoed = choice.get("prompt_token_ids")
    if echoed is not None:
        _check_prompt(_int_list(echoed, "vLLM choices[0].prompt_token_ids"), request)
        prompt_tokens = len(echoed)
    else:
        prompt_tokens = _count(usage.get("prompt_tokens"), len(request.prompt_ids))
        _check_prompt_len(prompt_tokens, request, "vLLM usage.prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens") if isinstance(details, dict) else None, 0)
    _check_length(token_ids, request)
    return ParsedGeneration(token_ids, logprobs, finish, prompt_tokens, cached)


def parse_sglang_generate(payload: Any, request: GenerateRequest) -> ParsedGeneration:
    """Parse SGLang's `/generate` answer to a request built by `sglang_generate_body`.

    Token ids come from `meta_info.output_token_logprobs`; when the answer also carries
    `output_ids`, both must agree.

    Raises:
        EngineProtocolError: The answer lacks logprobs, misaligns them with `output_ids`, or
            reports a prompt length other than the one sent.
    """
    if isinstance(payload, list) and len(payload) == 1:
        payload = payload[0]
    meta = payload.get("meta_info") if isinstance(payload, dict) else None
    if not isinstance(meta, dict):
        raise EngineProtocolError(f"SGLang answer has no meta_info: {_clip(payload)}")
    triples = meta.get("output_token_logprobs")
    if not isinstance(triples, list):
        raise EngineProtocolError(
            "SGLang answer has no meta_info.output_token_logprobs: the server ignored "
            "return_logprob; logprobs are never fabricated"
        )
    if not all(isinstance(t, list | tuple) and len(t) >= 2 for t in triples):
        raise EngineProtocolError(
            f"SGLang output_token_logprobs entries must be [logprob, token_id, text]: "
            f"{_clip(triples)}"
        )
    token_ids = _int_list([t[1] for t in triples], "SGLang output_token_logprobs token ids")
    output_ids = payload.get("output_ids")
    if output_ids is not None:
        output_ids = _int_list(output_ids, "SGLang output_ids")
        if len(output_ids) != len(token_ids):
            raise EngineProtocolError(
                f"misaligned SGLang answer: {len(output_ids)} output_ids but "
                f"{len(token_ids)} output_token_logprobs"
            )
        if output_ids != token_ids:
            raise EngineProtocolError("SGLang output_ids disagree with output_token_logprobs ids")
    logprobs = _aligned_logprobs([t[0] for t in triples], token_ids, "SGLang logprobs")
    finish = sglang_finish_reason(meta.get("finish_reason"))
    if finish is FinishReason.STOP:
        _check_stop_token(meta["finish_reason"].get("matched"), token_ids, "SGLang matched")
    prompt_tokens = _count(meta.get("prompt_tokens"), len(request.prompt_ids))
    _check_prompt_len(prompt_tokens, request, "SGLang meta_info.prompt_tokens")
    cached = _count(meta.get("cached_tokens"), 0)
    _check_length(token_ids, request)
    return ParsedGeneration(token_ids, logprobs, finish, prompt_tokens, cached)


def server_error_message(response: httpx.Response) -> str:
    """Extract the server's own words from an error response.

    Understands vLLM/SGLang `{"error": {"message": ...}}`, older flat `{"message": ...}`
    (also SGLang's `{"success": false, "message": ...}`) and FastAPI's `{"detail": ...}`.
    """
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()[:_MAX_ERROR_CHARS] or response.reason_phrase
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"][:_MAX_ERROR_CHARS]
        if isinstance(error, str):
            return error[:_MAX_ERROR_CHARS]
        for key in ("message", "detail"):
            value = data.get(key)
            if isinstance(value, str):
                return value[:_MAX_ERROR_CHARS]
            if value is not None:
                return _clip(value)
    return _clip(data)


def _clip(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text[:_MAX_ERROR_CHARS]


def _int_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise EngineProtocolError(f"{where} must be a list of integers, got {_clip(value)}")
    return value


def _aligned_logprobs(value: Any, token_ids: list[int], where: str) -> list[float]:
    if not isinstance(value, list):
        raise EngineProtocolError(
            f"{where} is missing ({len(token_ids)} tokens, no logprobs); "
            "logprobs are never fabricated"
        )
    if len(value) != len(token_ids):
        raise EngineProtocolError(
            f"misaligned engine output: {len(token_ids)} tokens but {len(value)} logprobs "
            f"in {where}; logprobs are never fabricated"
        )
    for i, lp in enumerate(value):
        if isinstance(lp, bool) or not isinstance(lp, int | float) or math.isnan(lp):
            raise EngineProtocolError(f"{where}[{i}] is {lp!r}, not a number")
    return [float(lp) for lp in value]


def _check_stop_token(matched: Any, token_ids: list[int], where: str) -> None:
    # A stop *token* the server names must be the last output token (contract: it is part of
    # the output). A None (vLLM on EOS) or a string (stop string) cannot be checked here.
    named_token = isinstance(matched, int) and not isinstance(matched, bool)
    if named_token and (not token_ids or token_ids[-1] != matched):
        raise EngineProtocolError(
            f"{where}={matched} but the output does not end with it: the server trimmed "
            "the stop token"
        )


def _check_prompt(echoed: list[int], request: GenerateRequest) -> None:
    if echoed != list(request.prompt_ids):
        raise EngineProtocolError(
            f"the server saw a different prompt ({len(echoed)} tokens) than was sent "
            f"({len(request.prompt_ids)} tokens): token-in/token-out is broken"
        )


def _check_prompt_len(prompt_tokens: int, request: GenerateRequest, where: str) -> None:
    if prompt_tokens != len(request.prompt_ids):
        raise EngineProtocolError(
            f"{where}={prompt_tokens} but {len(request.prompt_ids)} prompt tokens were sent"
        )


def _check_length(token_ids: list[int], request: GenerateRequest) -> None:
    if len(token_ids) > request.max_new_tokens:
        raise EngineProtocolError(
            f"the server returned {len(token_ids)} tokens for max_new_tokens="
            f"{request.max_new_tokens}"
        )


def _count(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EngineProtocolError(f"expected a non-negative token count, got {value!r}")
    return value
