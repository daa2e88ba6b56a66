"""Chain rules of GatewaySession: append, split, rollback, siblings, faults, capacity."""

from __future__ import annotations

import asyncio
import copy
from array import array

import pytest
from support.gateway_chat import SYSTEM, TOOLS, USER, ask, assistant, tool

from uni_agent_core.gateway.request import ChatRequest, Message, SamplingOverrides, ToolCall
from uni_agent_core.gateway.session import (
    ContextLengthError,
    RequestRejectedError,
    SessionClosedError,
)
from uni_agent_core.gateway.tito import tito_violations


def run(coro):
    return asyncio.run(coro)


def check(session) -> None:
    assert tito_violations(session.trajectories(), session.calls) == []


def test_linear_conversation_stays_one_chain(make_session) -> None:
    session, _ = make_session()

    async def go():
        history = [SYSTEM, USER]
        for turn in range(4):
            choice = await ask(session, history)
            assert choice.chain_id == 0
            history += [assistant(choice.content), Message(role="user", content=f"next {turn}")]

    run(go())
    assert len(session.chains) == 1 and session.chains[0].turns == 4
    check(session)
    (trajectory,) = session.trajectories()
    assert trajectory.num_turns == 4 and trajectory.trainable_tokens > 0


def test_the_engine_gets_compact_int32_prompts_equal_to_the_recorded_calls(make_session) -> None:
    session, engine = make_session()

    async def go():
        history = [SYSTEM, USER]
        for turn in range(3):
            choice = await ask(session, history)
            history += [assistant(choice.content), tool(f"out {turn}")]

    run(go())
    sent = [request.prompt_ids for request in engine.requests]
    assert all(isinstance(p, array) and p.typecode == "i" for p in sent)
    assert [p.tolist() for p in sent] == [call.prompt_ids for call in session.calls]
    check(session)


def test_subagent_with_other_system_prompt_forks_and_main_chain_resumes(make_session) -> None:
    session, _ = make_session()

    async def go():
        main = [SYSTEM, USER]
        first = await ask(session, main)
        sub = await ask(session, [Message(role="system", content="You are a searcher."), USER])
        main += [assistant(first.content), tool("found it")]
        resumed = await ask(session, main)
        return first, sub, resumed

    first, sub, resumed = run(go())
    assert sub.chain_id != first.chain_id
    assert resumed.chain_id == first.chain_id
    check(session)


def test_compaction_opens_a_new_chain(make_session) -> None:
    session, _ = make_session()

    async def go():
        history = [SYSTEM, USER]
        a = await ask(session, history)
        history += [assistant(a.content), Message(role="user", content="go on")]
        b = await ask(session, history)
        compacted = [SYSTEM, Message(role="user", content="Summary: fixed half. Continue.")]
        c = await ask(session, compacted)
        return a, b, c

    a, b, c = run(go())
    assert a.chain_id == b.chain_id != c.chain_id
    assert session.metrics.splits == 1
    check(session)


def test_identical_prompts_make_siblings_and_continuation_picks_newest(make_session) -> None:
    session, engine = make_session()

    async def go():
        engine.replies = {0: "same", 1: "same"}
        a = await ask(session, [SYSTEM, USER])
        b = await ask(session, [SYSTEM, USER])
        c = await ask(session, [SYSTEM, USER, assistant("same"), tool("ok")])
        return a, b, c

    a, b, c = run(go())
    assert a.chain_id != b.chain_id
    assert c.chain_id == b.chain_id  # most recently updated matching sibling
    check(session)


def test_older_sibling_wins_when_only_its_assistant_matches(make_session) -> None:
    session, engine = make_session()

    async def go():
        engine.replies = {0: "first", 1: "second"}
        a = await ask(session, [SYSTEM, USER])
        await ask(session, [SYSTEM, USER])
        c = await ask(session, [SYSTEM, USER, assistant("first"), tool("ok")])
        return a, c

    a, c = run(go())
    assert c.chain_id == a.chain_id
    assert session.metrics.rollbacks == 0
    check(session)


def test_rewrite_of_latest_assistant_rolls_back(make_session) -> None:
    session, engine = make_session()

    async def go():
        history = [SYSTEM, USER]
        a = await ask(session, history)
        history += [assistant(a.content), tool("out 1")]
        b = await ask(session, history)
        before = session.trajectories()[0]
        rewritten = history + [assistant("a much better action"), tool("out 2")]
        c = await ask(session, rewritten)
        return b, c, before

    b, c, before = run(go())
    assert c.chain_id == b.chain_id
    assert session.metrics.rollbacks == 1
    (after,) = session.trajectories()
    dropped = session.chains[0].dropped_trainable_tokens
    assert dropped == b.completion_tokens
    assert after.trainable_tokens == before.trainable_tokens - dropped + c.completion_tokens
    text = engine.tokenizer.decode(after.response_ids)
    assert "a much better action" in text
    # The rewrite is context: no trainable token decodes to it.
    trainable = [t for t, m in zip(after.response_ids, after.loss_mask, strict=True) if m]
    assert "better" not in engine.tokenizer.decode(trainable)
    check(session)
    assert [call.superseded for call in session.calls] == [False, True, False]
    # The trace's view of it: the rollback is marked where the rewrite starts, and the
    # superseded call keeps the tokens it sampled.
    (mark,) = after.metadata["rollback_marks"]
    assert mark["call"] == 1
    assert "better" in engine.tokenizer.decode(after.response_ids[mark["at"] :])
    assert "better" not in engine.tokenizer.decode(after.response_ids[: mark["at"]])
    records = session.model_calls()
    assert [c.continuation for c in records] == ["new", "append", "rollback"]
    assert records[1].dropped_ids == session.calls[1].output_ids
    assert records[1].completion_tokens == b.completion_tokens


def test_rollback_replacing_with_a_user_message_keeps_one_separator(make_session) -> None:
    session, engine = make_session()

    async def go():
        history = [SYSTEM, USER]
        a = await ask(session, history)
        history += [assistant(a.content), tool("out")]
        await ask(session, history)
        await ask(session, history + [assistant("edited"), Message(role="user", content="u")])

    run(go())
    text = engine.tokenizer.decode(session.trajectories()[0].response_ids)
    assert "<|im_end|>\n\n" not in text and "<|im_end|><|im_start|>" not in text
    check(session)


def test_rewrite_of_first_assistant_opens_new_chain(make_session) -> None:
    session, _ = make_session()

    async def go():
        a = await ask(session, [SYSTEM, USER])
        b = await ask(session, [SYSTEM, USER, assistant("not what you said"), tool("x")])
        return a, b

    a, b = run(go())
    assert a.chain_id != b.chain_id and session.metrics.rollbacks == 0
    check(session)


def test_drift_before_the_boundary_opens_new_chain(make_session) -> None:
    session, _ = make_session()

    async def go():
        history = [SYSTEM, USER]
        a = await ask(session, history)
        history += [assistant(a.content), tool("out")]
        b = await ask(session, history)
        drifted = [SYSTEM, Message(role="user", content="Fix the bug!")] + history[2:]
        c = await ask(session, drifted + [assistant(b.content), tool("more")])
        return b, c

    b, c = run(go())
    assert c.chain_id != b.chain_id and session.metrics.rollbacks == 0
    check(session)


def test_changed_tool_list_opens_new_chain(make_session) -> None:
    session, _ = make_session()

    async def go():
        a = await ask(session, [SYSTEM, USER], tools=TOOLS)
        more_tools = TOOLS + [{"type": "function", "function": {"name": "edit"}}]
        b = await ask(session, [SYSTEM, USER, assistant(a.content), tool("x")], tools=more_tools)
        c = await ask(session, [SYSTEM, USER, assistant(a.content), tool("x")], tools=TOOLS)
        return a, b, c

    a, b, c = run(go())
    assert b.chain_id != a.chain_id and c.chain_id == a.chain_id
    check(session)


def test_renamed_tool_call_ids_and_reserialized_arguments_continue(make_session) -> None:
    session, engine = make_session()
    engine.replies = {
        0: '<tool_call>\n{"name": "shell", "arguments": {"cmd": "ls", "n": 1}}\n</tool_call>'
    }

    async def go():
        a = await ask(session, [SYSTEM, USER], tools=TOOLS)
        assert a.finish_reason == "tool_calls"
        echoed = ToolCall(id="totally-new-id", name="shell", arguments='{"n":1,  "cmd":"ls"}')
        history = [SYSTEM, USER, assistant(a.content, [echoed]), tool("a.py", "totally-new-id")]
        return a, await ask(session, history, tools=TOOLS)

    a, b = run(go())
    assert b.chain_id == a.chain_id and session.metrics.rollbacks == 0
    check(session)


def test_engine_failure_leaves_no_partial_state(make_session) -> None:
    session, engine = make_session()
    engine.fail = {1, 2}

    async def go():
        history = [SYSTEM, USER]
        a = await ask(session, history)
        snapshot = session.trajectories()
        for messages in (history + [assistant(a.content), tool("x")], [SYSTEM]):
            with pytest.raises(RuntimeError, match="scripted engine failure"):
                await ask(session, messages)
        assert session.trajectories() == snapshot
        assert not any(c.reserved for c in session.chains)
        return await ask(session, history + [assistant(a.content), tool("x")])

    assert run(go()).chain_id == 0
    assert len(session.chains) == 1
    check(session)


def test_cancellation_releases_the_reservation(make_session) -> None:
    session, engine = make_session()

    async def go():
        a = await ask(session, [SYSTEM, USER])
        engine.gate = asyncio.Event()
        task = asyncio.create_task(ask(session, [SYSTEM, USER, assistant(a.content), tool("x")]))
        while len(engine.requests) < 2:
            await asyncio.sleep(0)
        assert session.chains[0].reserved
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        engine.gate = None
        return await ask(session, [SYSTEM, USER, assistant(a.content), tool("x")])

    assert run(go()).chain_id == 0
    assert not session.chains[0].reserved and len(session.calls) == 2
    check(session)


def test_concurrent_requests_for_one_prefix_use_separate_chains(make_session) -> None:
    session, engine = make_session()
    engine.delay = 0.01

    async def go():
        a = await ask(session, [SYSTEM, USER])
        history = [SYSTEM, USER, assistant(a.content), tool("x")]
        return await asyncio.gather(*(ask(session, history) for _ in range(3)))

    choices = run(go())
    assert len({c.chain_id for c in choices}) == 3  # the reserved chain is never shared
    check(session)


def test_n_samples_make_sibling_chains(make_session) -> None:
    session, _ = make_session()

    async def go():
        return await session.chat(ChatRequest(messages=[SYSTEM, USER], n=3))

    choices = run(go())
    assert [c.index for c in choices] == [0, 1, 2]
    assert len({c.chain_id for c in choices}) == 3
    check(session)


def test_capacity_closes_chains(make_session) -> None:
    session, engine = make_session(max_total_tokens=60)
    engine.replies = {0: "word " * 40}

    async def go():
        a = await ask(session, [SYSTEM, USER])
        with pytest.raises(ContextLengthError) as refused:
            await ask(session, [SYSTEM, USER, assistant(a.content), tool("x")])
        return a, refused.value

    a, refused = run(go())
    assert a.finish_reason == "length"
    assert session.chains[0].closed and len(session.chains) == 1
    assert refused.capacity == 60 and refused.prompt_tokens >= 60
    assert all(c.total_tokens <= 60 for c in session.chains)
    check(session)


def test_a_prompt_over_capacity_is_refused_without_an_engine_call(make_session) -> None:
    session, engine = make_session()

    async def go():
        a = await ask(session, [SYSTEM, USER])
        session.settings = type(session.settings)(max_total_tokens=session.chains[0].total_tokens)
        calls = len(engine.requests)
        with pytest.raises(ContextLengthError):
            await ask(session, [SYSTEM, USER, assistant(a.content), tool("x" * 50)])
        return calls

    calls = run(go())
    assert len(engine.requests) == calls
    (chain,) = session.chains
    assert chain.turns == 1 and not chain.closed and not chain.reserved
    assert session.metrics.context_length_refusals == 1


def test_length_stop_is_repaired_before_the_next_turn(make_session) -> None:
    session, engine = make_session()
    engine.replies = {0: "a long answer that gets cut"}

    async def go():
        a = await ask(session, [SYSTEM, USER], sampling=SamplingOverrides(max_tokens=3))
        assert a.finish_reason == "length"
        await ask(session, [SYSTEM, USER, assistant(a.content), tool("x")])

    run(go())
    trajectory = session.trajectories()[0]
    text = engine.tokenizer.decode(trajectory.response_ids)
    assert "<|im_end|>\n<|im_start|>user" in text
    check(session)


def test_multi_token_stop_strings_and_finalized_sessions_are_refused(make_session) -> None:
    session, _ = make_session()

    async def go():
        with pytest.raises(RequestRejectedError, match="single-token"):
            await ask(session, [SYSTEM, USER], sampling=SamplingOverrides(stop=["STOP HERE"]))
        session.close()
        with pytest.raises(SessionClosedError):
            await ask(session, [SYSTEM, USER])

    run(go())
    assert session.calls == []


def test_sampling_overrides_follow_the_policy(make_session) -> None:
    ignoring, engine = make_session(temperature=1.0)
    rejecting, _ = make_session(temperature=1.0, sampling_override="reject")

    async def go():
        await ask(ignoring, [SYSTEM, USER], sampling=SamplingOverrides(temperature=0.2))
        assert engine.requests[-1].temperature == 1.0
        with pytest.raises(RequestRejectedError, match="temperature"):
            await ask(rejecting, [SYSTEM, USER], sampling=SamplingOverrides(temperature=0.2))

    run(go())
    assert ignoring.metrics.sampling_overrides_ignored == 1


def test_ambiguous_deepest_rollback_splits_and_a_unique_one_wins(make_session) -> None:
    session, engine = make_session()

    async def go():
        engine.replies = {0: "a", 1: "b", 2: "c1", 3: "c2"}
        first = await ask(session, [SYSTEM, USER])
        await ask(session, [SYSTEM, USER])  # sibling: same prompt, reply "b"
        history = [SYSTEM, USER, assistant(first.content), tool("x")]
        one = await ask(session, history)  # continues the "a" chain, reply "c1"
        # Both the "a" chain (via its rollback-able latest turn) would match a rewrite here:
        unique = await ask(session, history + [assistant("rewritten"), tool("y")])
        return one, unique

    one, unique = run(go())
    assert unique.chain_id == one.chain_id and session.metrics.rollbacks == 1
    check(session)


def test_tied_rollback_candidates_open_a_new_chain(make_session) -> None:
    session, engine = make_session()
    engine.delay = 0.01

    async def go():
        engine.replies = {i: "same" for i in range(5)}
        await ask(session, [SYSTEM, USER])
        turn2 = [SYSTEM, USER, assistant("same"), tool("x")]
        await asyncio.gather(ask(session, turn2), ask(session, turn2))  # A appends, B opens
        turn3 = turn2 + [assistant("same"), tool("y")]
        twins = await asyncio.gather(ask(session, turn3), ask(session, turn3))
        tied = await ask(session, turn3 + [assistant("rewrite"), tool("z")])
        return twins, tied

    twins, tied = run(go())
    assert len({c.chain_id for c in twins}) == 2
    assert tied.chain_id not in {c.chain_id for c in twins}
    assert session.metrics.ambiguous_rollbacks == 1 and session.metrics.rollbacks == 0
    check(session)


def test_a_failing_sample_cancels_its_siblings_and_commits_nothing(make_session) -> None:
    session, engine = make_session()
    engine.fail = {1}
    engine.delay = 0.01

    async def go():
        with pytest.raises(RuntimeError, match="scripted engine failure"):
            await session.chat(ChatRequest(messages=[SYSTEM, USER], n=3))
        await asyncio.sleep(0.05)

    run(go())
    assert session.chains == [] and session.calls == []


def test_count_prompt_tokens_matches_every_kind_of_call_and_changes_nothing(make_session) -> None:
    session, engine = make_session()
    note = Message(role="system", content="note: tests are slow")

    async def counted_then_asked(messages):
        request = ChatRequest(messages=messages, tools=TOOLS)
        before = [(c.id, c.total_tokens, c.digests) for c in session.chains], len(session.calls)
        count = await session.count_prompt_tokens(request)
        assert (
            [(c.id, c.total_tokens, c.digests) for c in session.chains],
            len(session.calls),
        ) == (before)
        choice = await ask(session, messages, TOOLS)
        assert count == choice.prompt_tokens == len(engine.requests[-1].prompt_ids)
        return choice

    async def go():
        a = await counted_then_asked([SYSTEM, USER, note])  # new chain, a system note last
        history = [SYSTEM, USER, note, assistant(a.content), note, tool("x")]
        b = await counted_then_asked(history)  # append, a system note mid-history
        assert b.chain_id == a.chain_id
        # A rewrite of the latest assistant: a rollback, counted from the cut.
        c = await counted_then_asked([*history, assistant("rewritten"), USER])
        assert c.chain_id == a.chain_id and session.metrics.rollbacks == 1
        history += [assistant("rewritten"), USER, assistant(c.content), note, USER]
        d = await counted_then_asked(history)
        assert d.chain_id == a.chain_id and session.metrics.rollbacks == 1

    run(go())
    check(session)


def test_a_template_that_cannot_render_a_late_system_message_refuses_it(make_session) -> None:
    session, engine = make_session()
    session.codec = copy.copy(session.codec)
    session.codec.mid_system = False

    async def go():
        late = [USER, Message(role="system", content="note")]
        with pytest.raises(RequestRejectedError, match="system message after the first"):
            await ask(session, late)
        with pytest.raises(RequestRejectedError) as caught:
            await session.count_prompt_tokens(ChatRequest(messages=late))
        assert caught.value.param == "messages"
        first = await ask(session, [Message(role="system", content="first"), USER])
        history = [Message(role="system", content="first"), USER, assistant(first.content)]
        with pytest.raises(RequestRejectedError):  # appended to the chain: refused too
            await ask(session, [*history, Message(role="system", content="note")])

    run(go())
    assert len(session.calls) == 1 and not any(c.reserved for c in session.chains)
