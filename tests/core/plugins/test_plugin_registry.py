"""The plug-in registry: built-in names, import paths, registered objects and its errors."""

from __future__ import annotations

import pytest

from uni_agent_core import plugins
from uni_agent_core.errors import UserError
from uni_agent_core.plugins import PluginError, register, registered, resolve


def test_built_in_names_resolve_to_their_classes() -> None:
    from uni_agent_core.envs.swe_env import SweEnvironment
    from uni_agent_core.harness.react.loop import ReactHarness
    from uni_agent_core.sandbox.local import LocalSandbox

    assert resolve("task_env", "swe") is SweEnvironment
    assert resolve("harness", "react") is ReactHarness
    assert resolve("sandbox", "local") == LocalSandbox.from_config
    assert {"react", "blackbox", "mini_swe_agent", "claude_code", "codex"} <= set(
        registered("harness")
    )


def test_an_import_path_resolves_a_dotted_attribute() -> None:
    from uni_agent_core.sandbox.docker import DockerSandbox

    assert resolve("sandbox", "uni_agent_core.sandbox.docker:DockerSandbox.from_config") == (
        DockerSandbox.from_config
    )


def test_an_unknown_name_lists_the_known_ones() -> None:
    unknown = r"unknown harness .reactt.: name a registered or installed one"
    with pytest.raises(PluginError, match=unknown):
        resolve("harness", "reactt")
    with pytest.raises(PluginError) as raised:
        resolve("task_env", "nowhere.module:Env")
    assert "cannot import 'nowhere.module'" in str(raised.value)
    assert isinstance(raised.value, UserError)  # one line at the command line, no traceback


def test_registered_objects_and_names_taken(monkeypatch) -> None:
    monkeypatch.setitem(plugins._registry, "policy_loss", {})

    def loss(inputs):  # noqa: ANN001, ANN202 - a stand-in
        return inputs

    register("policy_loss", "mine", loss)
    assert resolve("policy_loss", "mine") is loss
    with pytest.raises(PluginError, match="already registered"):
        register("policy_loss", "mine", loss)
    register("policy_loss", "mine", "uni_agent_core.rl.losses:verl_policy_loss", replace=True)
    from uni_agent_core.rl.losses import verl_policy_loss

    assert resolve("policy_loss", "mine") is verl_policy_loss
    with pytest.raises(PluginError, match="use letters"):
        register("policy_loss", "no spaces", loss)
