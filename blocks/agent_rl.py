"""The four agent-rl Block types: inference cluster, sandbox backend, MLflow, credentials."""

from __future__ import annotations

from typing import Any, Literal

from prefect.blocks.core import Block
from pydantic import Field, SecretStr, TypeAdapter

from uni_agent_core.config.inference import OpenAIServerEngineConfig
from uni_agent_core.config.loading import format_override
from uni_agent_core.config.sandbox import SandboxConfig


def _section_override(section: str, values: dict[str, Any]) -> list[str]:
    """One override replacing the whole section (so keys of another kind do not linger)."""
    return [format_override(section, values)]


def _key_overrides(section: str, values: dict[str, Any]) -> list[str]:
    return [format_override(f"{section}.{key}", value) for key, value in values.items()]


class InferenceCluster(Block):
    """vLLM/SGLang servers the gateway's engines talk to (token ids in, token ids out)."""

    _block_type_name = "agent-rl inference cluster"
    base_urls: list[str] = Field(description="Server URLs, e.g. http://10.0.0.5:8000.")
    model: str = Field(description="Model name the servers serve.")
    api: Literal["vllm", "sglang"] = Field(default="vllm", description="Server kind.")
    api_key_env: str | None = Field(
        default=None, description="Environment variable with the servers' API key."
    )

    def recipe_overrides(self) -> list[str]:
        """`engine.*` overrides selecting the openai_server engine (validated here)."""
        values = {
            "type": "openai_server",
            "api": self.api,
            "base_urls": self.base_urls,
            "model": self.model,
        }
        if self.api_key_env:
            values["api_key_env"] = self.api_key_env
        OpenAIServerEngineConfig.model_validate(values)
        return _section_override("engine", values)


class SandboxBackend(Block):
    """Where agent commands and hidden tests run: a recipe `sandbox:` section."""

    _block_type_name = "agent-rl sandbox backend"
    section: dict[str, Any] = Field(
        description="A sandbox section, e.g. {'type': 'modal', 'memory_mb': 8192}."
    )

    def recipe_overrides(self) -> list[str]:
        """`sandbox.*` overrides (the section is validated against the recipe's models)."""
        TypeAdapter(SandboxConfig).validate_python(self.section)
        return _section_override("sandbox", self.section)


class MlflowTracking(Block):
    """The MLflow server runs are logged to."""

    _block_type_name = "agent-rl mlflow tracking"
    tracking_uri: str = Field(description="e.g. http://mlflow.internal:5000 or sqlite:///mlruns.db")
    experiment: str = Field(default="agent-rl", description="MLflow experiment.")
    username: str | None = Field(default=None, description="Basic-auth user, if any.")
    password: SecretStr | None = Field(default=None, description="Basic-auth password.")

    def recipe_overrides(self) -> list[str]:
        return _key_overrides(
            "tracking", {"tracking_uri": self.tracking_uri, "experiment": self.experiment}
        )

    def environment(self) -> dict[str, str]:
        """MLflow's basic-auth variables (set in the flow-run process, never logged)."""
        env: dict[str, str] = {}
        if self.username:
            env["MLFLOW_TRACKING_USERNAME"] = self.username
        if self.password is not None:
            env["MLFLOW_TRACKING_PASSWORD"] = self.password.get_secret_value()
        return env


class CloudCredentials(Block):
    """Secrets of cloud sandboxes and registries, exported as the variables their SDKs read."""

    _block_type_name = "agent-rl cloud credentials"
    modal_token_id: SecretStr | None = Field(default=None, description="MODAL_TOKEN_ID")
    modal_token_secret: SecretStr | None = Field(default=None, description="MODAL_TOKEN_SECRET")
    hf_token: SecretStr | None = Field(default=None, description="HF_TOKEN (dataset downloads)")
    inference_api_key: SecretStr | None = Field(
        default=None, description="AGENT_RL_INFERENCE_API_KEY (the cluster's api_key_env)"
    )

    def environment(self) -> dict[str, str]:
        names = {
            "modal_token_id": "MODAL_TOKEN_ID",
            "modal_token_secret": "MODAL_TOKEN_SECRET",
            "hf_token": "HF_TOKEN",
            "inference_api_key": "AGENT_RL_INFERENCE_API_KEY",
        }
        return {
            variable: secret.get_secret_value()
            for field, variable in names.items()
            if (secret := getattr(self, field)) is not None
        }


def apply_blocks(
    *,
    inference: str | None = None,
    sandbox: str | None = None,
    tracking: str | None = None,
    credentials: str | None = None,
) -> list[str]:
    """Load the named block documents; export their secrets to this process's environment and
    return their recipe overrides (applied after the run's own)."""
    import os

    overrides: list[str] = []
    if inference:
        overrides += InferenceCluster.load(inference).recipe_overrides()
    if sandbox:
        overrides += SandboxBackend.load(sandbox).recipe_overrides()
    if tracking:
        block = MlflowTracking.load(tracking)
        overrides += block.recipe_overrides()
        os.environ.update(block.environment())
    if credentials:
        os.environ.update(CloudCredentials.load(credentials).environment())
    return overrides
