"""Test-wide settings: never reach a model hub, skip `gpu` tests on machines without one, run
the modules holding `slow` tests first; fixtures for a dead and a live process id, a page of a
real browser and screenshots.

`make test` spreads the modules over two pytest-xdist workers (`--dist loadfile
--no-loadscope-reorder`): a module is a unit of work, handed out in collection order. The
modules with a `slow` test (tens of seconds: a whole run, a vLLM server, a Prefect stack) go
first, so that the many quick modules fill the gaps at the end instead of one long test
running alone after everything else. Each worker computes on its share of the cores.

The browser is Debian's Chromium (`support.browser`): use `chromium_page`, not the `page` and
`browser` fixtures of the pytest-playwright plugin, which launch Playwright's own downloaded
browsers, absent here."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.browser import launch_chromium, save_screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Page

# xdist workers share the machine's cores: each computes on its share of them (and so do the
# processes it starts), or the workers' OpenMP threads spin against each other.
if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _run_slow_modules_first(items)
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA/NPU device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _run_slow_modules_first(items: list[pytest.Item]) -> None:
    """Reorder in place: modules holding a `slow` test first, each module's tests kept in order."""
    slow_modules = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_modules)


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    """The pid of a live process that is not this one."""
    process = subprocess.Popen(["sleep", "60"])
    yield process.pid
    process.kill()
    process.wait()


@pytest.fixture
def chromium_page() -> Iterator[Page]:
    """A page of headless system Chromium on a fresh profile; the test is skipped without
    `/usr/bin/chromium` or playwright."""
    with launch_chromium() as context:
        yield context.new_page()


@pytest.fixture
def screenshot() -> Callable[[Page, str], Path]:
    """`screenshot(page, "name")` writes `<repo>/test-artifacts/screenshots/name.png` (kept by
    CI, copied by docs) and returns its path."""
    return save_screenshot
