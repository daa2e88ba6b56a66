"""Test-wide settings: never reach a model hub, skip `gpu` tests on machines without one;
fixtures for a dead and a live process id, a page of a real browser and screenshots.

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

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
