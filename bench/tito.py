"""Retokenization mismatch: what a text-level recorder would train on vs the gateway's record.

    python bench/tito.py [--models tiny smollm2-135m] [--conversations 20 6] [--turns 6 4]
                         [--new-tokens 48] [--concurrency 8] [--seed 0]

Multi-turn tool conversations are sampled from each policy with the real `HFEngine`
(temperature 1.0, at most `--new-tokens` per reply) through an in-process `SessionManager`: a
system prompt that asks for the `shell` tool, a task, then per turn the assistant reply; a reply
with tool calls gets a short synthetic tool result per call, a reply without one gets a user
nudge. `--conversations` and `--turns` take one value per model (or one for all); conversations
of a model run concurrently (`--concurrency`), so the engine batches them.

For every engine call (= sampled assistant turn) three things are checked:

1. *decode -> re-encode* (a recorder that stores the reply text and tokenizes it again):
   `tokenizer(tokenizer.decode(ids, skip_special_tokens=False), add_special_tokens=False)
   .input_ids != ids`;
2. *re-rendered conversation* (stricter: a recorder that stores the final messages and
   re-renders the whole conversation with the chat template, as text training pipelines do):
   the sampled ids are not found verbatim, in order, in the tokenized render of the final
   messages (content + parsed tool calls, as the client saw them);
3. *gateway*: the call is named by `tito_violations(session.trajectories(), session.calls)`
   (a chain-level violation counts against every call of that chain). Must be 0.

The table gives each as a share of assistant turns; checks 1-2 are the baseline the gateway is
compared with (last column: gateway share / re-render share).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any

from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.request import ChatRequest, Message, SamplingOverrides, ToolCall
from uni_agent_core.gateway.session import GatewaySession, SessionSettings
from uni_agent_core.gateway.tito import tito_violations
from uni_agent_core.inference import HFEngine
from uni_agent_core.tools.catalog import SHELL_TOOL

DEFAULT_CONVERSATIONS = {"tiny": 20, "smollm2-135m": 6}
DEFAULT_TURNS = {"tiny": 6, "smollm2-135m": 4}

SYSTEM = (
    "You are a coding agent working in a Linux shell. Always use the shell tool to inspect the "
    "repository and run commands: call it with a JSON object holding the command. Call one "
    "tool per turn and wait for its result."
)
TASKS = [
    "List the files in the repository root.",
    "Find where the function parse_config is defined.",
    "Run the test suite and tell me which tests fail.",
    "Show the first lines of README.md.",
    "Count the Python files under src/.",
    "Check which Python version is installed.",
    "Search the code for TODO comments.",
    "Show the git log of the last three commits.",
]
NUDGE = "Please use the shell tool to make progress: reply with a tool call."
TOOLS = [SHELL_TOOL]
_CALL_PROBLEM = re.compile(r"^call (\d+):")
_CHAIN_PROBLEM = re.compile(r"^chain (\d+):")


def tool_output(call: ToolCall, turn: int) -> str:
    """A short synthetic result for any call (the model's command is echoed back)."""
    args = call.arguments
    command = args.get("command") if isinstance(args, dict) else None
    if not isinstance(command, str):
        command = str(args)[:60]
    return (
        f"$ {command[:80]}\nREADME.md\nsetup.py\nsrc/\ntests/\n"
        f"(turn {turn}: 4 entries, exit code 0)"
    )


@dataclass
class Conversation:
    """One sampled conversation: its gateway session and the messages the client ended with."""

    session: GatewaySession
    messages: list[Message]
    tool_turns: int = 0


async def run_conversation(
    manager: SessionManager, index: int, turns: int, seed: int, max_tokens: int
) -> Conversation:
    session, _ = manager.create(metadata={"conversation": index})
    history = [
        Message(role="system", content=SYSTEM),
        Message(role="user", content=TASKS[index % len(TASKS)]),
    ]
    final: list[Message] = history
    tool_turns = 0
    for turn in range(turns):
        request = ChatRequest(
            messages=list(history),
            tools=TOOLS,
            sampling=SamplingOverrides(seed=seed * 1_000_003 + index * 1009 + turn),
        )
        (choice,) = await session.chat(request)
        calls = [
            ToolCall(id=f"call_{turn}_{j}", name=c.name, arguments=c.arguments)
            for j, c in enumerate(choice.tool_calls)
        ]
        history.append(Message(role="assistant", content=choice.content, tool_calls=calls or None))
        final = list(history)  # what a recorder stores: everything up to the last reply
        if calls:
            tool_turns += 1
            for call in calls:
                history.append(
                    Message(role="tool", content=tool_output(call, turn), tool_call_id=call.id)
                )
        else:
            history.append(Message(role="user", content=NUDGE))
    return Conversation(session, final, tool_turns)


def contains_at(haystack: list[int], needle: list[int], start: int) -> int:
    """End index of the first occurrence of `needle` in `haystack[start:]`, or -1."""
    if not needle:
        return start
    first, n = needle[0], len(needle)
    i = start
    while True:
        try:
            i = haystack.index(first, i)
        except ValueError:
            return -1
        if haystack[i : i + n] == needle:
            return i + n
        i += 1


def first_difference(tokenizer: Any, sampled: list[int], again: list[int]) -> str:
    """`sampled` vs its re-encoding at the first token where they part, as token strings."""
    i = next(
        (k for k, (a, b) in enumerate(zip(sampled, again, strict=False)) if a != b),
        min(len(sampled), len(again)),
    )
    was = tokenizer.convert_ids_to_tokens(sampled[i : i + 3])
    now = tokenizer.convert_ids_to_tokens(again[i : i + 3])
    return f"token {i}: {was} -> {now}"


@dataclass
class ModelResult:
    """Counts for one model (turn = one engine call = one sampled assistant reply)."""

    model: str
    conversations: int = 0
    turns: int = 0
    tool_turns: int = 0
    length_cut: int = 0
    sampled_tokens: int = 0
    decode_mismatch: int = 0
    render_mismatch: int = 0
    gateway_mismatch: int = 0
    chains: int = 0
    wall_s: float = 0.0
    examples: list[str] = field(default_factory=list)


def check_conversation(tokenizer: Any, convo: Conversation, result: ModelResult) -> None:
    session = convo.session
    calls = [c for c in session.calls if not c.superseded]
    result.conversations += 1
    result.turns += len(calls)
    result.tool_turns += convo.tool_turns
    result.chains += len(session.chains)

    # 1. decode -> re-encode, per call.
    for call in calls:
        result.sampled_tokens += len(call.output_ids)
        result.length_cut += call.finish_reason == "length"
        text = tokenizer.decode(call.output_ids, skip_special_tokens=False)
        again = tokenizer(text, add_special_tokens=False).input_ids
        if again != call.output_ids:
            result.decode_mismatch += 1
            if len(result.examples) < 3:
                result.examples.append(first_difference(tokenizer, call.output_ids, again))

    # 2. the whole conversation re-rendered from the final messages.
    rendered = session.codec.render(convo.messages, TOOLS, add_generation_prompt=False)
    render_ids = tokenizer(rendered, add_special_tokens=False).input_ids
    position = 0
    for call in calls:
        end = contains_at(render_ids, call.output_ids, position)
        if end < 0:
            result.render_mismatch += 1
        else:
            position = end

    # 3. the gateway's own record.
    problems = tito_violations(session.trajectories(), session.calls)
    bad: set[int] = set()
    for problem in problems:
        if m := _CALL_PROBLEM.match(problem):
            bad.add(int(m.group(1)))
        elif m := _CHAIN_PROBLEM.match(problem):
            chain_id = int(m.group(1))
            bad.update(n for n, c in enumerate(session.calls) if c.chain_id == chain_id)
    result.gateway_mismatch += len(bad)


async def bench_model(
    name: str, conversations: int, turns: int, args: argparse.Namespace
) -> ModelResult:
    engine = HFEngine.from_policy(name, max_batch_size=args.concurrency)
    tokenizer = engine.tokenizer
    manager = SessionManager(
        engine,
        tokenizer,
        settings=SessionSettings(temperature=1.0, max_tokens=args.new_tokens),
        max_sessions=conversations + 1,
    )
    result = ModelResult(name)
    gate = asyncio.Semaphore(args.concurrency)
    started = time.perf_counter()
    done = 0

    async def one(index: int) -> Conversation:
        nonlocal done
        async with gate:
            convo = await run_conversation(manager, index, turns, args.seed, args.new_tokens)
        done += 1
        elapsed = time.perf_counter() - started
        eta = elapsed / done * (conversations - done)
        print(
            f"  [{name}] conversation {done}/{conversations}: "
            f"{len(convo.session.calls)} turns ({convo.tool_turns} with tool calls), "
            f"{elapsed:.0f} s elapsed, ETA {eta:.0f} s",
            flush=True,
        )
        return convo

    try:
        convos = await asyncio.gather(*(one(i) for i in range(conversations)))
    finally:
        await engine.close()
    result.wall_s = time.perf_counter() - started
    for convo in convos:
        check_conversation(tokenizer, convo, result)
    return result


def share(count: int, total: int) -> str:
    return f"{count}/{total} ({count / total:.1%})" if total else "-"


def print_table(results: list[ModelResult]) -> None:
    headers = (
        "model",
        "convs",
        "assistant turns",
        "with tool calls",
        "decode->encode differs",
        "not verbatim in re-render",
        "gateway TITO violations",
        "gateway / re-render",
    )
    rows = [
        (
            r.model,
            f"{r.conversations} ({r.chains} chains)",
            f"{r.turns} ({r.sampled_tokens} tok, {r.length_cut} cut)",
            share(r.tool_turns, r.turns),
            share(r.decode_mismatch, r.turns),
            share(r.render_mismatch, r.turns),
            share(r.gateway_mismatch, r.turns),
            f"{r.gateway_mismatch / r.render_mismatch:.2f}x" if r.render_mismatch else "-",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    print(" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def per_model(values: list[int] | None, models: list[str], defaults: dict[str, int]) -> list[int]:
    if values is None:
        return [defaults.get(m, min(defaults.values())) for m in models]
    if len(values) == 1:
        return values * len(models)
    if len(values) != len(models):
        raise SystemExit(f"give one value or one per model ({len(models)}), got {values}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m"])
    parser.add_argument("--conversations", type=int, nargs="+", help="per model (20, 6)")
    parser.add_argument("--turns", type=int, nargs="+", help="per model (6, 4)")
    parser.add_argument("--new-tokens", type=int, default=48, help="max tokens per reply")
    parser.add_argument("--concurrency", type=int, default=8, help="conversations at once")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    conversations = per_model(args.conversations, args.models, DEFAULT_CONVERSATIONS)
    turns = per_model(args.turns, args.models, DEFAULT_TURNS)

    results = []
    for name, n, t in zip(args.models, conversations, turns, strict=True):
        print(f"sampling {name}: {n} conversations x {t} turns, <= {args.new_tokens} tok/reply")
        result = asyncio.run(bench_model(name, n, t, args))
        print(
            f"  done in {result.wall_s:.0f} s ({result.sampled_tokens / result.wall_s:.1f} "
            f"sampled tok/s); first decode->encode differences: {result.examples or 'none'}",
            flush=True,
        )
        results.append(result)

    print(
        "\nShare of sampled assistant turns whose exact tokens a text-level recorder would lose "
        "(columns 'decode->encode' and 're-render', the baseline) vs the gateway's record:\n"
    )
    print_table(results)


if __name__ == "__main__":
    main()
