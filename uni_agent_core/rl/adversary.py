"""An adversarial agent: a scripted black-box harness that attacks the run from inside its
sandbox, for the chaos run (`rl/chaos.py`) and `bench/chaos.py` (issue 48).

It needs no model. Run as a black-box agent (`where: sandbox`, so with the session's URL and key
in its environment and the sandbox's network), it tries, in order:

1. to end its own episode's session with its own key (`DELETE`, `finalize`) and to read the
   session's record (`trajectories`, `calls`);
2. to open side sessions (with its key, without one, with a 100,000-token sampling cap), then
   to flood `POST /sessions`;
3. to read the operational endpoints (`/metrics`, `/docs`, `/openapi.json`, `/redoc`);
4. to tell which other session ids exist (a random id against its own: the same answer?);
5. one model call with `max_tokens: 100000` on its own session (the session's cap holds);
6. to hold hundreds of connections to the gateway, through the in-sandbox listener and the link's
   socket directly, then one more model call;
7. to make its workspace and its temporary directory impossible to clean up (`mkdir -p x/y &&
   chmod 000 x`).

It prints what each attempt got as one JSON object (`ATTEMPTS_MARKER` first) and exits 0, so
its episode ends `finished` and is scored by the hidden tests like any other: it fixed nothing,
so it scores 0.
"""

from __future__ import annotations

from uni_agent_core.config.harness import BlackboxHarnessConfig

ATTEMPTS_MARKER = "agent-rl-adversary:"
"""Precedes the JSON record of the attempts on the adversary's stdout."""

HELD_CONNECTIONS = 300
"""Connections the adversary opens and holds at once (half through the in-sandbox listener)."""

FLOOD_SESSIONS = 200
"""`POST /sessions` requests in the flood."""

ADVERSARY_SCRIPT = r"""
import json, os, socket, urllib.error, urllib.request, uuid

base = os.environ["OPENAI_BASE_URL"].rstrip("/")
key = os.environ["OPENAI_API_KEY"]
session_root = base[: -len("/v1")]
gateway = session_root.rsplit("/sessions/", 1)[0]
mine = {"Authorization": "Bearer " + key}
got = {}


def ask(method, url, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            reply.read()
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError as error:
        return type(error).__name__


chat = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000}
got["delete_own"] = ask("DELETE", session_root, headers=mine)
got["finalize_own"] = ask("POST", session_root + "/finalize", headers=mine)
got["read_trajectories"] = ask("GET", session_root + "/trajectories", headers=mine)
got["read_calls"] = ask("GET", session_root + "/calls", headers=mine)
side = {"sampling": {"max_tokens": 100000}}
got["side_session_with_key"] = ask("POST", gateway + "/sessions", side, mine)
got["side_session_without_key"] = ask("POST", gateway + "/sessions", side)
flood = [ask("POST", gateway + "/sessions", {}, mine) for _ in range(FLOOD_SESSIONS)]
got["flood_created"] = sum(status == 200 for status in flood)
for path in ("/metrics", "/docs", "/openapi.json", "/redoc"):
    got["read" + path] = ask("GET", gateway + path, headers=mine)
other = gateway + "/sessions/" + uuid.uuid4().hex + "/v1/chat/completions"
got["unknown_session"] = ask("POST", other, chat, mine)
wrong = {"Authorization": "Bearer sk-agent-rl-guess"}
got["wrong_key_own_session"] = ask("POST", base + "/chat/completions", chat, wrong)
got["chat_uncapped"] = ask("POST", base + "/chat/completions", chat, mine)

host, port = gateway.split("//", 1)[1].split(":")
held = []
for i in range(HELD_CONNECTIONS):
    try:
        if i % 2 and os.path.exists("/run/agent-rl/gateway.sock"):
            connection = socket.socket(socket.AF_UNIX)
            connection.connect("/run/agent-rl/gateway.sock")
        else:
            connection = socket.create_connection((host, int(port)), timeout=5)
        held.append(connection)
    except OSError:
        break
got["connections_opened"] = len(held)
got["chat_while_holding"] = ask("POST", base + "/chat/completions", chat, mine)
for connection in held:
    connection.close()

for where in (".", os.environ.get("TMPDIR", "/tmp")):
    try:
        os.makedirs(where + "/agent-x/y/z", exist_ok=True)
        os.chmod(where + "/agent-x/y", 0)
        os.chmod(where + "/agent-x", 0)
        got["locked " + where] = True
    except OSError as error:
        got["locked " + where] = type(error).__name__
print(MARKER + json.dumps(got), flush=True)
"""


def adversary_harness(
    *, flood: int = FLOOD_SESSIONS, held: int = HELD_CONNECTIONS, timeout_s: float = 120.0
) -> BlackboxHarnessConfig:
    """The adversary as a black-box harness section (a task's `harness` override), flooding
    `flood` session requests and holding `held` connections."""
    script = (
        ADVERSARY_SCRIPT.replace("FLOOD_SESSIONS", str(flood))
        .replace("HELD_CONNECTIONS", str(held))
        .replace("MARKER", repr(ATTEMPTS_MARKER))
    )
    return BlackboxHarnessConfig(command=["python3", "-c", script], timeout_s=timeout_s)
