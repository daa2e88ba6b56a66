"""A run's step pages over HTTP on loopback: `/` lists the steps, `/step/<n>` shows one.

Pages are rendered per request from the step files, so a run still writing steps shows its
newest on reload. The server binds 127.0.0.1 only: pages hold prompts and code from tasks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from uni_agent_core.viewer.html import render_index_html, render_step_html
from uni_agent_core.viewer.source import ViewSource
from uni_agent_core.viewer.steps import (
    StepNotFoundError,
    ViewerError,
    find_step,
    list_steps,
    read_step,
)

HOST = "127.0.0.1"
STEP_PATH = re.compile(r"^/step/(\d+)/?$")


def step_href(step: int) -> str:
    """The server path of a step's page."""
    return f"/step/{step}"


def make_server(
    source: ViewSource, *, port: int = 0, trace_url: str | None = None
) -> ThreadingHTTPServer:
    """A server for `source`'s pages bound to 127.0.0.1:`port` (0: a free port), not started.

    Run it with `serve_forever()` (in a thread, or `serve` below) and stop it with
    `shutdown()` then `server_close()`.
    """
    handler = _handler(source, trace_url)
    return ThreadingHTTPServer((HOST, port), handler)


def server_url(server: ThreadingHTTPServer) -> str:
    """The root URL a started server answers on."""
    host, port = server.server_address[:2]
    assert isinstance(host, str)  # bound to HOST (the socket API also types a bytes host)
    return f"http://{host}:{port}/"


def serve(
    source: ViewSource,
    *,
    port: int = 0,
    trace_url: str | None = None,
    step: int | None = None,
    echo: Callable[[str], None] | None = None,
) -> None:
    """Serve `source` until interrupted (Ctrl-C raises `KeyboardInterrupt` to the caller).

    Args:
        source: the run's step files.
        port: the port on 127.0.0.1 (0: a free one).
        trace_url: trace link template with `{trace_id}`; None: no trace links.
        step: also print the URL of this step's page.
        echo: where the URLs are printed (default: stdout, flushed at once, so a program
            reading the command's output sees the address before the first request).

    Raises:
        StepNotFoundError: `step` has no step file.
    """
    echo = echo or partial(print, flush=True)
    if step is not None:
        find_step(source.trajectories_dir, step)
    server = make_server(source, port=port, trace_url=trace_url)
    try:
        url = server_url(server)
        echo(f"serving {source.run_name} at {url} (Ctrl-C stops)")
        if step is not None:
            echo(f"step {step}: {url.rstrip('/')}{step_href(step)}")
        server.serve_forever()
    finally:
        server.server_close()


def _handler(source: ViewSource, trace_url: str | None) -> type[BaseHTTPRequestHandler]:
    class StepViewHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0].split("#", 1)[0]
            if path in ("/", "/index.html"):
                steps = [s.step for s in list_steps(source.trajectories_dir)]
                self._send(HTTPStatus.OK, render_index_html(source.run_name, steps, step_href))
                return
            match = STEP_PATH.match(path)
            if match is None:
                self._send(HTTPStatus.NOT_FOUND, f"no page {path}: try / or /step/<n>", "plain")
                return
            try:
                step_file = find_step(source.trajectories_dir, int(match.group(1)))
                page = render_step_html(
                    read_step(step_file.path),
                    run_name=source.run_name,
                    step=step_file.step,
                    trace_url=trace_url,
                    index_href="/",
                )
            except StepNotFoundError as error:
                self._send(HTTPStatus.NOT_FOUND, str(error), "plain")
                return
            except ViewerError as error:
                self._send(HTTPStatus.UNPROCESSABLE_ENTITY, str(error), "plain")
                return
            self._send(HTTPStatus.OK, page)

        def _send(self, status: HTTPStatus, body: str, kind: str = "html") -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", f"text/{kind}; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base name
            """Quiet: a page view is not worth a terminal line."""

    return StepViewHandler
