"""The floor under the gateway's HTTP cost, for `bench/gateway.py` (not a public tool).

    python bench/_gateway_floor.py --port 8124 [--encode]

A server on the gateway's own stack (uvicorn, an ASGI app, orjson) that does the least any
gateway on it must do for a chat turn: read the body and parse its JSON, then answer a fixed
OpenAI tool-call completion (the shape `bench/gateway.py`'s client expects). With `--encode` it
also turns the turn's new messages into token ids with the gateway's `ChatCodec`, as the gateway
does (string in, token out): the whole conversation on turn 1, on later turns only the messages
after the last assistant turn (the gateway reuses the sampled tokens of that turn, never
re-encodes them). There are no sessions, chains, engine or call records: whatever the gateway
costs beyond this floor is its own logic. `/health`, `POST /sessions` and `DELETE` answer just
enough for the benchmark's client to run unchanged. Loopback only; exits with its parent.
"""

from __future__ import annotations

import argparse
import os
import threading
from typing import Any

import orjson
from _gateway_server import _exit_with_parent, load_tiny_tokenizer

from uni_agent_core.gateway.codec import ChatCodec
from uni_agent_core.gateway.request import Message

_CALL = {
    "id": "call_0",
    "type": "function",
    "function": {"name": "shell", "arguments": '{"command": "ls"}'},
}


def _reply(prompt_tokens: int) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-floor",
            "object": "chat.completion",
            "created": 0,
            "model": "agent-rl-policy",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": "", "tool_calls": [_CALL]},
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 1,
                "total_tokens": prompt_tokens + 1,
            },
        }
    )


def _new_tokens(codec: ChatCodec, request: dict[str, Any]) -> int:
    """Encode what a gateway must: the messages after the last assistant turn."""
    messages = request["messages"]
    tools = request.get("tools")
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    if last < 0:
        return len(codec.encode_full([Message(**m) for m in messages], tools))
    new = [Message(**m) for m in messages[last + 1 :]]
    return len(codec.encode_delta(new, tools, previous_ended=True))


def make_app(port: int, codec: ChatCodec | None) -> Any:
    """The ASGI app (see the module docstring); `codec` None: no encoding."""
    session = orjson.dumps(
        {
            "session_id": "floor",
            "api_key": "floor",
            "openai_base_url": f"http://127.0.0.1:{port}/sessions/floor/v1",
        }
    )

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        path = scope["path"]
        if path.endswith("/chat/completions"):
            request = orjson.loads(body)
            out = _reply(_new_tokens(codec, request) if codec is not None else 1)
        elif path == "/sessions" and scope["method"] == "POST":
            out = session
        else:
            out = b"{}"
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(out))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--encode", action="store_true", help="also encode the new messages")
    args = parser.parse_args()

    import uvicorn

    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    codec = ChatCodec(load_tiny_tokenizer()) if args.encode else None
    app = make_app(args.port, codec)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
