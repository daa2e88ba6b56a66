"""The curriculum-refresh flow and the deployment definitions."""

import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CI_SMOKE = str(ROOT / "recipes" / "ci-smoke.yaml")
ISOLATION = "bubblewrap" if shutil.which("bwrap") else "none"


def test_refresh_flow_publishes_and_is_idempotent(prefect_server, tmp_path, monkeypatch) -> None:
    from flows.curriculum import curriculum_refresh

    monkeypatch.chdir(tmp_path)
    overrides = [
        f"sandbox.isolation={ISOLATION}",
        "harness.max_turns=2",
        "gateway.sampling.max_tokens=32",
    ]
    first = curriculum_refresh(recipe=CI_SMOKE, overrides=overrides, probes=2)
    assert first["version"] == 1 and Path(first["path"]).is_file()
    again = curriculum_refresh(recipe=CI_SMOKE, overrides=overrides, probes=0)
    assert again["version"] == 1 and again["diff"] == {}


def test_deployments_name_importable_flows_and_the_nightly_schedule() -> None:
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    deployments = {d["entrypoint"]: d for d in spec["deployments"]}
    names = {(d["entrypoint"], d["name"]) for d in spec["deployments"]}
    assert names == {
        ("flows/train.py:train", "train"),
        ("flows/train.py:train", "train-gpu"),
        ("flows/train.py:train", "train-ascend"),
        ("flows/curriculum.py:curriculum_refresh", "nightly"),
        ("flows/evaluate.py:evaluate", "on-demand"),
        ("flows/compare.py:compare_flow", "on-demand"),
    }
    nightly = deployments["flows/curriculum.py:curriculum_refresh"]
    assert nightly["schedules"] == [{"cron": "0 3 * * *", "timezone": "UTC"}]
    assert nightly["concurrency_limit"] == {"limit": 1, "collision_strategy": "CANCEL_NEW"}
    import importlib

    for deployment in deployments.values():
        path, name = deployment["entrypoint"].split(":")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert callable(getattr(module, name))


def test_a_verl_refresh_probes_the_newest_checkpoint_served_and_stops_it(
    tmp_path, monkeypatch
) -> None:
    """The verl path's wiring (the serving itself runs in `test_train_flow_verl.py`): the
    newest verl checkpoint is served, the probes run against it under its label, and the
    servers stop even when the refresh fails."""
    from types import SimpleNamespace

    import flows.curriculum as flow_module

    monkeypatch.chdir(tmp_path)
    calls: list[tuple] = []
    served = SimpleNamespace(recipe="served recipe", model=SimpleNamespace(label="verl-step-2"))

    def serve(recipe, run_dir, checkpoint):
        calls.append(("serve", checkpoint))
        return served

    def refresh(recipe, run_dir, probes, served_as=None):
        calls.append(("refresh", recipe, served_as))
        raise RuntimeError("probe failed")

    monkeypatch.setattr(flow_module, "serve", serve)
    monkeypatch.setattr(flow_module, "refresh", refresh)
    monkeypatch.setattr(flow_module, "stop", lambda s: calls.append(("stop", s.model.label)))
    tiny_verl = str(ROOT / "recipes" / "tiny-verl-gpu.yaml")
    for found, checkpoint in (([], "none"), ([(2, tmp_path / "actor")], "latest")):
        monkeypatch.setattr(flow_module, "find_verl_checkpoints", lambda _dir, f=found: f)
        calls.clear()
        with pytest.raises(RuntimeError, match="probe failed"):
            flow_module.curriculum_refresh.fn(recipe=tiny_verl, probes=1)
        assert calls == [
            ("serve", checkpoint),
            ("refresh", "served recipe", "verl-step-2"),
            ("stop", "verl-step-2"),
        ]
