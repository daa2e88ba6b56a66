"""The verifier on an image-style task (repository already at /testbed-like workdir, pytest
log), through the SWE-bench row loader; the sandbox is a plain-bash double standing in for the
container."""

import asyncio
import shutil
import subprocess
import sys

from support.bash_sandbox import BashSandbox

from uni_agent_core.envs.patches import unified_patch
from uni_agent_core.envs.swe_bench import swe_bench_task
from uni_agent_core.envs.verifier import Verifier

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
HIDDEN = TESTS + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def _repo(root):
    root.mkdir()
    (root / "calc.py").write_text(BUGGY)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(TESTS)
    script = (
        "git init -q . && git add -A && git -c user.name=t -c user.email=t@t "
        "commit -qm base && git rev-parse HEAD"
    )
    done = subprocess.run(["bash", "-c", script], cwd=root, capture_output=True, text=True)
    return done.stdout.strip()


def test_swe_bench_style_row_in_an_image_workdir(tmp_path) -> None:
    base = _repo(tmp_path / "image")
    row = {
        "repo": "acme/calc",
        "instance_id": "acme__calc-1",
        "base_commit": base,
        "patch": unified_patch({"calc.py": BUGGY}, {"calc.py": FIXED}),
        "test_patch": unified_patch({"tests/test_calc.py": TESTS}, {"tests/test_calc.py": HIDDEN}),
        "problem_statement": "add subtracts",
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
        "version": "1.0",
        "FAIL_TO_PASS": '["tests/test_calc.py::test_add"]',
        "PASS_TO_PASS": '["tests/test_calc.py::test_zero"]',
        "environment_setup_commit": base,
        "image": "acme/calc:latest",
        "eval_script": f"{sys.executable} -m pytest -rA -p no:cacheprovider tests/test_calc.py",
    }
    task = swe_bench_task(row)
    assert task.source == {
        "type": "image",
        "image": "acme/calc:latest",
        "workdir": "/testbed",
        "dataset": "swe_bench_verified",
    }
    copies = iter(range(100))

    def fresh(_task):
        target = tmp_path / f"container-{next(copies)}" / "testbed"
        shutil.copytree(tmp_path / "image", target)
        return BashSandbox(target)

    verifier = Verifier(fresh)
    gold = asyncio.run(verifier.oracle(task))
    assert gold.resolved and gold.reward == 1.0, gold.log_tail
    empty = asyncio.run(verifier.verify(task, ""))
    assert empty.reward == 0.0
    assert empty.report.fail_to_pass_failed == ["tests/test_calc.py::test_add"]
    assert empty.report.pass_to_pass_passed == ["tests/test_calc.py::test_zero"]
