"""A run whose in-sandbox agents could not reach their gateway is refused before any episode."""

from __future__ import annotations

import pytest

import uni_agent_core.sandbox.gateway_link as gateway_link
from uni_agent_core.config.harness import (
    CLAUDE_CODE_VERSION,
    BlackboxHarnessConfig,
    ClaudeCodeHarnessConfig,
    ReactHarnessConfig,
)
from uni_agent_core.config.sandbox import DockerSandboxConfig, LocalSandboxConfig
from uni_agent_core.harness.agent_clis import gateway_reach_problems

CLAUDE = ClaudeCodeHarnessConfig(version=CLAUDE_CODE_VERSION)


@pytest.mark.parametrize(
    "sandbox",
    [LocalSandboxConfig(network="none"), DockerSandboxConfig(network="none")],
    ids=["bubblewrap", "docker"],
)
def test_an_in_sandbox_cli_without_network_is_refused(sandbox) -> None:
    (problem,) = gateway_reach_problems(sandbox, CLAUDE)
    assert problem[0] == "sandbox.network" and "use `gateway`" in problem[1]


def test_gateway_only_without_socat_is_refused_with_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setattr(gateway_link.shutil, "which", lambda name: None)
    blackbox = BlackboxHarnessConfig(command=["agent"])
    (problem,) = gateway_reach_problems(LocalSandboxConfig(network="gateway"), blackbox)
    assert "apt-get install socat" in problem[1]


@pytest.mark.parametrize(
    ("sandbox", "harness"),
    [
        (LocalSandboxConfig(network="none"), ReactHarnessConfig()),  # the harness calls the model
        (LocalSandboxConfig(network="host"), CLAUDE),
        (LocalSandboxConfig(isolation="none", network="none"), CLAUDE),  # shares the host's
        (LocalSandboxConfig(network="none"), CLAUDE.model_copy(update={"where": "host"})),
        (DockerSandboxConfig(network="gateway"), CLAUDE),  # the image's socat, at connect
    ],
    ids=["react", "host-network", "unisolated", "cli-on-the-host", "docker-gateway"],
)
def test_setups_that_reach_the_gateway_pass(sandbox, harness) -> None:
    assert gateway_reach_problems(sandbox, harness) == []
