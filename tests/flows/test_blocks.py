"""agent-rl Block types: registration, saved documents, secrets, recipe overrides."""

import os

import pytest

from uni_agent_core.config import load_recipe


def test_blocks_register_save_load_and_override_a_recipe(prefect_server, monkeypatch) -> None:
    from blocks import (
        CloudCredentials,
        InferenceCluster,
        MlflowTracking,
        SandboxBackend,
        apply_blocks,
    )

    for block in (CloudCredentials, InferenceCluster, MlflowTracking, SandboxBackend):
        block.register_type_and_schema()
    InferenceCluster(base_urls=["http://127.0.0.1:8000"], model="qwen").save(
        "cluster", overwrite=True
    )
    SandboxBackend(section={"type": "modal", "memory_mb": 8192}).save("modal", overwrite=True)
    MlflowTracking(tracking_uri="http://127.0.0.1:5000", username="ml", password="hunter2").save(
        "mlflow", overwrite=True
    )
    CloudCredentials(modal_token_id="id", modal_token_secret="s3cret").save("creds", overwrite=True)
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    overrides = apply_blocks(
        inference="cluster", sandbox="modal", tracking="mlflow", credentials="creds"
    )
    recipe = load_recipe("recipes/ci-smoke.yaml", overrides)
    assert recipe.engine.type == "openai_server" and recipe.engine.model == "qwen"
    assert recipe.sandbox.type == "modal" and recipe.sandbox.memory_mb == 8192
    assert recipe.tracking.tracking_uri == "http://127.0.0.1:5000"
    assert os.environ["MODAL_TOKEN_SECRET"] == "s3cret"
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "hunter2"
    assert "hunter2" not in repr(MlflowTracking.load("mlflow"))


def test_a_bad_sandbox_section_is_refused() -> None:
    from blocks import SandboxBackend

    with pytest.raises(ValueError, match="memory_mbb|extra"):
        SandboxBackend(section={"type": "docker", "memory_mbb": 1}).recipe_overrides()
