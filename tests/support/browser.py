"""A real browser for tests: Debian's Chromium driven by Playwright's sync API, and screenshots.

Playwright's bundled browsers are never downloaded (`playwright install` needs a host this
project cannot reach); tests drive the system `chromium` package instead. A test that needs a
browser is skipped, with the reason, on a machine without `/usr/bin/chromium` or `playwright`.

The launch flags are deliberate: `--no-sandbox` because tests run as root in containers, where
Chromium's own sandbox cannot start; `--disable-gpu` because there is no display; the
background-networking, component-update, sync and QUIC flags because without them Chromium
keeps calling Google services, which on a closed network means endless failing connections that
slow every page down. Each browser gets a fresh user-data directory so no state leaks between
test sessions.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT_DIR = REPO_ROOT / "test-artifacts" / "screenshots"
VIEWPORT = {"width": 1600, "height": 1000}

_SCREENSHOT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def require_browser() -> None:
    """Skips the calling test unless Debian's Chromium and Playwright are both installed."""
    if not CHROMIUM.is_file():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM}: apt-get install -y chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("needs playwright: pip install -e '.[test]' (it comes with pytest-playwright)")


@contextmanager
def launch_chromium(*, headless: bool = True) -> Iterator[BrowserContext]:
    """Starts headless system Chromium on a fresh profile and yields its browser context.

    Args:
        headless: run without a window (tests always do; `False` only helps debugging locally).

    Yields:
        A persistent `BrowserContext` whose profile directory is deleted on exit; open pages
        with `context.new_page()`.
    """
    require_browser()
    from playwright.sync_api import sync_playwright

    with (
        tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile,
        sync_playwright() as playwright,
    ):
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            headless=headless,
            args=list(CHROMIUM_ARGS),
            viewport=VIEWPORT,
        )
        try:
            yield context
        finally:
            context.close()


def save_screenshot(page: Page, name: str, *, directory: Path = SCREENSHOT_DIR) -> Path:
    """Writes a full-page PNG of `page` to `<directory>/<name>.png` and returns its path.

    Args:
        page: the page to capture.
        name: the file's stem (letters, digits, `.`, `_`, `-`); `.png` is added when missing.
        directory: where screenshots go; by default `<repo>/test-artifacts/screenshots`, which
            CI keeps as an artifact and docs copy from.

    Raises:
        ValueError: `name` is empty or holds a path separator or other characters.
    """
    stem = name.removesuffix(".png")
    if not _SCREENSHOT_NAME.match(stem):
        raise ValueError(
            f"screenshot name {name!r}: use letters, digits, '.', '_' and '-' only "
            "(e.g. 'mlflow-traces-list')"
        )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
