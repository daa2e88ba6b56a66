"""A session's engine calls, as a compact log over its chains' token buffers.

By construction an engine call's prompt is its chain's first `prompt_len` tokens and its output
the `output_len` tokens after them, so nothing needs copying: the log keeps, per call, the chain
and those two lengths, its finish reason and whether a rollback superseded it — in typed arrays,
about 18 bytes a call, where a record object with its own ints and string cost ~160 bytes of
small long-lived objects (which also pin the allocator's memory between bursts).

A rollback cuts a chain under its latest call; that call's tokens are copied first (`supersede`),
so `/calls` still shows exactly what the engine was given and sampled.
"""

from __future__ import annotations

from array import array
from typing import ClassVar

from uni_agent_core.gateway.chain import Chain
from uni_agent_core.types import EngineCall

_Tokens = tuple[array, array, array, array]
"""(prompt ids, output ids, output logprobs, output versions)."""


class CallLog:
    """The engine calls of one session, in call order."""

    __slots__ = ("_chains", "_prompt_lens", "_output_lens", "_reasons", "_superseded", "_frozen")

    _reason_names: ClassVar[list[str]] = []
    _reason_codes: ClassVar[dict[str, int]] = {}
    """Finish reasons seen by any log (a handful), shared so each call stores one byte."""

    def __init__(self) -> None:
        self._chains: list[Chain] = []
        self._prompt_lens = array("i")
        self._output_lens = array("i")
        self._reasons = array("B")
        self._superseded = array("B")
        self._frozen: dict[int, _Tokens] = {}

    def __len__(self) -> int:
        return len(self._chains)

    def append(self, chain: Chain, prompt_len: int, output_len: int, finish_reason: str) -> int:
        """Record a call whose tokens now end `chain`'s buffer; returns its index."""
        self._chains.append(chain)
        self._prompt_lens.append(prompt_len)
        self._output_lens.append(output_len)
        self._reasons.append(self._reason_code(str(finish_reason)))
        self._superseded.append(0)
        return len(self._chains) - 1

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
