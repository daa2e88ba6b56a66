"""SWE-bench, SWE-rebench and R2E-Gym rows (published schemas) load into tasks."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from uni_agent_core.config.tasks import (
    MicroSweTasksConfig,
    R2EGymTasksConfig,
    SweBenchTasksConfig,
    SweRebenchTasksConfig,
)
from uni_agent_core.envs.grading import framed_log, grade_log
from uni_agent_core.envs.sources import (
    TaskSourceError,
    load_task_file,
    load_tasks,
    read_rows,
    row_kind,
)

TEST_PATCH = """diff --git a/tests/model_fields/tests.py b/tests/model_fields/tests.py
--- a/tests/model_fields/tests.py
+++ b/tests/model_fields/tests.py
@@ -1,3 +1,4 @@
 import unittest
+# new test
"""

SWE_BENCH_VERIFIED_ROW = {
    "repo": "django/django",
    "instance_id": "django__django-11999",
    "base_commit": "84633905273fc916e3d17883810d9969c03f73c2",
    "patch": "diff --git a/django/db/models/base.py b/django/db/models/base.py\n",
    "test_patch": TEST_PATCH,
    "problem_statement": "Cannot override get_FOO_display() in Django 2.2+.",
    "hints_text": "",
    "created_at": "2019-10-31T10:39:18Z",
    "version": "3.1",
    "FAIL_TO_PASS": '["test_overriding_FIELD_display (model_fields.tests.GetFieldDisplayTests)"]',
    "PASS_TO_PASS": '["test_blank_in_choices (model_fields.tests.GetChoicesTests)"]',
    "environment_setup_commit": "0668164b4ac93a5be79f5b87fae83c657124d9ab",
    "difficulty": "<15 min fix",
}

SWE_BENCH_LITE_ROW = {
    **{k: v for k, v in SWE_BENCH_VERIFIED_ROW.items() if k != "difficulty"},
    "repo": "psf/requests",
    "instance_id": "psf__requests-2317",
    "test_patch": TEST_PATCH.replace("tests/model_fields/tests.py", "test_requests.py"),
    "FAIL_TO_PASS": '["test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"]',
    "PASS_TO_PASS": "[]",
    "version": "2.4",
}

SWE_REBENCH_ROW = {
    "instance_id": "oemof__tespy-653",
    "base_commit": "dd5277a75e98c2c0b9e0f4bd4b4d8e0b2d9e1a77",
    "created_at": "2025-01-10T11:00:00",
    "environment_setup_commit": "dd5277a75e98c2c0b9e0f4bd4b4d8e0b2d9e1a77",
    "hints_text": "",
    "patch": "diff --git a/src/tespy/x.py b/src/tespy/x.py\n",
    "problem_statement": "Wrong enthalpy for saturated states.",
    "repo": "oemof/tespy",
    "test_patch": TEST_PATCH.replace("tests/model_fields/tests.py", "tests/test_x.py"),
    "meta": {"commit_name": "head_commit", "failed_lite_validators": [], "has_test_patch": True},
    "version": "0.9",
    "install_config": {
        "install": "pip install -e .[dev]",
        "log_parser": "parse_log_pytest",
        "packages": "requirements.txt",
        "pip_packages": ["pytest"],
        "pre_install": [],
        "python": "3.11",
        "reqs_path": ["requirements.txt"],
        "test_cmd": "pytest --no-header -rA --tb=line --color=no -p no:cacheprovider",
    },
    "requirements": "numpy==2.0\n",
    "environment": "name: testbed\n",
    "FAIL_TO_PASS": ["tests/test_x.py::test_saturated"],
    "FAIL_TO_FAIL": [],
    "PASS_TO_PASS": ["tests/test_x.py::test_other"],
    "PASS_TO_FAIL": [],
    "license_name": "MIT License",
    "docker_image": "swerebench/sweb.eval.x86_64.oemof_1776_tespy-653",
}

R2E_GYM_ROW = {
    "repo_name": "aiohttp",
    "docker_image": "namanjain12/aiohttp_final:f0d74880deec8fcd982bce639c93c5e130d41198",
    "commit_hash": "f0d74880deec8fcd982bce639c93c5e130d41198",
    "parsed_commit_content": json.dumps({"old_commit_hash": "a1b2", "file_diffs": []}),
    "execution_result_content": json.dumps({"test_file_codes": []}),
    "modified_files": ["aiohttp/web_response.py"],
    "modified_entity_summaries": [],
    "relevant_files": ["aiohttp/web_response.py"],
    "num_non_test_files": 1,
    "num_non_test_func_methods": 1,
    "num_non_test_lines": 4,
    "prompt": "",
    "problem_statement": "[ISSUE]\nResponse.text drops the charset.\n[/ISSUE]",
    "expected_output_json": json.dumps(
        {
            "TestResponse.test_charset": "PASSED",
            "TestResponse.test_plain": "PASSED",
            "TestResponse.test_known_bad": "FAILED",
        }
    ),
}


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_swe_bench_rows_from_jsonl_with_derived_image_command_and_parser(tmp_path) -> None:
    path = _jsonl(tmp_path / "verified.jsonl", [SWE_BENCH_VERIFIED_ROW, SWE_BENCH_LITE_ROW])
    django, requests = load_task_file(path)
    assert django.FAIL_TO_PASS == [
        "test_overriding_FIELD_display (model_fields.tests.GetFieldDisplayTests)"
    ]
    assert django.source["image"] == "swebench/sweb.eval.x86_64.django_1776_django-11999:latest"
    assert django.source["workdir"] == "/testbed"
    assert django.test_cmd.endswith("--settings=test_sqlite --parallel 1 model_fields.tests")
    assert django.log_parser == "parse_log_django" and django.difficulty == "<15 min fix"
    assert requests.log_parser == "parse_log_pytest_options"
    assert requests.test_cmd.endswith("-p no:cacheprovider test_requests.py")
    assert requests.PASS_TO_PASS == []


def test_swe_bench_parquet_in_hub_layout_with_selection(tmp_path) -> None:
    (tmp_path / "data").mkdir()
    table = pa.Table.from_pylist([SWE_BENCH_VERIFIED_ROW, SWE_BENCH_LITE_ROW])
    pq.write_table(table, tmp_path / "data" / "test-00000-of-00001.parquet")
    config = SweBenchTasksConfig(path_or_dataset=str(tmp_path), instance_ids=["psf__requests-2317"])
    (task,) = load_tasks(config)
    assert task.instance_id == "psf__requests-2317"
    assert len(load_tasks(SweBenchTasksConfig(path_or_dataset=str(tmp_path), max_tasks=1))) == 1


def test_swe_rebench_row_uses_its_install_config(tmp_path) -> None:
    path = _jsonl(tmp_path / "rebench.jsonl", [SWE_REBENCH_ROW])
    assert row_kind(SWE_REBENCH_ROW) == "swe_rebench"
    (task,) = load_tasks(SweRebenchTasksConfig(path_or_dataset=str(path)))
    assert task.source["image"] == "swerebench/sweb.eval.x86_64.oemof_1776_tespy-653"
    assert "pytest --no-header -rA --tb=line" in task.test_cmd
    assert task.test_cmd.endswith("tests/test_x.py")
    assert task.log_parser == "parse_log_pytest"


def test_r2e_gym_row_hides_its_tests_and_grades_their_log(tmp_path) -> None:
    path = _jsonl(tmp_path / "r2e.jsonl", [R2E_GYM_ROW])
    (task,) = load_tasks(R2EGymTasksConfig(path_or_dataset=str(path)))
    assert task.instance_id == "r2e_gym__aiohttp-f0d74880deec"
    assert task.FAIL_TO_PASS == ["TestResponse.test_charset", "TestResponse.test_plain"]
    assert task.source["remove_paths"] == ["/r2e_tests"]
    assert task.source["image"].startswith("namanjain12/aiohttp_final:")
    log = (
        "PASSED r2e_tests/test_1.py::TestResponse::test_charset\n"
        "PASSED r2e_tests/test_1.py::TestResponse::test_plain\n"
        "FAILED r2e_tests/test_1.py::TestResponse::test_known_bad - AssertionError\n"
    )
    assert grade_log(task, framed_log(log, exit_code=1)).resolved
    assert not grade_log(task, framed_log(log.replace("PASSED", "FAILED", 1), 1)).resolved


def test_micro_swe_section_is_generated_once_into_the_cache(tmp_path) -> None:
    config = MicroSweTasksConfig(n=3, seed=2, levels=["L1", "L2"])
    first = load_tasks(config, cache=tmp_path)
    again = load_tasks(config, cache=tmp_path)
    assert [t.instance_id for t in first] == [t.instance_id for t in again]
    assert [t.difficulty for t in first] == ["L1", "L2", "L1"]


def test_unreadable_inputs_say_what_is_wrong(tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "a"}\nnot json\n')
    with pytest.raises(TaskSourceError, match="bad.jsonl:2: not a JSON row"):
        read_rows(bad)
    with pytest.raises(TaskSourceError, match="no such file"):
        read_rows(tmp_path / "missing" / "deep" / "x.jsonl")
    with pytest.raises(TaskSourceError, match="neither an agent-rl, SWE-bench"):
        row_kind({"foo": 1})
