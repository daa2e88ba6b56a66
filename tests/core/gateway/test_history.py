"""Incremental history lowering: the memo only ever saves work, never changes a result."""

from __future__ import annotations

import asyncio
import copy
import random
from typing import Any

import pytest

from uni_agent_core.gateway.adapters.anthropic import parse_anthropic_request
from uni_agent_core.gateway.adapters.errors import WireError
from uni_agent_core.gateway.adapters.openai import parse_openai_request
from uni_agent_core.gateway.hashing import prefix_hashes
from uni_agent_core.gateway.history import (
    HistoryCache,
    LoweredHistory,
    history_hashes,
    lower_history,
)
from uni_agent_core.gateway.request import Message


def _tool_turn(i: int) -> list[dict[str, Any]]:
    call = {"id": f"call_{i}", "type": "function"}
    call["function"] = {"name": "shell", "arguments": f'{{"cmd": "ls {i}"}}'}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"file_{i}.py\n" * (i + 1)},
    ]


def _openai(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "m", "messages": copy.deepcopy(messages)}


def _conversation(turns: int) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"}]
    for i in range(turns):
        messages += _tool_turn(i)
    return messages


def _counting_lower(calls: list[int]):
    def lower(raw: Any, i: int) -> list[Message]:
        calls.append(i)
        return [Message(role=raw["role"], content=raw["content"])]

    return lower


def test_an_appended_request_lowers_only_its_new_messages() -> None:
    cache, calls = HistoryCache(), []
    raw = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    first = lower_history("p", None, [], raw, _counting_lower(calls), cache)
    assert calls == [0, 1, 2, 3, 4] and (cache.hits, cache.misses) == (0, 1)

    calls.clear()
    longer = copy.deepcopy(raw) + [
        {"role": "user", "content": "m5"},
        {"role": "user", "content": "m6"},
    ]
    second = lower_history("p", None, [], longer, _counting_lower(calls), cache)
    assert calls == [5, 6] and cache.hits == 1
    assert second[5:] == [Message(role="user", content="m5"), Message(role="user", content="m6")]
    assert calls == [5, 6], "a slice after the remembered prefix must not lower the prefix"

    # Reading the prefix lowers it then, and the whole history equals a full lowering.
    full = [Message(role="user", content=f"m{i}") for i in range(7)]
    assert list(second) == full and calls == [5, 6, 0, 1, 2, 3, 4]
    assert second.hashes == prefix_hashes(full) == history_hashes(second)
    assert len(second) == 7 and second[-1] == full[-1] and second[2] == full[2]
    assert first.hashes == prefix_hashes(full[:5])


def test_an_identical_resend_lowers_nothing() -> None:
    cache, calls = HistoryCache(), []
    raw = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    lower_history("p", None, [], raw, _counting_lower(calls), cache)
    calls.clear()
    again = lower_history("p", None, [], copy.deepcopy(raw), _counting_lower(calls), cache)
    assert calls == [] and again.hashes == prefix_hashes(list(again)) and cache.hits == 1


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m[1].update(content="fix it, please"),  # content changed before the boundary
        lambda m: (  # an id changed (raw bytes differ)
            m[2]["tool_calls"][0].update(id="renamed"),
            m[3].update(tool_call_id="renamed"),
        ),
        lambda m: m.insert(2, {"role": "user", "content": "inserted"}),
        lambda m: m.__setitem__(0, {"content": "sys", "role": "system"}),  # same value, key order
    ],
)
def test_a_rewritten_history_is_lowered_again_in_full(edit) -> None:
    cache = HistoryCache()
    messages = _conversation(3)
    parse_openai_request(_openai(messages), cache)
    edited = copy.deepcopy(messages) + _tool_turn(3)
    edit(edited)
    request = parse_openai_request(_openai(edited), cache)
    reference = parse_openai_request(_openai(edited))
    assert cache.misses == 2 and cache.hits == 0
    assert list(request.messages) == list(reference.messages)
    assert history_hashes(request.messages) == prefix_hashes(list(reference.messages))


def test_openai_requests_over_a_growing_tool_loop_match_a_full_lowering() -> None:
    cache = HistoryCache()
    for turns in range(8):
        messages = _conversation(turns)
        request = parse_openai_request(_openai(messages), cache)
        reference = parse_openai_request(_openai(messages))
        assert isinstance(request.messages, LoweredHistory)
        assert history_hashes(request.messages) == prefix_hashes(list(reference.messages))
        assert list(request.messages) == list(reference.messages)
        assert request.messages[-2:] == reference.messages[-2:]
    assert (cache.hits, cache.misses) == (7, 1)


def test_a_bad_new_message_is_refused_with_its_index_and_leaves_the_memo() -> None:
    cache = HistoryCache()
    messages = _conversation(2)
    parse_openai_request(_openai(messages), cache)
    remembered = cache.memo
    bad = messages + [{"role": "wizard", "content": "x"}]
    with pytest.raises(WireError) as error:
        parse_openai_request(_openai(bad), cache)
    assert error.value.param == f"messages[{len(messages)}].role"
    assert cache.memo is remembered


def test_anthropic_memo_covers_the_system_prompt() -> None:
    cache = HistoryCache()

    def body(system: str, turns: int) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "fix it"}]
        for i in range(turns):
            use = {"type": "tool_use", "id": f"t{i}", "name": "shell", "input": {"cmd": "ls"}}
            result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"out {i}"}
            messages += [
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [result]},
            ]
        return {"model": "m", "max_tokens": 8, "system": system, "messages": messages}

    parse_anthropic_request(body("sys", 1), cache)
    request = parse_anthropic_request(body("sys", 2), cache)
    assert cache.hits == 1
    assert list(request.messages) == list(parse_anthropic_request(body("sys", 2)).messages)
    changed = parse_anthropic_request(body("another system", 3), cache)
    assert cache.hits == 1 and cache.misses == 2
    assert history_hashes(changed.messages) == prefix_hashes(
        list(parse_anthropic_request(body("another system", 3)).messages)
    )
    # A memo of one protocol never serves the other.
    parse_openai_request(_openai(_conversation(1)), cache)
    assert cache.memo is not None and cache.memo.protocol == "openai"


def test_random_edit_sequences_always_match_a_full_lowering() -> None:
    rng = random.Random(7)
    cache = HistoryCache()
    messages = _conversation(0)
    for step in range(200):
        action = rng.random()
        if action < 0.6:
            messages = messages + _tool_turn(step)
        elif action < 0.75 and len(messages) > 3:
            messages = messages[: rng.randrange(2, len(messages))]  # compaction / rollback
        elif action < 0.9:
            i = rng.randrange(len(messages))
            messages = copy.deepcopy(messages)
            if messages[i]["content"] is not None:
                messages[i]["content"] += " edited"
        request = parse_openai_request(_openai(messages), cache)
        reference = list(parse_openai_request(_openai(messages)).messages)
        assert history_hashes(request.messages) == prefix_hashes(reference), step
        assert list(request.messages) == reference, step
    assert cache.hits > 50 and cache.misses > 20


def test_the_session_releases_a_wire_history_while_generating(make_session) -> None:
    session, engine = make_session()
    request = parse_openai_request(_openai(_conversation(2)), session.history)
    assert len(request.messages) == 6
    lengths_seen_by_the_engine: list[int] = []
    generate = engine.generate

    async def recording(engine_request):
        lengths_seen_by_the_engine.append(len(request.messages))
        return await generate(engine_request)

    engine.generate = recording
    asyncio.run(session.chat(request))
    assert lengths_seen_by_the_engine == [0]
    assert request.messages.hashes == []  # the plan keeps them as one blob


def test_tool_results_are_checked_against_the_memo_without_reading_the_prefix() -> None:
    from uni_agent_core.gateway.adapters.errors import WireError

    cache = HistoryCache()
    messages = _conversation(3)
    parse_openai_request(_openai(messages), cache)
    assert cache.tool_call_ids == {"call_0", "call_1", "call_2"}
    # The next turn answers a call of the remembered prefix: only the tail is read.
    answer = {"role": "tool", "tool_call_id": "call_2", "content": "again"}
    request = parse_openai_request(_openai([*messages, answer]), cache)
    assert request.messages.raw_known == len(messages) and cache.hits == 1
    orphan = {"role": "tool", "tool_call_id": "call_9", "content": "?"}
    with pytest.raises(WireError, match="call_9"):
        parse_openai_request(_openai([*messages, answer, orphan]), cache)
    assert cache.memo is None, "a refused history must be checked in full next time"
    with pytest.raises(WireError, match="tool_call_id is required"):
        parse_openai_request(_openai([*messages, {"role": "tool", "content": "x"}]))
