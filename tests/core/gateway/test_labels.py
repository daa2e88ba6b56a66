"""`ResponseLabels` (run-length coded mask / logprobs / versions) against per-token lists."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uni_agent_core.gateway.labels import CONTEXT_VERSION, ResponseLabels


class PerToken:
    """The reference: one mask, logprob and version per token, as plain lists."""

    def __init__(self) -> None:
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []

    def add_context(self, n: int) -> None:
        self.mask += [0] * n
        self.logprobs += [0.0] * n
        self.versions += [CONTEXT_VERSION] * n

    def add_sampled(self, logprobs: list[float], versions: list[int]) -> None:
        self.mask += [1] * len(logprobs)
        self.logprobs += logprobs
        self.versions += versions

    def truncate(self, n: int) -> None:
        del self.mask[n:], self.logprobs[n:], self.versions[n:]


def assert_same(labels: ResponseLabels, ref: PerToken) -> None:
    n = len(ref.mask)
    assert len(labels) == n
    assert labels.mask() == ref.mask
    assert labels.logprobs().tolist() == ref.logprobs
    assert labels.versions().tolist() == ref.versions
    assert labels.sampled == sum(ref.mask)
    for i in range(n + 1):
        assert labels.sampled_before(i) == sum(ref.mask[:i])
    for start in range(n + 1):
        for end in range(n + 2):
            assert labels.logprobs(start, end).tolist() == ref.logprobs[start:end]
            assert labels.versions(start, end).tolist() == ref.versions[start:end]
    # Runs are never empty, and neighbours differ in kind or version (else they would merge).
    kinds = [labels._is_sampled(r) for r in range(len(labels.ends))]
    assert all(labels.ends[r] > labels._start(r) for r in range(len(labels.ends)))
    for r in range(1, len(labels.ends)):
        assert (kinds[r], labels.run_versions[r]) != (kinds[r - 1], labels.run_versions[r - 1])


# Logprobs that float32 holds exactly, so the comparison with the list reference is exact.
_logprob = st.integers(-64, 0).map(lambda k: k / 8)
_step = st.one_of(
    st.tuples(st.just("context"), st.integers(0, 6)),
    st.tuples(
        st.just("sample"),
        st.lists(st.tuples(_logprob, st.integers(-1, 3)), min_size=0, max_size=6),
    ),
    st.tuples(st.just("truncate"), st.integers(0, 40)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_step, max_size=12))
def test_labels_equal_per_token_lists(steps: list[tuple]) -> None:
    labels, ref = ResponseLabels(), PerToken()
    for kind, arg in steps:
        if kind == "context":
            labels.add_context(arg)
            ref.add_context(arg)
        elif kind == "sample":
            logprobs, versions = [lp for lp, _ in arg], [v for _, v in arg]
            labels.add_sampled(logprobs, versions)
            ref.add_sampled(logprobs, versions)
        else:
            labels.truncate(arg)
            ref.truncate(arg)
        assert_same(labels, ref)


def test_a_turn_costs_two_runs_whatever_its_length() -> None:
    labels = ResponseLabels()
    for _ in range(10):
        labels.add_context(150)
        labels.add_sampled([-0.5] * 28, [3] * 28)
    assert len(labels) == 1780 and labels.sampled == 280
    assert len(labels.ends) == 20 and len(labels.sampled_logprobs) == 280


def test_adjacent_runs_merge_only_when_kind_and_version_match() -> None:
    labels = ResponseLabels()
    labels.add_context(2)
    labels.add_context(3)
    labels.add_sampled([-1.0], [CONTEXT_VERSION])  # a sampled token never joins a context run
    labels.add_sampled([-1.0, -2.0], [CONTEXT_VERSION, 4])
    assert labels.ends.tolist() == [5, 7, 8]
    assert labels.mask() == [0] * 5 + [1] * 3


def test_misaligned_sample_and_negative_ranges_are_refused() -> None:
    labels = ResponseLabels()
    with pytest.raises(ValueError, match="2 logprobs but 1 versions"):
        labels.add_sampled([-1.0, -1.0], [0])
    labels.add_context(3)
    with pytest.raises(ValueError, match="cannot truncate to -1 tokens"):
        labels.truncate(-1)
    with pytest.raises(ValueError, match="non-negative"):
        labels.logprobs(0, -1)
    with pytest.raises(ValueError, match="non-negative"):
        labels.versions(-1)
    assert len(labels) == 3
