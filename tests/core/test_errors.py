"""One base class for the project's exceptions, and the command line's error policy.

Every exception class `uni_agent_core` defines derives from `AgentRLError` and keeps its builtin
base; the `UserError`s are the mistakes a user fixes. `agent-rl` prints a `UserError` as
`error:` lines and exits 2, and lets anything else reach the terminal with its traceback
(exit 1).
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from uni_agent_core.errors import AgentRLError, UserError

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "uni_agent_core"
RECIPES = ROOT / "recipes"
# The module, not the package's `main` function that shares its dotted name.
CLI_MAIN = importlib.import_module("uni_agent_core.cli.main")

USER_ERRORS = {
    "AgentCliError",
    "CheckpointNotFoundError",
    "Conflict",
    "DatasetKeyError",
    "PluginError",
    "PolicyUnavailableError",
    "RecipeError",
    "RunNotFoundError",
    "ScaffoldError",
    "ServerPythonNotFoundError",
    "StepNotFoundError",
    "TaskDataError",
    "TaskSourceError",
    "UserError",
    "VerlConfigError",
    "VerlLaunchError",
    "ViewerError",
    "WarmStartError",
}
"""The exceptions that mean "fix your recipe, flag, file or host"; any other is a bug or a
failed run and must keep its traceback."""


def _project_exceptions() -> set[type[BaseException]]:
    """Every exception class defined in a module of `uni_agent_core`, found by importing all of
    them (walking the files, so namespace packages such as `envs/micro_swe` are included)."""
    found: set[type[BaseException]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.stem == "__main__":  # runs the command line on import
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found.add(obj)
    return found


def _subclasses(base: type[BaseException]) -> set[type[BaseException]]:
    below = set(base.__subclasses__())
    for cls in list(below):
        below |= _subclasses(cls)
    return below


def test_every_project_exception_derives_from_agent_rl_error() -> None:
    found = _project_exceptions()
    derived = {AgentRLError} | {
        cls for cls in _subclasses(AgentRLError) if cls.__module__.startswith("uni_agent_core.")
    }
    outside = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in found - derived)
    assert outside == [], "rebase these onto AgentRLError (or UserError), keeping their base"
    assert found == derived
    assert len(found) > 30  # the walk really imported the package


def test_user_errors_are_the_mistakes_a_user_fixes() -> None:
    user = {cls.__name__ for cls in _project_exceptions() if issubclass(cls, UserError)}
    assert user == USER_ERRORS


def test_project_errors_keep_their_builtin_bases() -> None:
    from uni_agent_core.config.problems import RecipeError
    from uni_agent_core.gateway.manager import SessionNotFoundError
    from uni_agent_core.inference.server_wire import EngineTimeoutError, EngineUnavailableError
    from uni_agent_core.inference.servers import ServerPythonNotFoundError
    from uni_agent_core.rl.launch import TrainingFailed
    from uni_agent_core.rundir.checkpoint import CheckpointNotFoundError
    from uni_agent_core.sandbox.base import SandboxDeadlineError
    from uni_agent_core.tracking.runs import RunNotFoundError

    for cls, builtin in [
        (RecipeError, ValueError),
        (CheckpointNotFoundError, ValueError),
        (SessionNotFoundError, KeyError),
        (RunNotFoundError, LookupError),
        (EngineUnavailableError, ConnectionError),
        (EngineTimeoutError, TimeoutError),
        (ServerPythonNotFoundError, FileNotFoundError),
        (SandboxDeadlineError, RuntimeError),
        (TrainingFailed, RuntimeError),
    ]:
        assert issubclass(cls, AgentRLError) and issubclass(cls, builtin), cls
    assert str(ServerPythonNotFoundError("/no/python does not exist")) == (
        "/no/python does not exist"
    )
    assert SessionNotFoundError("s-1").args == ("s-1",)


def test_a_missing_recipe_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "absent.yaml"
    assert CLI_MAIN.main(["train", "--recipe", str(missing)]) == CLI_MAIN.USAGE_ERROR
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"error: {missing}: file not found"


def test_a_recipe_that_is_a_directory_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert CLI_MAIN.main(["eval", "--recipe", str(tmp_path)]) == CLI_MAIN.USAGE_ERROR
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"error: {tmp_path}: is a directory, not a recipe file"


def test_a_bad_set_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    recipe = str(RECIPES / "ci-smoke.yaml")
    argv = ["train", "--recipe", recipe, "--set", "trainer.lr=fast"]
    assert CLI_MAIN.main(argv) == CLI_MAIN.USAGE_ERROR
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {recipe}: trainer.lr: ")


def test_a_flag_the_recipe_cannot_take_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = str(RECIPES / "tiny-verl-gpu.yaml")
    argv = ["train", "--recipe", recipe, "--run-dir", str(tmp_path), "--stop-after-steps", "1"]
    assert CLI_MAIN.main(argv) == CLI_MAIN.USAGE_ERROR
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --stop-after-steps is for the embedded trainer")
    assert not any(tmp_path.iterdir()), "nothing ran"


def test_a_user_error_prints_each_line_of_its_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(args: object) -> int:
        raise UserError("first problem\nsecond problem")

    monkeypatch.setattr(CLI_MAIN, "_cmd_models_list", refuse)
    assert CLI_MAIN.main(["models", "list"]) == CLI_MAIN.USAGE_ERROR
    assert capsys.readouterr().err.splitlines() == [
        "error: first problem",
        "error: second problem",
    ]


@pytest.mark.parametrize(
    "error", [RuntimeError("boom"), ValueError("boom"), FileNotFoundError("boom")]
)
def test_an_unexpected_exception_propagates(
    error: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(args: object) -> int:
        raise error

    monkeypatch.setattr(CLI_MAIN, "_cmd_models_list", fail)
    with pytest.raises(type(error), match="boom"):
        CLI_MAIN.main(["models", "list"])
    assert "error:" not in capsys.readouterr().err


def test_an_unexpected_exception_exits_1_with_its_traceback() -> None:
    script = (
        "import importlib, sys\n"
        "cli = importlib.import_module('uni_agent_core.cli.main')\n"
        "def fail(args):\n"
        "    raise RuntimeError('boom')\n"
        "cli._cmd_models_list = fail\n"
        "sys.exit(cli.main(['models', 'list']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert "in fail" in done.stderr
    assert done.stderr.splitlines()[-1] == "RuntimeError: boom"


def test_a_failed_training_run_is_one_line_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from uni_agent_core.pipeline import stages
    from uni_agent_core.rl.launch import TrainingFailed

    def verl_fails(*args: object, **kwargs: object) -> None:
        raise TrainingFailed("verl's trainer exited with code 3")

    monkeypatch.setattr(stages, "launch", verl_fails)
    recipe = str(RECIPES / "ci-smoke.yaml")
    argv = ["train", "--recipe", recipe, "--run-dir", str(tmp_path)]
    assert CLI_MAIN.main(argv) == CLI_MAIN.RUN_FAILED
    err = capsys.readouterr().err.splitlines()
    # data validation's progress lines come first, on stderr like every progress line
    [line] = [text for text in err if not text.startswith("[validate ")]
    assert line == "error: verl's trainer exited with code 3" and err[-1] == line


def test_ctrl_c_in_a_command_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(CLI_MAIN, "_cmd_models_list", interrupted)
    assert CLI_MAIN.main(["models", "list"]) == CLI_MAIN.INTERRUPTED
    assert capsys.readouterr().err.splitlines() == ["interrupted"]
