"""Gateway overhead with an instant fake engine: CPU per turn, throughput, latency, memory.

    python bench/gateway.py [--turns 20] [--sessions 100 1000] [--long-turns 200]
                            [--context-tokens 3200] [--phase-timeout 90] [--profile]

The engine (`InstantEngine`, in `bench/_gateway_server.py`) answers every call at once with a
fixed 28-token `shell` tool call (EOS included; the shortest such call in the tiny tokenizer), so
everything measured is gateway cost. Workload, the same for every figure: sessions of `--turns`
turns; each turn sends the whole history (system + user + alternating assistant tool calls and
tool results) with the `shell` tool; tool results are sized so the prompt of turn 20 is about
`--context-tokens` tokens (tiny tokenizer), i.e. ~150 new tokens per turn (~30K at turn 200).

Figures, all measured in this run (this machine is noisy; compare ratios, not absolute times):

1. baseline: the engine called directly, per turn, with the same `GenerateRequest` sizes;
2. CPU per turn at 1 session: in-process (`session.chat` on a `SessionManager`, measured with
   `time.process_time`) and over HTTP (a `bench/_gateway_server.py` subprocess on 127.0.0.1;
   clients are `httpx.AsyncClient`s in this process speaking OpenAI Chat Completions JSON).
   Server CPU comes from `/proc/<pid>/stat` utime+stime deltas over whole phases; a single
   turn is shorter than stat's 10 ms tick, so per-turn figures (1-session and long-session
   rows) sum the server's per-thread `/proc/<pid>/task/*/schedstat` (ns) around each request.
   Next to it, the floor of that HTTP figure, measured the same way on `bench/_gateway_floor.py`
   (the gateway's stack, uvicorn + ASGI + orjson, doing only what any gateway on it must: parse
   the body and answer a fixed completion; then also encoding the turn's new messages with the
   gateway's `ChatCodec`). The gateway's figure less the second floor is what its own logic
   costs (session and chain bookkeeping, request and response models, tool-call parsing);
3. turns/s of one gateway process at 100 and 1000 concurrent sessions (each session a coroutine
   doing its turns one after another; stops starting turns after `--phase-timeout` s). Client
   and server share this machine's cores, so the server's CPU share and its turns per
   CPU-second (the capacity of a saturated process) are printed next to it. Each HTTP session
   speaks over its own keep-alive connection with a lean client (`bench/_lean_http.py`): httpx
   costs ~0.8 ms of client CPU a request here and would cap the figure at the client's speed;
4. latency added over the direct engine call (p50 / p99) at 1, 100 and 1000 sessions;
5. CPU at turn 1, 20 and 200 of single long sessions (median over `--long-repeats` sessions and
   a 3-turn window ending at that turn; turn 1 opens the chain with a full render, later turns
   append a delta);
6. memory per live session: server RSS delta over the 1000-session phase / live sessions, and
   per stored token (the chains' prompt + response tokens), read twice: right after the last
   turn, while the allocator still holds what the burst's requests used, and at rest, once the
   server has been idle long enough to hand that back (`gateway/heap.py`: within 1-2 s; the
   reading waits until RSS has not moved for 3 s) — the state a live session spends its
   tool calls in. In-process, the Python object graph of sampled sessions is walked to split
   it into chains, call records and the rest.

Every phase checks the TITO invariant on (some of) its sessions, over HTTP from the server's
`/trajectories` and `/calls`. Targets are printed next to each figure. `--profile` adds extra,
profiled in-process runs (1-session and long-session) after the measurements and prints the
top of the cProfile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
from _footprint import deep_size
from _gateway_server import REPLY_TOKENS, InstantEngine, load_tiny_tokenizer, reply_ids
from _lean_http import LeanConnection

from uni_agent_core.gateway.codec import ChatCodec
from uni_agent_core.gateway.launch import free_port
from uni_agent_core.gateway.manager import CONTROL_KEY_VARIABLE, SessionManager, new_control_key
from uni_agent_core.gateway.request import ChatRequest, Message, ToolCall
from uni_agent_core.gateway.session import GatewaySession
from uni_agent_core.gateway.tito import tito_violations
from uni_agent_core.inference.types import GenerateRequest
from uni_agent_core.tools.catalog import SHELL_TOOL
from uni_agent_core.types import EngineCall, Trajectory

TARGET_CPU_MS = 0.4
TARGET_TURNS_S = 1500.0
TARGET_LONG_RATIO = 1.5
TARGET_BYTES_PER_TOKEN = 16.0

SYSTEM = (
    "You are a coding agent working in a repository. Use the shell tool to inspect files and "
    "run tests; answer with one tool call per turn."
)
USER = "The test tests/test_parser.py::test_nested fails. Find the bug and fix it."
TOOLS = [SHELL_TOOL]
SERVER_SCRIPT = Path(__file__).with_name("_gateway_server.py")
FLOOR_SCRIPT = Path(__file__).with_name("_gateway_floor.py")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# -- workload ---------------------------------------------------------------------------------


@dataclass
class Workload:
    """The conversation every session replays; tool results are indexed by turn."""

    reply_ids: list[int]
    tool_results: list[str]
    first_prompt_tokens: int
    tokens_per_turn: int


def build_workload(tokenizer: Any, codec: ChatCodec, turns: int, context: int) -> Workload:
    """Size tool results so the prompt of turn 20 is about `context` tokens."""
    reply = reply_ids(tokenizer, REPLY_TOKENS)
    first = codec.encode_full(
        [Message(role="system", content=SYSTEM), Message(role="user", content=USER)], TOOLS
    )
    wrapper = len(
        codec.encode_delta([Message(role="tool", content="")], TOOLS, previous_ended=True)
    )
    per_turn = max(1, (context - len(first)) // 19)
    body_tokens = max(1, per_turn - len(reply) - wrapper)
    results = []
    for turn in range(turns):
        lines: list[str] = []
        i = 0
        while len(codec.encode_text("".join(lines))) < body_tokens:
            lines.append(
                f"src/pkg/mod_{turn}.py:{i * 7 + 3}: value = compute(item_{i}, depth={i})\n"
            )
            i += 1
        results.append("".join(lines))
    return Workload(reply, results, len(first), per_turn)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class PhaseResult:
    """What one measured phase produced."""

    turns: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    """CPU of the process under test (this one in-process, the server over HTTP)."""
    client_cpu_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    turn_cpu: dict[int, list[float]] = field(default_factory=dict)
    """Turn index (1-based) -> CPU seconds of that turn, one entry per session."""
    stored_tokens: int = 0
    sessions: int = 0
    rss_after: int = 0
    """Server RSS right after the last turn (HTTP phases)."""
    rss_rest: int = 0
    """Server RSS once it has settled after the last turn (HTTP phases)."""

    @property
    def rate(self) -> float:
        return self.turns / self.wall_s if self.wall_s else 0.0

    @property
    def per_turn(self) -> float:
        """CPU seconds per turn."""
        return self.cpu_s / self.turns if self.turns else 0.0


# -- baseline: the engine called directly --------------------------------------------------------


async def direct_phase(engine: InstantEngine, prompts: list[list[int]], rounds: int) -> PhaseResult:
    """Call the engine with the given prompts (one session's turns), `rounds` times."""
    result = PhaseResult()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for r in range(rounds):
        for turn, prompt in enumerate(prompts):
            started = time.perf_counter()
            await engine.generate(
                GenerateRequest(
                    prompt_ids=list(prompt),
                    max_new_tokens=1 << 30,
                    temperature=1.0,
                    session_id=f"direct-{r}",
                    request_id=f"direct-{r}-{turn}",
                )
            )
            result.latencies.append(time.perf_counter() - started)
            result.turns += 1
    result.cpu_s = time.process_time() - cpu0
    result.wall_s = time.perf_counter() - wall0
    return result


# -- in-process ---------------------------------------------------------------------------------


async def inproc_session(
    manager: SessionManager,
    wl: Workload,
    turns: int,
    deadline: float,
    result: PhaseResult,
    per_turn_cpu: bool,
) -> GatewaySession:
    """Drive one session for `turns` turns, recording latency (and CPU when alone)."""
    session, _ = manager.create()
    history = [Message(role="system", content=SYSTEM), Message(role="user", content=USER)]
    for turn in range(turns):
        if time.perf_counter() > deadline:
            break
        request = ChatRequest(messages=list(history), tools=TOOLS)
        cpu0, started = time.process_time(), time.perf_counter()
        (choice,) = await session.chat(request)
        result.latencies.append(time.perf_counter() - started)
        if per_turn_cpu:
            result.turn_cpu.setdefault(turn + 1, []).append(time.process_time() - cpu0)
        result.turns += 1
        call_id = f"call_{turn}"
        calls = [
            ToolCall(id=call_id, name=c.name, arguments=c.arguments) for c in choice.tool_calls
        ]
        if not calls:
            raise RuntimeError(f"the instant reply did not parse as a tool call: {choice}")
        history.append(Message(role="assistant", content=choice.content, tool_calls=calls))
        history.append(Message(role="tool", content=wl.tool_results[turn], tool_call_id=call_id))
    return session


async def inproc_phase(
    manager: SessionManager, wl: Workload, sessions: int, turns: int, timeout: float
) -> tuple[PhaseResult, list[GatewaySession]]:
    """`sessions` concurrent sessions of `turns` turns in this process; sessions stay live."""
    result = PhaseResult(sessions=sessions)
    alone = sessions == 1
    cpu0, wall0 = time.process_time(), time.perf_counter()
    live = await asyncio.gather(
        *(
            inproc_session(manager, wl, turns, wall0 + timeout, result, alone)
            for _ in range(sessions)
        )
    )
    result.cpu_s = time.process_time() - cpu0
    result.wall_s = time.perf_counter() - wall0
    result.stored_tokens = sum(c.total_tokens for s in live for c in s.chains)
    return result, live


def sequential_inproc(
    manager: SessionManager, wl: Workload, sessions: int, turns: int, timeout: float
) -> PhaseResult:
    """`sessions` sessions one after another (1 live at a time), CPU per turn recorded."""
    total = PhaseResult(sessions=1)
    for _ in range(sessions):
        part, live = asyncio.run(inproc_phase(manager, wl, 1, turns, timeout))
        total.turns += part.turns
        total.wall_s += part.wall_s
        # Only `session.chat` itself: the phase also spans this client's message building.
        total.cpu_s += sum(v for values in part.turn_cpu.values() for v in values)
        total.latencies += part.latencies
        for turn, values in part.turn_cpu.items():
            total.turn_cpu.setdefault(turn, []).extend(values)
        check_tito(live)
        for session in live:
            manager.delete(session.session_id)
    return total


def check_tito(sessions: list[GatewaySession]) -> None:
    for session in sessions:
        problems = tito_violations(session.trajectories(), session.calls)
        if problems:
            raise RuntimeError(f"TITO violated in session {session.session_id}: {problems[:3]}")


def session_footprint(sessions: list[GatewaySession]) -> dict[str, float]:
    """Mean bytes per session held by its chains, its call records and the rest."""
    parts = {"chains": 0, "calls": 0, "other": 0}
    for session in sessions:
        shared = [
            session.engine,
            session.codec,
            session.decoder,
            session.metrics,
            session.settings,
            session._run_blocking,
        ]
        seen = {id(o) for o in shared}
        parts["chains"] += deep_size([session.chains], seen)
        parts["calls"] += deep_size([session._calls], seen)
        parts["other"] += deep_size([session], seen)
    return {k: v / len(sessions) for k, v in parts.items()}


# -- HTTP ---------------------------------------------------------------------------------------


class Server:
    """The gateway subprocess: start, CPU and RSS readings, always killed on exit."""

    def __init__(self, port: int, script: Path = SERVER_SCRIPT, *flags: str) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.control_key = new_control_key()
        """The server's control key (session create, read and delete)."""
        self.control_headers = {"Authorization": f"Bearer {self.control_key}"}
        fd, name = tempfile.mkstemp(prefix="gateway-bench-", suffix=".log")
        os.close(fd)
        self._log = Path(name)
        with self._log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), "--port", str(port), *flags],
                env={**os.environ, CONTROL_KEY_VARIABLE: self.control_key},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway server exited early:\n{self.log()}")
            try:
                health = httpx.get(self.base + "/health", timeout=1.0, trust_env=False)
                if health.status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"gateway server not ready after {timeout:.0f} s:\n{self.log()}")

    def log(self) -> str:
        return self._log.read_text(errors="replace")[-4000:]

    def cpu_s(self) -> float:
        """utime + stime of the whole process (10 ms resolution)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def cpu_ns(self) -> int:
        """On-CPU nanoseconds summed over the process's live threads (schedstat).

        A thread's runtime is brought up to date when it leaves the CPU, and the server may
        still be finishing a request when its reply has arrived: wait (up to 50 ms) until no
        thread is running, so the reading includes everything the request cost.
        """
        deadline = time.perf_counter() + 0.05
        while self._running_threads() and time.perf_counter() < deadline:
            time.sleep(0)
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that just exited
        return total

    def _running_threads(self) -> int:
        running = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                continue
            running += state == "R"
        return running

    def rss(self) -> int:
        return int(Path(f"/proc/{self.proc.pid}/statm").read_text().split()[1]) * PAGE

    def rss_at_rest(self, settle_s: float = 3.0, timeout_s: float = 10.0) -> int:
        """RSS once it has not changed for `settle_s` (at most `timeout_s` of waiting)."""
        deadline = time.monotonic() + timeout_s
        last, since = self.rss(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self.rss()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= settle_s:
                break
        return last

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.unlink(missing_ok=True)


@contextlib.contextmanager
def gateway_server(script: Path = SERVER_SCRIPT, *flags: str) -> Iterator[Server]:
    server = Server(free_port(), script, *flags)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@dataclass
class HttpSession:
    """A session as a client sees it: its endpoint, key and message history."""

    session_id: str
    path: str
    headers: dict[str, str]
    messages: list[dict[str, Any]]
    stored_tokens: int = 0


async def open_sessions(client: httpx.AsyncClient, base: str, n: int) -> list[HttpSession]:
    async def one() -> HttpSession:
        response = await client.post(base + "/sessions", content=b"{}")
        response.raise_for_status()
        body = response.json()
        return HttpSession(
            body["session_id"],
            urlsplit(body["openai_base_url"]).path + "/chat/completions",
            {"Authorization": f"Bearer {body['api_key']}", "Content-Type": "application/json"},
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}],
        )

    sessions: list[HttpSession] = []
    for start in range(0, n, 100):
        sessions += await asyncio.gather(*(one() for _ in range(min(100, n - start))))
    return sessions


async def close_sessions(client: httpx.AsyncClient, base: str, sessions: list[HttpSession]) -> None:
    async def one(s: HttpSession) -> None:
        response = await client.delete(f"{base}/sessions/{s.session_id}")
        response.raise_for_status()

    for start in range(0, len(sessions), 100):
        await asyncio.gather(*(one(s) for s in sessions[start : start + 100]))


async def http_turns(
    client: LeanConnection,
    s: HttpSession,
    wl: Workload,
    turns: int,
    deadline: float,
    result: PhaseResult,
    server_ns: Callable[[], int] | None,
) -> None:
    """Drive one HTTP session; with `server_ns`, record the server CPU of each turn."""
    for turn in range(turns):
        if time.perf_counter() > deadline:
            break
        body = orjson.dumps({"model": "agent-rl-policy", "messages": s.messages, "tools": TOOLS})
        ns0 = server_ns() if server_ns else 0
        started = time.perf_counter()
        status, content = await client.post(s.path, body, s.headers)
        result.latencies.append(time.perf_counter() - started)
        if server_ns:
            result.turn_cpu.setdefault(turn + 1, []).append((server_ns() - ns0) / 1e9)
        if status != 200:
            raise RuntimeError(f"turn {turn}: HTTP {status}: {content[:500]!r}")
        reply = orjson.loads(content)
        message = reply["choices"][0]["message"]
        calls = message.get("tool_calls")
        if not calls:
            raise RuntimeError(f"the instant reply did not parse as a tool call: {message}")
        usage = reply["usage"]
        s.stored_tokens = usage["prompt_tokens"] + usage["completion_tokens"]
        s.messages.append({"role": "assistant", "content": message["content"], "tool_calls": calls})
        s.messages.append(
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": wl.tool_results[turn]}
        )
        result.turns += 1


def http_client(connections: int, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        headers=headers,
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        timeout=httpx.Timeout(120.0),
        trust_env=False,  # never route 127.0.0.1 traffic through a configured proxy
    )


async def http_phase(
    server: Server,
    wl: Workload,
    sessions: int,
    turns: int,
    timeout: float,
    *,
    per_turn_cpu: bool = False,
    keep: bool = False,
    check: bool = True,
) -> tuple[PhaseResult, list[HttpSession]]:
    """`sessions` concurrent HTTP sessions; per-turn server CPU only makes sense alone.

    Each session speaks over its own keep-alive `LeanConnection` (a harness process per
    session); sessions are created and, with `check`, their TITO invariant checked with httpx.
    """
    result = PhaseResult(sessions=sessions)
    async with contextlib.AsyncExitStack() as stack:
        admin = await stack.enter_async_context(http_client(100, server.control_headers))
        connections = [
            await stack.enter_async_context(LeanConnection("127.0.0.1", server.port))
            for _ in range(sessions)
        ]
        live = await open_sessions(admin, server.base, sessions)
        cpu0, client0, wall0 = server.cpu_s(), time.process_time(), time.perf_counter()
        await asyncio.gather(
            *(
                http_turns(
                    connections[i],
                    s,
                    wl,
                    turns,
                    wall0 + timeout,
                    result,
                    server.cpu_ns if per_turn_cpu else None,
                )
                for i, s in enumerate(live)
            )
        )
        result.wall_s = time.perf_counter() - wall0
        result.cpu_s = server.cpu_s() - cpu0
        result.client_cpu_s = time.process_time() - client0
        result.stored_tokens = sum(s.stored_tokens for s in live)
        result.rss_after = server.rss()
        if keep:
            result.rss_rest = await asyncio.to_thread(server.rss_at_rest)
        if check:
            await check_http_tito(admin, server.base, live[:2])
        if not keep:
            await close_sessions(admin, server.base, live)
    return result, live


async def check_http_tito(
    client: httpx.AsyncClient, base: str, sessions: list[HttpSession]
) -> None:
    """The server's own record of these sessions must satisfy the TITO invariant."""
    for s in sessions:
        root = f"{base}/sessions/{s.session_id}"
        trajectories = (await client.get(root + "/trajectories")).json()
        calls = (await client.get(root + "/calls")).json()
        problems = tito_violations(
            [Trajectory.model_validate(t) for t in trajectories],
            [EngineCall.model_validate(c) for c in calls],
        )
        if problems or not calls:
            raise RuntimeError(f"TITO violated over HTTP in {s.session_id}: {problems[:3]}")


async def http_close(server: Server, live: list[HttpSession]) -> None:
    async with http_client(100, server.control_headers) as client:
        await close_sessions(client, server.base, live)


def sequential_http(
    server: Server, wl: Workload, sessions: int, turns: int, timeout: float, check: bool = True
) -> PhaseResult:
    """`sessions` HTTP sessions one after another; server CPU per turn recorded."""
    total = PhaseResult(sessions=1)
    for _ in range(sessions):
        part, _ = asyncio.run(
            http_phase(server, wl, 1, turns, timeout, per_turn_cpu=True, check=check)
        )
        total.turns += part.turns
        total.wall_s += part.wall_s
        # Per-turn schedstat readings (ns); the phase's utime+stime delta has 10 ms ticks.
        total.cpu_s += sum(v for values in part.turn_cpu.values() for v in values)
        total.latencies += part.latencies
        for turn, values in part.turn_cpu.items():
            total.turn_cpu.setdefault(turn, []).extend(values)
    return total


# -- report ---------------------------------------------------------------------------------------


Row = tuple[str, str, str, str, str]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def turn_cpu_at(result: PhaseResult, turn: int) -> float:
    """Median CPU over sessions and the 3-turn window ending at `turn` (turn 1: itself)."""
    window = [turn] if turn == 1 else [turn - 2, turn - 1, turn]
    return statistics.median(v for t in window for v in result.turn_cpu.get(t, []))


def print_table(rows: list[Row]) -> None:
    headers = ("figure", "value", "ratio vs baseline", "target", "")
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(5)]
    print(" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--context-tokens", type=int, default=3200, help="prompt at turn 20")
    parser.add_argument("--sessions", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--single-sessions", type=int, default=10, help="1-session repeats")
    parser.add_argument("--long-turns", type=int, default=200)
    parser.add_argument("--long-repeats", type=int, default=3)
    parser.add_argument("--phase-timeout", type=float, default=90.0, help="seconds per phase")
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--profile", action="store_true", help="cProfile the in-process path")
    args = parser.parse_args()
    if args.long_turns < 20 or args.turns < 1:
        parser.error("--long-turns must be >= 20 and --turns >= 1")
    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", flush=True)

    tokenizer = load_tiny_tokenizer()
    codec = ChatCodec(tokenizer)
    wl = build_workload(tokenizer, codec, max(args.turns, args.long_turns), args.context_tokens)
    engine = InstantEngine(wl.reply_ids)
    manager = SessionManager(engine, tokenizer, max_sessions=1 << 20)
    progress(
        f"workload: first prompt {wl.first_prompt_tokens} tokens, ~{wl.tokens_per_turn} "
        f"tokens per turn (reply {len(wl.reply_ids)}), turn-20 prompt "
        f"~{wl.first_prompt_tokens + 19 * wl.tokens_per_turn} tokens"
    )

    # Warm-up, and one session's real engine prompts for the baseline.
    _, live = asyncio.run(inproc_phase(manager, wl, 1, args.turns, args.phase_timeout))
    check_tito(live)
    prompts = [call.prompt_ids for call in live[0].calls]
    manager.delete(live[0].session_id)
    direct = asyncio.run(direct_phase(engine, prompts, rounds=50))
    direct_cpu = direct.per_turn
    d50, d99 = quantile(direct.latencies, 0.5), quantile(direct.latencies, 0.99)
    progress(f"direct engine: {direct.turns} calls, {ms(direct_cpu)} CPU per call")

    # In-process.
    single = sequential_inproc(manager, wl, args.single_sessions, args.turns, 60.0)
    progress(f"in-process, 1 session: {single.turns} turns, {ms(single.per_turn)}/turn")
    concurrent: dict[int, PhaseResult] = {}
    footprint: dict[str, float] = {}
    for n in args.sessions:
        gc.collect()
        result, live = asyncio.run(inproc_phase(manager, wl, n, args.turns, args.phase_timeout))
        concurrent[n] = result
        if n == max(args.sessions):
            footprint = session_footprint(live[:10])
            footprint["tokens"] = sum(c.total_tokens for s in live[:10] for c in s.chains) / min(
                10, len(live)
            )
        check_tito(live[:50])
        for session in live:
            manager.delete(session.session_id)
        del live
        progress(f"in-process, {n} sessions: {result.turns} turns, {result.rate:.0f} turns/s")
    long_in = sequential_inproc(manager, wl, args.long_repeats, args.long_turns, args.phase_timeout)
    progress(f"in-process, long sessions: {long_in.turns} turns")

    # HTTP.
    http_single = http_long = None
    floors: dict[tuple[str, ...], PhaseResult] = {}
    http_conc: dict[int, PhaseResult] = {}
    rss_per_session = bytes_per_token = rest_per_session = rest_per_token = 0.0
    if not args.skip_http:
        with gateway_server() as server:
            progress(f"gateway server up (pid {server.proc.pid})")
            asyncio.run(http_phase(server, wl, 2, args.turns, 60.0))  # warm-up
            for n in sorted(args.sessions, reverse=True):
                gc.collect()
                rss0 = server.rss()
                result, live = asyncio.run(
                    http_phase(
                        server,
                        wl,
                        n,
                        args.turns,
                        args.phase_timeout,
                        keep=True,
                    )
                )
                if n == max(args.sessions):
                    rss_delta = result.rss_after - rss0
                    rss_per_session = rss_delta / n
                    bytes_per_token = rss_delta / max(1, result.stored_tokens)
                    rest_per_session = (result.rss_rest - rss0) / n
                    rest_per_token = (result.rss_rest - rss0) / max(1, result.stored_tokens)
                asyncio.run(http_close(server, live))
                http_conc[n] = result
                progress(
                    f"HTTP, {n} sessions: {result.turns} turns, {result.rate:.0f} turns/s, "
                    f"server CPU {result.cpu_s / result.wall_s:.0%}"
                )
            http_single = sequential_http(server, wl, args.single_sessions, args.turns, 60.0)
            progress(f"HTTP, 1 session: {ms(http_single.per_turn)} server CPU/turn")
            http_long = sequential_http(
                server, wl, args.long_repeats, args.long_turns, args.phase_timeout
            )
            progress(f"HTTP, long sessions: {http_long.turns} turns")
        for flags in ((), ("--encode",)):
            with gateway_server(FLOOR_SCRIPT, *flags) as floor_server:
                sequential_http(floor_server, wl, 2, args.turns, 60.0, check=False)  # warm-up
                floors[flags] = sequential_http(
                    floor_server, wl, args.single_sessions, args.turns, 60.0, check=False
                )
            progress(f"HTTP floor{' + encoding' if flags else ''}: {ms(floors[flags].per_turn)}")

    # Table.
    rows: list[Row] = [
        ("direct engine.generate: CPU per turn", ms(direct_cpu), "1.00x", "", ""),
        ("direct engine.generate: calls/s", f"{direct.rate:.0f}/s", "1.00x", "", ""),
        ("direct engine.generate: latency p50 / p99", f"{ms(d50)} / {ms(d99)}", "", "", ""),
    ]

    def cpu_row(label: str, result: PhaseResult) -> Row:
        cpu = result.per_turn
        overhead = cpu - direct_cpu
        return (
            label,
            ms(cpu),
            f"{cpu / direct_cpu:.1f}x direct",
            f"<= {TARGET_CPU_MS} ms (overhead {overhead * 1000:.3f} ms)",
            verdict(overhead * 1000 <= TARGET_CPU_MS),
        )

    rows.append(cpu_row(f"in-process, 1 session: CPU per turn (turns 1-{args.turns})", single))
    if http_single is not None:
        rows.append(cpu_row("HTTP, 1 session: server CPU per turn", http_single))
    for flags, label in (
        ((), "uvicorn + JSON parse + fixed reply"),
        (("--encode",), "the same + encoding the turn's new messages"),
    ):
        if flags in floors:
            cpu = floors[flags].per_turn
            rows.append(
                (
                    f"HTTP floor, 1 session: {label}: server CPU per turn",
                    ms(cpu),
                    f"{cpu / direct_cpu:.1f}x direct",
                    "",
                    "",
                )
            )

    def rate_rows(label: str, result: PhaseResult, http: bool) -> list[Row]:
        out: list[Row] = []
        note = ""
        if http:
            note = (
                f" (server CPU {result.cpu_s / result.wall_s:.0%}, "
                f"client {result.client_cpu_s / result.wall_s:.0%})"
            )
        out.append(
            (
                f"{label}: turns/s",
                f"{result.rate:.0f}/s{note}",
                f"{result.rate / direct.rate:.3f}x direct",
                f">= {TARGET_TURNS_S:.0f}/s",
                verdict(result.rate >= TARGET_TURNS_S),
            )
        )
        if http:
            capacity = result.turns / result.cpu_s
            out.append(
                (
                    f"{label}: turns per server CPU-second",
                    f"{capacity:.0f}/s",
                    f"{capacity / direct.rate:.3f}x direct",
                    f">= {TARGET_TURNS_S:.0f}/s",
                    verdict(capacity >= TARGET_TURNS_S),
                )
            )
        return out

    for n, result in concurrent.items():
        rows += rate_rows(f"in-process, {n} sessions", result, http=False)
    for n in args.sessions:
        if n in http_conc:
            rows += rate_rows(f"HTTP, {n} sessions", http_conc[n], http=True)

    def latency_row(label: str, result: PhaseResult) -> Row:
        p50 = quantile(result.latencies, 0.5) - d50
        p99 = quantile(result.latencies, 0.99) - d99
        return (f"{label}: added latency p50 / p99", f"{ms(p50)} / {ms(p99)}", "", "", "")

    rows.append(latency_row("in-process, 1 session", single))
    for n, result in concurrent.items():
        rows.append(latency_row(f"in-process, {n} sessions", result))
    if http_single is not None:
        rows.append(latency_row("HTTP, 1 session", http_single))
    for n in args.sessions:
        if n in http_conc:
            rows.append(latency_row(f"HTTP, {n} sessions", http_conc[n]))

    def long_rows(label: str, result: PhaseResult) -> list[Row]:
        first = turn_cpu_at(result, 1)
        out: list[Row] = []
        for turn in (1, 20, args.long_turns):
            cpu = turn_cpu_at(result, turn)
            last = turn == args.long_turns
            out.append(
                (
                    f"{label}: CPU at turn {turn}",
                    ms(cpu),
                    f"{cpu / first:.2f}x turn 1",
                    f"<= {TARGET_LONG_RATIO}x turn 1" if last else "",
                    verdict(cpu / first <= TARGET_LONG_RATIO) if last else "",
                )
            )
        return out

    rows += long_rows("in-process", long_in)
    if http_long is not None:
        rows += long_rows("HTTP", http_long)

    if footprint:
        per_token = (footprint["chains"] + footprint["calls"] + footprint["other"]) / footprint[
            "tokens"
        ]
        rows.append(
            (
                "in-process: Python heap per session (chains / calls / other)",
                f"{footprint['chains'] / 1024:.0f} / {footprint['calls'] / 1024:.0f} / "
                f"{footprint['other'] / 1024:.1f} KiB",
                f"{footprint['tokens']:.0f} stored tokens",
                "",
                "",
            )
        )
        rows.append(
            (
                "in-process: Python heap per stored token",
                f"{per_token:.1f} B",
                "",
                f"<= {TARGET_BYTES_PER_TOKEN:.0f} B",
                verdict(per_token <= TARGET_BYTES_PER_TOKEN),
            )
        )
    if rss_per_session:
        n = max(args.sessions)
        for when, per_session, per_token in (
            ("right after the last turn", rss_per_session, bytes_per_token),
            ("at rest", rest_per_session, rest_per_token),
        ):
            rows.append(
                (
                    f"HTTP: server RSS per live session, {when} ({n} sessions)",
                    f"{per_session / 1024:.0f} KiB",
                    "",
                    "",
                    "",
                )
            )
            rows.append(
                (
                    f"HTTP: server RSS per stored token, {when}",
                    f"{per_token:.1f} B",
                    "",
                    f"<= {TARGET_BYTES_PER_TOKEN:.0f} B",
                    verdict(per_token <= TARGET_BYTES_PER_TOKEN),
                )
            )

    progress("done")
    print(
        f"\n{args.turns}-turn sessions, reply {len(wl.reply_ids)} tokens, ~{wl.tokens_per_turn} "
        f"tokens per turn, turn-20 prompt ~{wl.first_prompt_tokens + 19 * wl.tokens_per_turn} "
        f"tokens; long sessions: {args.long_turns} turns x {args.long_repeats}\n"
    )
    print_table(rows)
    if args.profile:
        # Profiled separately: the profiler's own overhead must not leak into the table.
        profiler = cProfile.Profile()
        profiler.enable()
        sequential_inproc(manager, wl, args.single_sessions, args.turns, 60.0)
        sequential_inproc(manager, wl, 1, args.long_turns, args.phase_timeout)
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime")
        stats.print_stats(30)
        print(
            f"\ncProfile of the in-process path ({args.single_sessions} x {args.turns} turns + "
            f"1 x {args.long_turns} turns), by tottime:"
        )
        print(out.getvalue())


if __name__ == "__main__":
    main()
