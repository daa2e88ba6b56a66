"""The dynamic sampler on synthetic attempt streams (property tests)."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from uni_agent_core.curriculum.sampler import DynamicSampler

TASKS = [f"t{i}" for i in range(6)]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    window=st.integers(1, 5),
    probe_rate=st.floats(0.0, 0.5),
    success=st.lists(st.floats(0.0, 1.0), min_size=6, max_size=6),
)
def test_never_hands_out_a_uniform_task_except_as_a_probe(seed, window, probe_rate, success):
    sampler = DynamicSampler(
        TASKS, seed=seed, window=window, min_attempts=window, probe_rate=probe_rate
    )
    rng = random.Random(seed)
    recent: dict[str, list[float]] = {t: [] for t in TASKS}
    for _ in range(150):
        task = sampler.next_task()
        last = recent[task][-window:]
        uniform = len(last) == window and len(set(last)) == 1
        assert not uniform or sampler.last_was_probe, (task, last)
        reward = float(rng.random() < success[TASKS.index(task)])
        sampler.observe(task, reward)
        recent[task].append(reward)


def test_probes_happen_at_the_configured_rate() -> None:
    sampler = DynamicSampler(TASKS, seed=1, window=2, min_attempts=2, probe_rate=0.2)
    for task in TASKS[:3]:  # three tasks always fail: excluded
        sampler.observe(task, 0.0)
        sampler.observe(task, 0.0)
    draws = 5000
    probes = 0
    for _ in range(draws):
        task = sampler.next_task()
        probes += sampler.last_was_probe
        assert sampler.last_was_probe == (task in TASKS[:3])
    # binomial(5000, 0.2): sd = 28; 4 sd tolerance
    assert abs(probes - 0.2 * draws) < 4 * (draws * 0.2 * 0.8) ** 0.5
    metrics = sampler.metrics()
    assert metrics["curriculum/excluded_unsolved"] == 3.0
    assert metrics["curriculum/active_tasks"] == 3.0
    assert abs(metrics["curriculum/probe_rate"] - 0.2) < 0.02


def test_solved_tasks_are_excluded_and_a_narrow_band_steers() -> None:
    sampler = DynamicSampler(
        TASKS, seed=0, window=4, min_attempts=4, band=(0.3, 0.7), probe_rate=0.0
    )
    for task, rewards in {"t0": [1, 1, 1, 1], "t1": [1, 1, 1, 0], "t2": [1, 0, 1, 0]}.items():
        for reward in rewards:
            sampler.observe(task, reward)
    assert sampler.excluded("t0") and sampler.excluded("t1") and not sampler.excluded("t2")
    assert sampler.metrics()["curriculum/excluded_solved"] == 2.0
    drawn = {sampler.next_task() for _ in range(50)}
    assert drawn == {"t2", "t3", "t4", "t5"}


def test_all_excluded_still_draws_probes_and_state_resumes() -> None:
    sampler = DynamicSampler(["a", "b"], seed=3, window=2, min_attempts=1, probe_rate=0.0)
    sampler.observe("a", 0.0)
    sampler.observe("b", 1.0)
    assert sampler.next_task() in {"a", "b"} and sampler.last_was_probe
    state = sampler.state_dict()
    upcoming = [sampler.next_task() for _ in range(10)]
    again = DynamicSampler(["a", "b"], seed=3, window=2, min_attempts=1, probe_rate=0.0)
    again.load_state_dict(state)
    assert [again.next_task() for _ in range(10)] == upcoming
