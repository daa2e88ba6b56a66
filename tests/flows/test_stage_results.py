"""The pipeline's typed stage results survive Prefect's result persistence (both serializers),
so the train flow's tasks can return them with `persist_result` on."""

from pathlib import Path

import pytest
from prefect.serializers import JSONSerializer, PickleSerializer

from uni_agent_core.pipeline.results import Evaluated, Trained
from uni_agent_core.rl.warm_start import WarmStartResult

RESULTS = [
    Evaluated(Path("/run/eval/micro-swe-test-step-000002"), 2, {"eval/pass@1": 0.5}),
    Trained("embedded", "run-id", 2, 0, {"train/reward_mean": 0.25}),
    WarmStartResult(
        "hf:/run/warm_start/policy", Path("/run/warm_start"), {"epochs": 1}, None, True
    ),
]


@pytest.mark.parametrize(
    "serializer", [PickleSerializer(), JSONSerializer()], ids=["pickle", "json"]
)
@pytest.mark.parametrize("result", RESULTS, ids=lambda r: type(r).__name__)
def test_a_stage_result_round_trips(serializer, result) -> None:
    back = serializer.loads(serializer.dumps(result))
    assert type(back) is type(result) and back == result
