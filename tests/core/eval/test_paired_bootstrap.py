"""The paired bootstrap interval of an evaluation delta."""

import pytest

from uni_agent_core.eval.metrics import paired_bootstrap_delta


def test_a_consistent_gain_has_an_interval_above_zero() -> None:
    before = [0.0] * 60 + [1.0] * 40
    after = [1.0] * 20 + [0.0] * 40 + [1.0] * 40  # 20 tasks newly solved, none lost
    delta, low, high = paired_bootstrap_delta(after, before, resamples=2000)
    assert delta == pytest.approx(0.2)
    assert 0.0 < low < delta < high < 0.35


def test_no_change_spans_zero_and_identical_scores_collapse() -> None:
    before = [0.0, 1.0] * 50
    after = [1.0, 0.0] * 5 + [0.0, 1.0] * 45  # 5 gained, 5 lost
    delta, low, high = paired_bootstrap_delta(after, before, resamples=2000)
    assert delta == 0.0 and low < 0.0 < high
    assert paired_bootstrap_delta(before, before) == (0.0, 0.0, 0.0)


def test_unpaired_input_is_refused() -> None:
    with pytest.raises(ValueError, match="paired"):
        paired_bootstrap_delta([1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="paired"):
        paired_bootstrap_delta([], [])
