"""The process-wide torch compute thread.

On CPU, PyTorch parallelises each operator with an OpenMP thread team *per calling OS thread*.
Two threads that both run torch operators (an engine thread and the main thread, say) each get a
team sized to every core, and the teams fight over the cores: measured here, a single-request
decode ran 2.5x slower once the main thread had run one forward pass. Everything in agent-rl
that runs model compute inside an async program (engines, the embedded trainer) therefore
submits it to this one thread, so the process has one OpenMP team and work is serialised the way
a CPU (or a single accelerator stream) executes it anyway.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def compute_executor() -> ThreadPoolExecutor:
    """The single-thread executor all model compute of this process runs on (created lazily)."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch-compute")
        return _executor
