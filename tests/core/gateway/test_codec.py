"""ChatCodec: template detection, incremental encoding equal to full renders, rejections."""

from __future__ import annotations

import copy

import pytest

from uni_agent_core.gateway.codec import ChatCodec, TemplateError
from uni_agent_core.gateway.request import Message, ToolCall
from uni_agent_core.models import load_policy

TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("name", ["tiny", "smollm2-135m"])
def test_detects_template_boundaries(name: str) -> None:
    codec = ChatCodec(load_policy(name)[1])
    assert codec.generation_prompt == "<|im_start|>assistant\n"
    assert (codec.eos_text, codec.separator) == ("<|im_end|>", "\n")
    assert codec.eos_token_id == codec.tokenizer.convert_tokens_to_ids("<|im_end|>")


@pytest.mark.parametrize("name", ["tiny", "smollm2-135m"])
def test_incremental_encoding_reproduces_the_full_render(name: str) -> None:
    codec = ChatCodec(load_policy(name)[1])
    call = ToolCall(id="c1", name="shell", arguments={"cmd": "ls -la"})
    turns = [
        Message(role="system", content="You fix bugs."),
        Message(role="user", content="Tests fail in utils.py"),
        Message(role="assistant", content="Looking.", tool_calls=[call]),
        Message(role="tool", content="utils.py\nREADME.md", tool_call_id="c1"),
        Message(role="assistant", content="Found it."),
        Message(role="user", content="Go ahead and fix it."),
    ]
    tokens = codec.encode_full(turns[:2], TOOLS)
    for i, message in enumerate(turns[2:], start=2):
        if message.role == "assistant":
            # What the model would have sampled: the assistant body, then EOS.
            body = codec.render(turns[: i + 1], TOOLS, add_generation_prompt=False)
            prompt = codec.render(turns[:i], TOOLS, add_generation_prompt=True)
            sampled = codec.encode_text(body[len(prompt) :].removesuffix("\n"))
            tokens += sampled
        else:
            tokens += codec.encode_delta([message], TOOLS, previous_ended=True)
    assert tokens == codec.encode_full(turns, TOOLS)


def test_length_stopped_turn_gets_its_end_of_turn_as_context() -> None:
    codec = ChatCodec(load_policy("tiny")[1])
    user = Message(role="user", content="more")
    ended = codec.encode_delta([user], None, previous_ended=True)
    cut = codec.encode_delta([user], None, previous_ended=False)
    assert cut == [codec.eos_token_id] + ended


def test_delta_rules() -> None:
    codec = ChatCodec(load_policy("tiny")[1])
    user, assistant = Message(role="user", content="u"), Message(role="assistant", content="a")
    assert codec.encode_delta([assistant, user], None, previous_ended=True)  # rollback rewrite
    with pytest.raises(ValueError, match="only the first"):
        codec.encode_delta([user, assistant], None, previous_ended=True)
    with pytest.raises(ValueError, match="at least one"):
        codec.encode_delta([], None, previous_ended=True)


@pytest.mark.parametrize("name", ["tiny", "smollm2-135m"])
def test_a_system_message_after_the_first_renders_in_place(name: str) -> None:
    # Claude Code sends environment notes as `system`-role messages mid-conversation.
    codec = ChatCodec(load_policy(name)[1])
    assert codec.mid_system
    turns = [
        Message(role="system", content="You fix bugs."),
        Message(role="user", content="Fix a.py"),
        Message(role="system", content="# Environment\ncwd: /work"),
        Message(role="assistant", content="Looking."),
        Message(role="system", content="note: tests are slow"),
        Message(role="user", content="go on"),
    ]
    first = codec.encode_full(turns[:3], TOOLS)
    assert "<|im_start|>system\n# Environment\ncwd: /work<|im_end|>" in codec.tokenizer.decode(
        first
    )
    body = codec.render(turns[:4], TOOLS, add_generation_prompt=False)
    prompt = codec.render(turns[:3], TOOLS, add_generation_prompt=True)
    sampled = codec.encode_text(body[len(prompt) :].removesuffix("\n"))
    delta = codec.encode_delta(turns[4:], TOOLS, previous_ended=True)
    assert first + sampled + delta == codec.encode_full(turns, TOOLS)


def test_a_template_without_mid_conversation_system_messages_is_usable_but_refuses_them() -> None:
    tokenizer = copy.deepcopy(load_policy("tiny")[1])
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' and not loop.first %}"
        "{{ raise_exception('System role only first') }}{% endif %}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    codec = ChatCodec(tokenizer)
    assert not codec.mid_system
    with pytest.raises(ValueError, match="system message after the first"):
        codec.encode_delta([Message(role="system", content="s")], None, previous_ended=True)


def test_prefix_unstable_templates_are_rejected() -> None:
    tokenizer = copy.deepcopy(load_policy("tiny")[1])
    # A header that appears only once the conversation is long enough: earlier renders are
    # then no longer prefixes of later ones.
    tokenizer.chat_template = (
        "{% if messages | length > 2 %}{{ '<|im_start|>system\\nlong chat<|im_end|>\\n' }}"
        "{% endif %}"
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
        "'<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    with pytest.raises(TemplateError, match="prefix-stable|reproduce"):
        ChatCodec(tokenizer)
    tokenizer.chat_template = None
    with pytest.raises(TemplateError, match="no chat template"):
        ChatCodec(tokenizer)
