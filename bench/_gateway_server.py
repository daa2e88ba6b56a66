"""A gateway process over an instant fake engine, for `bench/gateway.py` (not a public tool).

    python bench/_gateway_server.py --port 8123 [--max-sessions 100000]

Serves `SessionManager(InstantEngine(...), tiny_tokenizer)` with the gateway's own `serve` (what
`agent-rl gateway serve` runs) on 127.0.0.1 only. `InstantEngine` answers every request at once
with the same precomputed reply (a hermes `shell` tool call ending in EOS), so whatever CPU the
process spends is the gateway's (HTTP, JSON, chain bookkeeping, encoding), not the model's. The
process exits by itself when the process that started it goes away, so a crashed benchmark never
leaves a server behind.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

from uni_agent_core.inference.types import (
    EngineDefaults,
    EngineStats,
    FinishReason,
    GenerateRequest,
    PauseMode,
    TokenOutput,
)

REPLY_TOKENS = 28
"""Tokens of the instant reply, EOS included (a short `shell` call costs 27 tiny tokens)."""
REPLY_LOGPROB = -0.5


def load_tiny_tokenizer() -> Any:
    """The `tiny` policy's tokenizer, without loading the model."""
    from transformers import AutoTokenizer

    from uni_agent_core.models import prepare_policy

    return AutoTokenizer.from_pretrained(prepare_policy("tiny"))


def reply_ids(tokenizer: Any, tokens: int = REPLY_TOKENS) -> list[int]:
    """Token ids of a `shell` tool call in hermes format, EOS-terminated, exactly `tokens` long.

    The command `ls` gets an argument of `x`s until the reply has the requested length, so it
    decodes to a well-formed call (the client echoes it back as an assistant `tool_calls`
    message, like a real agent harness).
    """
    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    for pad in range(4 * tokens):
        command = "ls " + "x" * pad if pad else "ls"
        call = {"name": "shell", "arguments": {"command": command}}
        text = "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
        if len(ids) == tokens:
            return ids
        if len(ids) > tokens:
            break
    raise ValueError(f"cannot build a {tokens}-token tool-call reply with this tokenizer")


class InstantEngine(EngineDefaults):
    """An `Engine` that answers every request immediately with one fixed reply.

    Args:
        token_ids: the reply (token ids, EOS included); every call returns a copy.
        version: policy version stamped on every token.
    """

    def __init__(self, token_ids: list[int], version: int = 0) -> None:
        self.token_ids = list(token_ids)
        self.logprobs = [REPLY_LOGPROB] * len(token_ids)
        self.version = version
        self.calls = 0

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        self.calls += 1
        n = min(len(self.token_ids), request.max_new_tokens)
        return TokenOutput(
            request_id=request.request_id,
            token_ids=self.token_ids[:n],
            logprobs=self.logprobs[:n],
            finish_reason=FinishReason.STOP if n == len(self.token_ids) else FinishReason.LENGTH,
            policy_version=[self.version] * n,
            prompt_tokens=len(request.prompt_ids),
        )

    async def update_weights(self, state: Any, version: int) -> None:
        self.version = version

    async def pause(self, mode: PauseMode = "keep") -> None:
        return None

    async def resume(self) -> None:
        return None

    def stats(self) -> EngineStats:
        return EngineStats(policy_version=self.version)

    async def close(self) -> None:
        return None


def _exit_with_parent(parent: int) -> None:
    # Polling: a dead parent re-parents us (getppid changes); the server must not outlive it.
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-sessions", type=int, default=100_000)
    parser.add_argument("--reply-tokens", type=int, default=REPLY_TOKENS)
    args = parser.parse_args()

    from uni_agent_core.gateway.launch import serve
    from uni_agent_core.gateway.manager import SessionManager

    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    tokenizer = load_tiny_tokenizer()
    engine = InstantEngine(reply_ids(tokenizer, args.reply_tokens))
    manager = SessionManager(engine, tokenizer, max_sessions=args.max_sessions)
    # Exactly what `agent-rl gateway serve` runs, over the instant engine.
    serve(manager, host="127.0.0.1", port=args.port, model_name="agent-rl-policy", backlog=4096)


if __name__ == "__main__":
    main()
