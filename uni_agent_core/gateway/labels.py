"""The per-token labels of a chain's response, run-length coded: loss mask, logprob, version.

A chain's response alternates between context the gateway encoded (tool results, user turns,
template glue: mask 0, logprob 0, version -1) and tokens the engine sampled (mask 1, their
logprob and the policy version that produced them). Stored per token that is 9 bytes on top of
the token id (int8 mask, float32 logprob, int32 version), and most tokens of an agent session
are context. `ResponseLabels` stores runs instead:

- one run per stretch of context, or of sampled tokens of one policy version: its end offset,
  its version (-1 for context) and the number of sampled tokens up to its end;
- one float32 logprob per *sampled* token.

A turn costs two runs (12 bytes each) plus 4 bytes a sampled token, whatever its context length.
Every read (`mask`, `logprobs`, `versions`, slices of them) expands back to the per-token values,
which are exactly what per-token buffers held.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

CONTEXT_VERSION = -1
"""The policy version recorded for context tokens (the gateway encoded them; nobody sampled)."""


def _ints() -> array:
    return array("i")


@dataclass(eq=False, slots=True)
class ResponseLabels:
    """Mask, logprobs and versions of one response buffer, as runs (see the module doc)."""

    ends: array = field(default_factory=_ints)
    """Exclusive end offset of each run; runs are never empty."""
    run_versions: array = field(default_factory=_ints)
    """Policy version of each run (`CONTEXT_VERSION` for context runs)."""
    sampled_upto: array = field(default_factory=_ints)
    """Sampled tokens from the start of the response to the end of each run."""
    sampled_logprobs: array = field(default_factory=lambda: array("f"))
    """One logprob per sampled token, in order."""

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    @property
    def sampled(self) -> int:
        """Sampled (trainable) tokens in the response."""
        return self.sampled_upto[-1] if self.sampled_upto else 0

    # -- writes ---------------------------------------------------------------------------------

    def add_context(self, n: int) -> None:
        """Append `n` context tokens."""
        self._add_run(n, CONTEXT_VERSION, 0)

    def add_sampled(self, logprobs: Sequence[float], versions: Sequence[int]) -> None:
        """Append sampled tokens with their logprobs and policy versions (one each per token)."""
        n = len(logprobs)
        if len(versions) != n:
            raise ValueError(f"{n} logprobs but {len(versions)} versions")
        if not n:
            return
        self.sampled_logprobs.extend(logprobs)
        first = versions[0]
        if versions[-1] == first and versions.count(first) == n:  # one version: the usual case
            self._add_run(n, first, n)
            return
        start = 0
        for i in range(1, n + 1):
            if i == n or versions[i] != versions[start]:
                self._add_run(i - start, versions[start], i - start)
                start = i

    def truncate(self, n: int) -> None:
        """Keep the first `n` tokens' labels."""
        if n < 0:
            raise ValueError(f"cannot truncate to {n} tokens")
        if n >= len(self):
            return
        sampled = self.sampled_before(n)
        r = bisect_right(self.ends, n)  # the run holding token n (runs < r end at or before n)
        keep = r + (self._start(r) < n)  # ...kept, cut short, when it starts before n
        for runs in (self.ends, self.run_versions, self.sampled_upto):
            del runs[keep:]
        if keep > r:
            self.ends[-1] = n
            self.sampled_upto[-1] = sampled
        del self.sampled_logprobs[sampled:]

    # -- reads ----------------------------------------------------------------------------------

    def sampled_before(self, i: int) -> int:
        """Sampled tokens among the first `i`."""
        if i <= 0:
            return 0
        if i >= len(self):
            return self.sampled
        r = bisect_right(self.ends, i)
        before = self._sampled_before_run(r)
        return before + (i - self._start(r) if self._is_sampled(r) else 0)

    def mask(self) -> list[int]:
        """The loss mask, one entry per token (1 = sampled)."""
        out: list[int] = []
        for r, lo, hi in self._pieces(0, None):
            out += [int(self._is_sampled(r))] * (hi - lo)
        return out

    def versions(self, start: int = 0, end: int | None = None) -> array:
        """Policy versions of tokens `start:end` (`CONTEXT_VERSION` for context)."""
        out = _ints()
        for r, lo, hi in self._pieces(start, end):
            out.extend(self.run_versions[r : r + 1] * (hi - lo))
        return out

    def logprobs(self, start: int = 0, end: int | None = None) -> array:
        """Logprobs of tokens `start:end` (0.0 for context)."""
        out = array("f")
        for r, lo, hi in self._pieces(start, end):
            if not self._is_sampled(r):
                out.frombytes(bytes(4 * (hi - lo)))
            else:
                first = self._sampled_before_run(r) + lo - self._start(r)
                out.extend(self.sampled_logprobs[first : first + hi - lo])
        return out

    def _pieces(self, start: int, end: int | None) -> Iterator[tuple[int, int, int]]:
        """`(run, lo, hi)` for each run overlapping tokens `start:end`, clipped to it."""
        end = self._end(start, end)
        if start >= end:
            return
        r = bisect_right(self.ends, start)
        while r < len(self.ends) and self._start(r) < end:
            yield r, max(start, self._start(r)), min(end, self.ends[r])
            r += 1

    def _end(self, start: int, end: int | None) -> int:
        if start < 0 or (end is not None and end < 0):
            raise ValueError(f"token ranges are non-negative, got {start}:{end}")
        return len(self) if end is None else min(end, len(self))

    def _start(self, r: int) -> int:
        return self.ends[r - 1] if r else 0

    def _sampled_before_run(self, r: int) -> int:
        return self.sampled_upto[r - 1] if r else 0

    def _is_sampled(self, r: int) -> bool:
        return self.sampled_upto[r] != self._sampled_before_run(r)

    def _add_run(self, n: int, version: int, sampled: int) -> None:
        if n <= 0:
            return
        upto = self.sampled + sampled
        last = len(self.ends) - 1
        if (
            last >= 0
            and self.run_versions[last] == version
            and self._is_sampled(last) == bool(sampled)
        ):
            self.ends[-1] += n
            self.sampled_upto[-1] = upto
            return
        self.ends.append(len(self) + n)
        self.run_versions.append(version)
        self.sampled_upto.append(upto)
