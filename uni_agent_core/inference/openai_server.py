"""`OpenAIServerEngine`: the `Engine` contract over a running vLLM or SGLang HTTP server.

Token ids go in and token ids + logprobs come out, exactly as the server sampled them (see
`server_wire` for the wire formats and the fail-closed parsing). This module owns the client
side: one pooled `httpx.AsyncClient` with an explicit timeout, an admission gate (pause,
weight update, `max_concurrency`), connection retries, weight-version stamping and stats.

Semantics worth knowing:
- `pause()` is a client-side gate: generate calls that arrive while paused wait until
  `resume()`; calls already sent to the server are not interrupted and finish normally
  (`pause(mode="abort")` drops them instead, see `pause`).
- `update_weights()` (SGLang only) closes the gate, waits until no call is in flight, asks the
  server to load the checkpoint (`POST /update_weights_from_disk`), then stamps every later
  token with the new version. A call's tokens carry the version current when it was sent.
- Retries happen only on connection errors raised before the request reached the server
  (refused/unreachable, connect timeout), so a retried call never samples twice.
- `close()` lets waiting and in-flight calls finish with `FinishReason.ABORT` and no tokens.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any, Literal

import httpx

from uni_agent_core.inference.server_metrics import KvMemory, kv_memory
from uni_agent_core.inference.server_wire import (
    EngineProtocolError,
    EngineServerError,
    EngineTimeoutError,
    EngineUnavailableError,
    first_served_model,
    parse_sglang_generate,
    parse_vllm_completion,
    server_error_message,
    sglang_generate_body,
    vllm_completion_body,
)
from uni_agent_core.inference.types import (
    EngineClosedError,
    EngineDefaults,
    EngineStats,
    GenerateRequest,
    PauseMode,
    TokenOutput,
)

__all__ = [
    "EngineProtocolError",
    "EngineServerError",
    "EngineTimeoutError",
    "EngineUnavailableError",
    "OpenAIServerEngine",
]

logger = logging.getLogger(__name__)

ServerApi = Literal["vllm", "sglang"]

_MAX_BACKOFF_S = 8.0
_ADMIN_CONNECTIONS = 4
"""Pool connections kept beyond `max_concurrency` for model discovery and weight updates."""


class OpenAIServerEngine(EngineDefaults):
    """An `Engine` backed by a vLLM (`/v1/completions`) or SGLang (`/generate`) server.

    Attributes:
        retry_backoff_s: Delay before the first connection retry; it doubles on every further
            retry, capped at 8 s.
    """

    retry_backoff_s: float = 0.5

    def __init__(
        self,
        base_url: str,
        *,
        api: ServerApi = "vllm",
        model: str | None = None,
        timeout_s: float | None = 600.0,
        connect_timeout_s: float = 10.0,
        api_key: str | None = None,
        max_concurrency: int = 256,
        max_retries: int = 3,
    ) -> None:
        """Create the engine; no connection is opened until the first call.

        Args:
            base_url: Server root, e.g. `http://127.0.0.1:8000` (no `/v1` suffix).
            api: Which server speaks at `base_url`: `vllm` or `sglang`.
            model: vLLM's served model name; when None it is read once from `GET /v1/models`.
                Ignored for SGLang.
            timeout_s: HTTP timeout of every read, write and pool wait; None waits as long as
                generation takes (time limits belong on turns and sandboxes).
            connect_timeout_s: Seconds allowed to open a connection.
            api_key: Sent as `Authorization: Bearer <key>` when set.
            max_concurrency: Most generate calls in flight at once; more wait in line.
            max_retries: Connection retries of a call before `EngineUnavailableError`.
        """
        if api not in ("vllm", "sglang"):
            raise ValueError(f"api must be 'vllm' or 'sglang', got {api!r}")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive or None, got {timeout_s}")
        if not connect_timeout_s > 0:
            raise ValueError(f"connect_timeout_s must be positive, got {connect_timeout_s}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {max_retries}")
        self.base_url = base_url.rstrip("/")
        self.api: ServerApi = api
        self.timeout_s = timeout_s
        self._model = model
        self._max_concurrency = max_concurrency
        self._max_retries = max_retries
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        connections = max_concurrency + _ADMIN_CONNECTIONS
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )
        self._model_lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._inflight: set[asyncio.Future[Any]] = set()
        self._version = 0
        self._paused = False
        self._updating = False
        self._closed = False
        self._running = 0
        self._waiting = 0
        self._queued_tokens = 0
        self._server_kv: KvMemory | None = None
        self._retries = 0
        self._completed = 0
        self._failed = 0
        self._aborted = 0
        self._cache_hits = 0
        self._cached_tokens_total = 0
        self._weight_updates = 0

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        """Sample a continuation of `request.prompt_ids` on the server.

        Args:
            request: Prompt token ids and sampling parameters.

        Returns:
            The sampled token ids verbatim, one logprob and one policy version per token. A
            call ended by `close()` or `pause(mode="abort")` returns `abort` with no tokens.

        Raises:
            EngineServerError: The server answered with an HTTP error (its message included).
            EngineProtocolError: The answer lacks token ids or aligned logprobs.
            EngineUnavailableError: No connection after `max_retries` retries.
            EngineTimeoutError: No answer within `timeout_s`.
            EngineClosedError: The engine was closed before the call.
        """
        self._require_open()
        model = await self._model_name() if self.api == "vllm" else ""
        cost = len(request.prompt_ids) + request.max_new_tokens
        self._waiting += 1
        self._queued_tokens += cost
        try:
            await self._wait_until(lambda: self._closed or self._admissible())
        except BaseException:
            self._queued_tokens -= cost
            raise
        finally:
            self._waiting -= 1
        if self._closed:
            self._queued_tokens -= cost
            return self._abort_output(request)
        self._running += 1
        version = self._version
        try:
            if self.api == "vllm":
                path, body = "/v1/completions", vllm_completion_body(request, model)
            else:
                path, body = "/generate", sglang_generate_body(request)
            call = asyncio.ensure_future(self._request("POST", path, body))
            self._inflight.add(call)
            try:
                await asyncio.wait({call})
            finally:
                # Our caller was cancelled: stop the HTTP call too.
                if not call.done():
                    call.cancel()
                self._inflight.discard(call)
            if call.cancelled():  # close() or pause(mode="abort") cancelled it
                return self._abort_output(request)
            payload = call.result()
            if self.api == "vllm":
                parsed = parse_vllm_completion(payload, request)
            else:
                parsed = parse_sglang_generate(payload, request)
        except Exception:
            self._failed += 1
            raise
        finally:
            self._running -= 1
            self._queued_tokens -= cost
            self._notify()
        self._completed += 1
        self._cached_tokens_total += parsed.cached_tokens
        self._cache_hits += int(parsed.cached_tokens > 0)
        return TokenOutput(
            request_id=request.request_id,
            token_ids=parsed.token_ids,
            logprobs=parsed.logprobs,
            finish_reason=parsed.finish_reason,
            policy_version=[version] * len(parsed.token_ids),
            cached_prefix_tokens=parsed.cached_tokens,
            prompt_tokens=parsed.prompt_tokens,
        )

    async def update_weights(self, state: Any, version: int) -> None:
        """Make the server load new weights; tokens sampled afterwards carry `version`.

        Args:
            state: For SGLang, a checkpoint directory the *server* can read (str or PathLike).
            version: The policy version of the new weights.

        Raises:
            NotImplementedError: For vLLM servers (see the message).
            TypeError: `state` is not a path or `version` not an int.
            EngineServerError: SGLang refused the checkpoint; the version is unchanged.
        """
        if self.api == "vllm":
            raise NotImplementedError(
                "vLLM's OpenAI-compatible server has no standard HTTP endpoint that loads new "
                "weights (its /update_weights family exists only in VLLM_SERVER_DEV_MODE and "
                "expects an NCCL/IPC weight-transfer engine, not a checkpoint). Weight sync "
                "for vLLM servers goes through verl's rollout workers (the verl integration, "
                "uni_agent_core/rl/verl), which own the vLLM engines in-process."
            )
        if not isinstance(state, str | os.PathLike):
            raise TypeError(
                "SGLang update_weights needs a checkpoint directory path (str or PathLike) that "
                f"the server can read, got {type(state).__name__}; in-memory state dicts go "
                "through verl's rollout workers"
            )
        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError(f"version must be an int, got {version!r}")
        self._require_open()
        if self._updating:
            raise RuntimeError("update_weights is already running; await it before the next one")
        self._updating = True
        try:
            # Calls in flight finish on the old weights and keep the old version.
            await self._wait_until(lambda: self._closed or self._running == 0)
            self._require_open()
            url = f"{self.base_url}/update_weights_from_disk"
            payload = await self._request(
                "POST", "/update_weights_from_disk", {"model_path": os.fspath(state)}
            )
            if not isinstance(payload, dict) or payload.get("success") is not True:
                message = payload.get("message") if isinstance(payload, dict) else payload
                raise EngineServerError(url, 200, f"weight update not confirmed: {message!r}")
            self._version = version
            self._weight_updates += 1
        finally:
            self._updating = False
            self._notify()

    async def pause(self, mode: PauseMode = "keep") -> None:
        """Hold new generate calls until `resume()`.

        Args:
            mode: `keep` lets calls already sent to the server finish normally; `abort` also
                drops them client-side: they return `abort` with no tokens (a non-streaming
                answer carries no partial output), and the server stops them when it notices
                the closed connection.
        """
        if mode not in ("keep", "abort"):
            raise ValueError(f"pause mode must be 'keep' or 'abort', got {mode!r}")
        self._paused = True
        self._notify()
        if mode == "abort":
            await self._cancel_inflight()

    async def resume(self) -> None:
        """Let held generate calls go to the server (on the current weights)."""
        self._paused = False
        self._notify()

    async def refresh_server_stats(self) -> int | None:
        """Read the server's KV capacity and free KV tokens from its `/metrics` (kept for
        `stats()`); returns the free tokens.

        Returns None (and keeps reporting None) when the server exports no such figures.

        Raises:
            EngineUnavailableError: the server cannot be reached.
        """
        try:
            response = await self._client.get("/metrics")
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise EngineUnavailableError(f"{self.base_url}/metrics unreachable: {exc}") from exc
        if response.status_code == 200:
            self._server_kv = kv_memory(response.text, self.api)
        return None if self._server_kv is None else self._server_kv.free_tokens

    def stats(self) -> EngineStats:
        """Client-side load figures, and the server's KV capacity and free KV tokens as of the
        last `refresh_server_stats()` (its cached prefixes are not visible from here)."""
        kv = self._server_kv
        return EngineStats(
            running_requests=self._running,
            waiting_requests=self._waiting,
            queued_tokens=self._queued_tokens,
            free_kv_tokens=None if kv is None else kv.free_tokens,
            kv_capacity_tokens=None if kv is None else kv.capacity_tokens,
            prefix_cache_hits=self._cache_hits,
            prefix_cache_lookups=self._completed,
            policy_version=self._version,
            paused=self._paused,
            extra={
                "api": self.api,
                "base_url": self.base_url,
                "retries": self._retries,
                "requests_completed": self._completed,
                "requests_failed": self._failed,
                "requests_aborted": self._aborted,
                "cached_prompt_tokens_total": self._cached_tokens_total,
                "weight_updates": self._weight_updates,
            },
        )

    async def close(self) -> None:
        """Finish waiting and in-flight calls with `abort`, then close the HTTP client."""
        if self._closed:
            return
        self._closed = True
        self._notify()
        await self._cancel_inflight()
        await self._client.aclose()

    async def _cancel_inflight(self) -> None:
        calls = list(self._inflight)
        for call in calls:
            call.cancel()
        if calls:
            # return_exceptions: collect the calls' own CancelledErrors, not ours.
            await asyncio.gather(*calls, return_exceptions=True)

    def _admissible(self) -> bool:
        return not self._paused and not self._updating and self._running < self._max_concurrency

    def _notify(self) -> None:
        # Wake every waiter; each re-checks its own condition against the new state.
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._changed.wait()

    def _require_open(self) -> None:
        if self._closed:
            raise EngineClosedError("OpenAIServerEngine is closed; create a new engine")

    def _abort_output(self, request: GenerateRequest) -> TokenOutput:
        self._aborted += 1
        return TokenOutput.aborted(request)

    async def _model_name(self) -> str:
        if self._model is None:
            async with self._model_lock:
                if self._model is None:
                    self._model = first_served_model(await self._request("GET", "/v1/models"))
        return self._model

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.base_url}{path}"
        for attempt in range(self._max_retries + 1):
            try:
                response = await self._client.request(method, path, json=body)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # The request never reached the server, so sending it again cannot sample twice.
                if attempt == self._max_retries:
                    raise EngineUnavailableError(
                        f"cannot connect to {self.api} server at {url} after "
                        f"{self._max_retries} retries: {exc!r}"
                    ) from exc
                self._retries += 1
                delay = min(self.retry_backoff_s * 2**attempt, _MAX_BACKOFF_S)
                logger.warning(
                    "connect to %s failed (%r); retry %d/%d in %.2fs",
                    url,
                    exc,
                    attempt + 1,
                    self._max_retries,
                    delay,
                )
                await asyncio.sleep(delay)
            except httpx.TimeoutException as exc:
                raise EngineTimeoutError(
                    f"{self.api} server at {url} did not answer within timeout_s={self.timeout_s}"
                ) from exc
        if response.status_code >= 400:
            raise EngineServerError(url, response.status_code, server_error_message(response))
        try:
            return response.json()
        except ValueError as exc:
            raise EngineProtocolError(
                f"{url} answered HTTP {response.status_code} with a body that is not JSON: "
                f"{response.text[:200]!r}"
            ) from exc
