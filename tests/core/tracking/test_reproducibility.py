"""The reproducibility record: pool, topology per pool, inference engine and its version."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.tracking.reproducibility import (
    POOL_ENV,
    engine_version,
    reproducibility_record,
    topology,
)

ROOT = Path(__file__).resolve().parents[3]


class _VersionHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path != "/version":
            self.send_error(404)
            return
        body = json.dumps({"version": "0.11.2"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def vllm_version_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _VersionHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_embedded_record_names_the_host_and_the_hf_engine(monkeypatch) -> None:
    monkeypatch.setenv(POOL_ENV, "cpu")
    recipe = load_recipe(ROOT / "recipes" / "tiny-cpu.yaml")
    record = reproducibility_record(recipe, [])
    assert record["pool"] == "cpu"
    assert record["engine"].startswith("hf (transformers ")
    assert record["topology.trainer"].startswith("1 host, device cpu")
    assert record["topology.rollout"] == "in-process on the trainer host"
    assert record["dataset_rows"] == "0" and record["version.torch"] != "not installed"


def test_cluster_topology_counts_devices_per_pool() -> None:
    recipe = load_recipe(ROOT / "recipes" / "qwen3.5-9b-swerebench-grpo-npu.yaml")
    assert topology(recipe) == {
        "trainer": "1 node(s) x 8 npu",
        "rollout": "1 node(s) x 8 npu (tp 2)",
    }


def test_remote_engine_version_is_asked_of_the_servers(vllm_version_server: str) -> None:
    recipe = load_recipe(
        ROOT / "recipes" / "tiny-cpu.yaml",
        [
            "engine="
            + json.dumps(
                {
                    "type": "openai_server",
                    "model": "policy",
                    "base_urls": [vllm_version_server, "http://127.0.0.1:9"],
                }
            )
        ],
    )
    assert engine_version(recipe.engine) == "vllm 0.11.2, unreachable"
    assert topology(recipe)["rollout"] == "2 vllm server(s)"
