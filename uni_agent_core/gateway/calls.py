"""A session's engine calls, as a compact log over its chains' token buffers.

By construction an engine call's prompt is its chain's first `prompt_len` tokens and its output
the `output_len` tokens after them, so nothing needs copying: the log keeps, per call, the chain
and those two lengths, its finish reason and whether a rollback superseded it — in typed arrays,
about 18 bytes a call, where a record object with its own ints and string cost ~160 bytes of
small long-lived objects (which also pin the allocator's memory between bursts).

A rollback cuts a chain under its latest call; that call's tokens are copied first (`supersede`),
so `/calls` still shows exactly what the engine was given and sampled.

Each call also keeps what an episode's trace shows of it (`model_call`): how it continued its
chain, when it started and how long it took, the cached prefix, the replica, and the tool calls
parsed from its reply (a few short strings, only for calls that made some).
"""

from __future__ import annotations

from array import array
from typing import ClassVar

from uni_agent_core.gateway.chain import Chain, Continuation
from uni_agent_core.types import EngineCall, ModelCall

_Tokens = tuple[array, array, array, array]
"""(prompt ids, output ids, output logprobs, output versions)."""


class CallLog:
    """The engine calls of one session, in call order."""

    __slots__ = (
        "_chains",
        "_prompt_lens",
        "_output_lens",
        "_reasons",
        "_superseded",
        "_frozen",
        "_continuation_codes",
        "_response_starts",
        "_cached",
        "_started",
        "_latencies",
        "_replicas",
        "_tool_calls",
    )

    _reason_names: ClassVar[list[str]] = []
    _reason_codes: ClassVar[dict[str, int]] = {}
    """Finish reasons and replica names seen by any log (a handful), shared so each call stores
    one byte for each."""
    _continuation_kinds: ClassVar[tuple[Continuation, ...]] = tuple(Continuation)

    def __init__(self) -> None:
        self._chains: list[Chain] = []
        self._prompt_lens = array("i")
        self._output_lens = array("i")
        self._reasons = array("B")
        self._superseded = array("B")
        self._frozen: dict[int, _Tokens] = {}
        self._continuation_codes = array("B")
        self._response_starts = array("i")
        self._cached = array("i")
        self._started = array("d")
        self._latencies = array("f")
        self._replicas = array("B")
        self._tool_calls: dict[int, list[dict[str, str]]] = {}

    def __len__(self) -> int:
        return len(self._chains)

    def append(
        self,
        chain: Chain,
        prompt_len: int,
        output_len: int,
        finish_reason: str,
        *,
        continuation: Continuation = Continuation.APPEND,
        response_start: int = 0,
        cached_tokens: int = 0,
        started_at: float = 0.0,
        latency_s: float = 0.0,
        replica: str | None = None,
        tool_calls: list[dict[str, str]] | None = None,
    ) -> int:
        """Record a call whose tokens now end `chain`'s buffer (its output from
        `response_start`); returns its index."""
        index = len(self._chains)
        self._reasons.append(self._reason_code(str(finish_reason)))
        self._replicas.append(self._reason_code(replica or ""))
        self._chains.append(chain)
        self._prompt_lens.append(prompt_len)
        self._output_lens.append(output_len)
        self._superseded.append(0)
        self._continuation_codes.append(self._continuation_kinds.index(continuation))
        self._response_starts.append(response_start)
        self._cached.append(cached_tokens)
        self._started.append(started_at)
        self._latencies.append(latency_s)
        if tool_calls:
            self._tool_calls[index] = tool_calls
        return index

    def supersede(self, i: int) -> None:
        """Mark call `i` as dropped by a rollback, keeping a copy of its tokens first."""
        if i not in self._frozen:
            self._frozen[i] = self._tokens(i)
        self._superseded[i] = 1

    def engine_call(self, i: int) -> EngineCall:
        """Call `i` as the API reports it."""
        prompt, output, logprobs, versions = self._tokens(i)
        return EngineCall.model_construct(
            chain_id=self._chains[i].id,
            prompt_ids=prompt.tolist(),
            output_ids=output.tolist(),
            output_logprobs=logprobs.tolist(),
            policy_version=versions.tolist(),
            finish_reason=self._reason_names[self._reasons[i]],
            superseded=bool(self._superseded[i]),
        )

    def engine_calls(self) -> list[EngineCall]:
        """Every call, in order."""
        return [self.engine_call(i) for i in range(len(self))]

    def model_call(self, i: int) -> ModelCall:
        """Call `i` as an episode's trace shows it (token ids stay in the chain)."""
        chain = self._chains[i]
        continuation = self._continuation_kinds[self._continuation_codes[i]]
        superseded = bool(self._superseded[i])
        return ModelCall(
            index=i,
            chain_id=chain.id,
            continuation=continuation.value,
            opened_by=chain.opened_by if continuation is Continuation.NEW else None,
            prompt_tokens=self._prompt_lens[i],
            completion_tokens=self._output_lens[i],
            cached_tokens=self._cached[i],
            finish_reason=self._reason_names[self._reasons[i]],
            replica=self._reason_names[self._replicas[i]] or None,
            started_at=self._started[i],
            latency_s=float(self._latencies[i]),
            response_start=self._response_starts[i],
            superseded=superseded,
            dropped_ids=self._frozen[i][1].tolist() if superseded else [],
            tool_calls=self._tool_calls.get(i, []),
        )

    def model_calls(self) -> list[ModelCall]:
        """Every call as its trace shows it, in order."""
        return [self.model_call(i) for i in range(len(self))]

    def _tokens(self, i: int) -> _Tokens:
        frozen = self._frozen.get(i)
        if frozen is not None:
            return frozen
        chain = self._chains[i]
        start = self._prompt_lens[i] - len(chain.prompt_ids)
        end = start + self._output_lens[i]
        return (
            chain.prompt_ids + chain.response_ids[:start],
            chain.response_ids[start:end],
            chain.labels.logprobs(start, end),
            chain.labels.versions(start, end),
        )

    @classmethod
    def _reason_code(cls, reason: str) -> int:
        code = cls._reason_codes.get(reason)
        if code is None:
            if len(cls._reason_names) >= 255:
                raise ValueError(f"too many distinct finish reasons (at {reason!r})")
            code = cls._reason_codes[reason] = len(cls._reason_names)
            cls._reason_names.append(reason)
        return code
