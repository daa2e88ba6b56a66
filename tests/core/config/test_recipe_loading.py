"""Loading recipes: file-level errors, readable key-addressed messages, `--set` overrides."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from uni_agent_core.config import (
    RecipeError,
    RecipeProblem,
    load_recipe,
    parse_recipe,
    validate_paths,
)

Writer = Callable[..., Path]


def problems(path: Path, overrides: tuple[str, ...] = ()) -> list[RecipeProblem]:
    with pytest.raises(RecipeError) as caught:
        load_recipe(path, overrides)
    assert caught.value.problems, "a RecipeError must carry at least one problem"
    return caught.value.problems


def only(path: Path, overrides: tuple[str, ...] = ()) -> RecipeProblem:
    found = problems(path, overrides)
    assert len(found) == 1, found
    return found[0]


def test_minimal_recipe_is_one_line(write_recipe: Writer) -> None:
    recipe = load_recipe(write_recipe("name: minimal\n"))
    assert recipe.name == "minimal"
    assert recipe.engine.type == "hf" and recipe.trainer.backend.type == "embedded"
    assert recipe.trainer.checkpoint_dir == Path("runs/minimal/checkpoints")
    assert recipe.curriculum.history_path == Path("runs/minimal/history.sqlite")
    assert recipe.tracking.run_name == "minimal"


def test_unknown_top_level_key_suggests_the_right_one(write_recipe: Writer) -> None:
    path = write_recipe("name: x\ntrainr:\n  lr: 1.0e-5\n")
    err = io.StringIO()
    assert validate_paths([path], out=io.StringIO(), err=err) == 2
    line = err.getvalue().strip()
    assert line.startswith(f"{path}: trainr: unknown key 'trainr'")
    assert "did you mean 'trainer' or 'tracking'?" in line
    assert "allowed keys: name, description, seed, policy, engine" in line


def test_unknown_nested_key_inside_union_member_uses_the_users_path(
    write_recipe: Writer,
) -> None:
    problem = only(write_recipe("name: x\nengine:\n  type: hf\n  max_batchsize: 4\n"))
    assert problem.key == "engine.max_batchsize"
    assert "did you mean 'max_batch_size'?" in problem.message
    assert "allowed keys: type, device, max_batch_size" in problem.message


def test_unknown_key_deep_inside_nested_unions(write_recipe: Writer) -> None:
    text = "name: x\ntrainer:\n  backend:\n    type: verl\n    actor:\n      tensor_parallel: 2\n"
    found = problems(write_recipe(text))
    keys = {problem.key for problem in found}
    assert "trainer.backend.actor.tensor_parallel" in keys
    message = next(p.message for p in found if p.key == "trainer.backend.actor.tensor_parallel")
    assert "did you mean 'tensor_parallel_size'" in message


def test_wrong_type_names_the_key_and_the_value(write_recipe: Writer) -> None:
    problem = only(write_recipe("name: x\ntrainer:\n  batch_size: eight\n"))
    assert problem.key == "trainer.batch_size"
    assert "valid integer" in problem.message and "'eight'" in problem.message


def test_section_that_is_not_a_mapping(write_recipe: Writer) -> None:
    problem = only(write_recipe("name: x\ngateway: 8080\n"))
    assert problem.key == "gateway"
    assert problem.message == "expected a mapping of keys, got 8080"


def test_missing_required_field(write_recipe: Writer) -> None:
    problem = only(
        write_recipe("name: x\nengine:\n  type: openai_server\n  base_urls: [http://h:1]\n")
    )
    assert problem.key == "engine.model"
    assert problem.message.startswith("required key is missing (Model name the servers serve")


def test_missing_recipe_name(write_recipe: Writer) -> None:
    problem = only(write_recipe("seed: 3\n"))
    assert problem.key == "name"
    assert "required key is missing" in problem.message


def test_invalid_enum_value_lists_choices_and_suggests(write_recipe: Writer) -> None:
    problem = only(write_recipe("name: x\nengine:\n  type: hf\n  device: cdua\n"))
    assert problem.key == "engine.device"
    assert problem.message == (
        "invalid value 'cdua' (did you mean 'cuda'?); expected one of: cpu, cuda, npu, auto"
    )


def test_bad_union_tag(write_recipe: Writer) -> None:
    problem = only(write_recipe("name: x\nsandbox:\n  type: dokker\n"))
    assert problem.key == "sandbox.type"
    assert problem.message == (
        "unknown type 'dokker' (did you mean 'docker'?); "
        "expected one of: local, swerex, docker, modal, plugin"
    )


def test_omitted_union_tag_means_the_default_kind(write_recipe: Writer) -> None:
    recipe = load_recipe(write_recipe("name: x\nharness:\n  max_turns: 5\nsandbox: {}\n"))
    assert recipe.harness.type == "react" and recipe.harness.max_turns == 5
    assert recipe.sandbox.type == "local"


def test_omitted_union_tag_still_rejects_other_kinds_keys(write_recipe: Writer) -> None:
    problem = only(write_recipe("name: x\nharness:\n  command: [claude]\n"))
    assert problem.key == "harness.command"
    assert "unknown key 'command'" in problem.message


def test_several_problems_are_all_reported(write_recipe: Writer) -> None:
    text = "name: x\npolicy:\n  name: gpt5\ntrainer:\n  lr: -1\n  modee: sync\n"
    keys = {problem.key for problem in problems(write_recipe(text))}
    assert keys == {"policy.name", "trainer.lr", "trainer.modee"}


def test_value_error_message_is_readable(write_recipe: Writer) -> None:
    problem = only(write_recipe("name: x\npolicy:\n  name: 'hf:'\n"))
    assert problem.key == "policy.name"
    assert problem.message.startswith("`hf:` must be followed by a model directory")


def test_list_items_are_addressed_by_index(write_recipe: Writer) -> None:
    problem = only(write_recipe("name: x\ntasks:\n  type: micro_swe\n  levels: [L0, L7]\n"))
    assert problem.key == "tasks.levels.1"
    assert "expected one of: L0, L1, L2, L3" in problem.message


def test_bad_yaml_reports_the_line(write_recipe: Writer) -> None:
    path = write_recipe("name: x\ntrainer:\n  lr: [1\n  batch_size: 2\n")
    problem = only(path)
    assert problem.key == ""
    assert problem.message.startswith("invalid YAML at line ")
    assert str(problem).startswith(f"{path}: invalid YAML at line ")


def test_duplicate_keys_are_rejected(write_recipe: Writer) -> None:
    problem = only(write_recipe("name: x\ntrainer:\n  lr: 1.0e-5\n  lr: 1.0e-6\n"))
    assert "invalid YAML at line 4" in problem.message
    assert "duplicate key 'lr' (first given at line 3)" in problem.message


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert str(only(path)) == f"{path}: file not found"


def test_directory_is_not_a_recipe(tmp_path: Path) -> None:
    assert only(tmp_path).message == "is a directory, not a recipe file"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("- name: x\n", "the top level must be a mapping of sections"),
        ("just a string\n", "got a str"),
        ("", "the file is empty"),
    ],
)
def test_top_level_must_be_a_mapping(write_recipe: Writer, text: str, fragment: str) -> None:
    assert fragment in only(write_recipe(text)).message


def test_overrides_set_nested_and_typed_values(write_recipe: Writer) -> None:
    path = write_recipe("name: x\ntrainer:\n  lr: 1.0e-5\n")
    recipe = load_recipe(
        path,
        [
            "trainer.lr=3e-6",
            "trainer.total_steps=7",
            "trainer.mode=sync",
            "curriculum.enabled=false",
            "tasks.levels=[L2, L3]",
            "engine.prefix_cache_tokens=0",
            "eval.max_tasks=null",
            "tracking.experiment=override-test",
        ],
    )
    assert recipe.trainer.lr == pytest.approx(3e-6)
    assert recipe.trainer.total_steps == 7
    assert recipe.trainer.mode == "sync" and recipe.trainer.staleness.max_versions == 0
    assert recipe.curriculum.enabled is False
    assert recipe.tasks.type == "micro_swe" and recipe.tasks.levels == ["L2", "L3"]
    assert recipe.engine.type == "hf" and recipe.engine.prefix_cache_tokens == 0
    assert recipe.eval.max_tasks is None
    assert recipe.tracking.experiment == "override-test"


def test_overrides_can_switch_a_union_member(write_recipe: Writer) -> None:
    path = write_recipe("name: x\nreward:\n  type: resolved\n")
    recipe = load_recipe(path, ["reward.type=partial_credit", "reward.pass_to_pass_weight=0.5"])
    assert recipe.reward.type == "partial_credit"
    assert recipe.reward.pass_to_pass_weight == 0.5


def test_overrides_index_into_lists(write_recipe: Writer) -> None:
    path = write_recipe("name: x\ntasks:\n  type: micro_swe\n  levels: [L0, L1]\n")
    assert load_recipe(path, ["tasks.levels.1=L3"]).tasks.levels == ["L0", "L3"]


def test_override_fills_an_empty_section(write_recipe: Writer) -> None:
    recipe = load_recipe(write_recipe("name: x\ngateway:\n"), ["gateway.port=9000"])
    assert recipe.gateway.port == 9000


def test_bad_override_key_is_reported_with_its_origin(write_recipe: Writer) -> None:
    problem = only(write_recipe("name: x\n"), ("trainer.total_step=5",))
    assert problem.key == "trainer.total_step"
    assert "unknown key 'total_step' (did you mean 'total_steps'?)" in problem.message
    assert problem.message.endswith("(from --set trainer.total_step=5)")


def test_bad_override_value_is_reported(write_recipe: Writer) -> None:
    problem = only(write_recipe("name: x\n"), ("trainer.batch_size=many",))
    assert problem.key == "trainer.batch_size"
    assert problem.message.endswith("(from --set trainer.batch_size=many)")


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("trainer.lr", "an override must look like key.sub=value"),
        ("=3", "an override must look like key.sub=value"),
        ("trainer..lr=3", "an override must look like key.sub=value"),
        ("name.first=x", "name is a str, not a mapping"),
        ("tasks.levels.5=L0", "tasks.levels has 2 items, no index 5"),
        ("trainer.lr=[1", "cannot parse the value '[1' as YAML"),
    ],
)
def test_malformed_overrides(write_recipe: Writer, override: str, fragment: str) -> None:
    path = write_recipe("name: x\ntasks:\n  type: micro_swe\n  levels: [L0, L1]\n")
    problem = only(path, (override,))
    assert fragment in problem.message
    assert problem.message.endswith(f"(from --set {override})")


def test_parse_recipe_does_not_modify_its_input() -> None:
    data = {"name": "x", "trainer": {"lr": 1e-5}}
    recipe = parse_recipe(data, ["trainer.lr=2e-5", "gateway.port=1234"])
    assert recipe.trainer.lr == 2e-5
    assert data == {"name": "x", "trainer": {"lr": 1e-5}}


def test_validate_paths_mixes_good_and_bad(write_recipe: Writer) -> None:
    good = write_recipe("name: good\n", "good.yaml")
    bad = write_recipe("name: bad\nengine:\n  type: hf\n  max_batchsize: 4\n", "bad.yaml")
    out, err = io.StringIO(), io.StringIO()
    assert validate_paths([good, bad], out=out, err=err) == 2
    assert out.getvalue() == f"OK {good}\n"
    assert err.getvalue().startswith(f"{bad}: engine.max_batchsize: unknown key")


def test_yaml_merge_keys_may_be_overridden(write_recipe: Writer) -> None:
    merged = "name: x\ngateway:\n  <<: {port: 1000, host: 0.0.0.0}\n  port: 2000\n"
    recipe = load_recipe(write_recipe(merged))
    assert (recipe.gateway.host, recipe.gateway.port) == ("0.0.0.0", 2000)
