"""The view server answers on 127.0.0.1: `/` lists the steps, `/step/<n>` renders one, an
unknown step or path is a 404 with a plain reason."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from uni_agent_core.viewer.server import make_server, server_url
from uni_agent_core.viewer.source import run_dir_source


@pytest.fixture
def base_url(run_dir: Path) -> Iterator[str]:
    server = make_server(run_dir_source(run_dir), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server_url(server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def fetch(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode("utf-8")
            return response.status, response.headers["Content-Type"], body
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode("utf-8")


def test_the_server_binds_loopback_on_a_free_port(base_url: str):
    assert base_url.startswith("http://127.0.0.1:")
    assert not base_url.endswith(":0/")


def test_root_lists_the_steps(base_url: str, parse_page):
    status, kind, body = fetch(base_url)
    assert status == 200 and kind == "text/html; charset=utf-8"
    links = [a.attrs["href"] for a in parse_page(body).by_tag("a")]
    assert links == ["/step/1", "/step/2"]
    assert "run-a" in body


def test_a_step_page_renders_that_step(base_url: str, parse_page):
    status, _, body = fetch(base_url + "step/1")
    assert status == 200
    page = parse_page(body)
    assert page.by_tag("h1")[0].text() == "run-a — step 1"
    assert len(page.by_class("chain")) == 4
    assert page.by_class("nav")[0].by_tag("a")[0].attrs["href"] == "/"
    _, _, second = fetch(base_url + "step/2")
    assert len(parse_page(second).by_class("chain")) == 2


def test_unknown_steps_and_paths_are_404(base_url: str):
    status, kind, body = fetch(base_url + "step/9")
    assert (status, kind) == (404, "text/plain; charset=utf-8")
    assert "no step 9" in body and "steps: 1, 2" in body
    status, _, body = fetch(base_url + "favicon.ico")
    assert status == 404 and "/step/<n>" in body


def test_a_malformed_step_file_is_a_plain_error_page(run_dir: Path, base_url: str):
    (run_dir / "trajectories" / "step-000003.jsonl").write_text("{oops\n")
    status, _, body = fetch(base_url + "step/3")
    assert status == 422 and "step-000003.jsonl:1: not a JSON line" in body
