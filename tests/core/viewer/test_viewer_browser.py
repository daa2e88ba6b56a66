"""In a real browser (system Chromium), the episode filters hide the rows and sections that do
not match and count what is shown; the page needs no network. Skipped without Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.browser import launch_chromium

from uni_agent_core.viewer.export import write_step_views

pytestmark = pytest.mark.slow


def test_filters_hide_episodes_that_do_not_match(run_dir: Path):
    [page_file, _] = write_step_views(run_dir / "trajectories")
    with launch_chromium() as context:
        requests: list[str] = []
        page = context.new_page()
        page.on("request", lambda request: requests.append(request.url))
        page.goto(page_file.as_uri())

        def visible(selector: str) -> int:
            return page.locator(f"{selector}:visible").count()

        assert (visible("tr.episode-row"), visible("section.episode")) == (3, 3)
        page.select_option('select[data-key="exit"]', "max_turns")
        assert (visible("tr.episode-row"), visible("section.episode")) == (1, 1)
        assert page.locator("#shown").text_content() == "1"
        page.select_option('select[data-key="harness"]', "react")
        assert visible("tr.episode-row") == 0
        page.select_option('select[data-key="exit"]', "")
        page.select_option('select[data-key="harness"]', "")
        page.select_option('select[data-key="level"]', "none")
        assert page.locator("tr.episode-row:visible td").nth(1).text_content() == "task-c"
        title = page.locator(".chain").first.locator(".tok").nth(1).get_attribute("title")
        assert title == "id 101 | logprob -0.1000 | policy version 3"
        assert requests == [page_file.as_uri()]
