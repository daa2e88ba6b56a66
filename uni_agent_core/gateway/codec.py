"""Chat-template codec: full renders for new chains, incremental deltas for continuing ones.

The gateway never re-tokenizes what a model sampled. A continuing chain keeps its token buffer
and only the *new* messages are encoded, as a delta that starts with the template's turn
separator and ends with its generation prompt:

    ...<sampled assistant tokens, ending in EOS> | "\\n<|im_start|>user\\n...<|im_end|>\\n" +
    "<|im_start|>assistant\\n"

At start-up the codec derives, from the template itself:

- the generation prompt (render with and without `add_generation_prompt`; must be a suffix),
- the end-of-turn text after an assistant message and its split into the EOS the model emits
  and the separator that follows it as context,

and checks on a probe conversation that `render(prefix) + delta == render(all)` as text, and
that the delta tokenizes the same way on its own as inside the full render. A template that
fails these checks cannot be trained exactly and is rejected with a clear error.

A system message after the first (Claude Code sends its environment notes as `system`-role
messages mid-conversation) is rendered in place when the same checks hold for a delta that
carries one and its text appears in the render (`mid_system`; true for the bundled ChatML
template). A template without it (one that raises, drops or moves such a message) is still
usable: the session refuses requests that need it.

An assistant turn that stopped on `length` never emitted its EOS: before more messages arrive,
the delta then starts with the end-of-turn text (context, never trainable) so the buffer stays
well-formed for the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from uni_agent_core.errors import AgentRLError
from uni_agent_core.gateway.request import Message

_PROBE_USER = "agent-rl codec probe"
_PROBE_ASSISTANT = "AGENTRLASSISTANTMARK"
_PROBE_NOTE = "AGENTRLSYSTEMNOTE"
_PROBE_TOOLS = [{"type": "function", "function": {"name": "probe", "parameters": {}}}]


class TemplateError(AgentRLError, ValueError):
    """The chat template cannot be encoded incrementally (not prefix-stable)."""


def message_to_template(message: Message) -> dict[str, Any]:
    """The dict a Hugging Face chat template expects for one message."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name is not None:
        out["name"] = message.name
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id or f"call_{i}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for i, call in enumerate(message.tool_calls)
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.reasoning_content is not None:
        out["reasoning_content"] = message.reasoning_content
    return out


class ChatCodec:
    """Renders and encodes conversations for one tokenizer and chat template.

    Args:
        tokenizer: a `transformers` tokenizer with a chat template.
        template_kwargs: extra variables for the template (e.g. thinking switches).
    """

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError("the tokenizer has no chat template")
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        # The Rust tokenizer directly (when there is one) skips ~45 us of Python wrapping per
        # call, and its `encode_batch_fast` another ~18 us (no character offsets are computed);
        # `_self_check` verifies it gives the same ids as the transformers tokenizer.
        fast = getattr(tokenizer, "backend_tokenizer", None)
        self._fast = fast if hasattr(fast, "encode_batch_fast") else None
        self._base_renders: dict[bytes, str] = {}
        self.generation_prompt = self._detect_generation_prompt()
        self.eos_text, self.separator = self._detect_end_of_turn()
        self.generation_prompt_ids = self.encode_text(self.generation_prompt)
        self.separator_ids = self.encode_text(self.separator)
        self.end_of_turn_ids = self.encode_text(self.eos_text + self.separator)
        eos_ids = self.encode_text(self.eos_text)
        if len(eos_ids) != 1:
            raise TemplateError(
                f"the end-of-turn text {self.eos_text!r} must be one token, got {eos_ids}"
            )
        self.eos_token_id = eos_ids[0]
        self.mid_system = False
        """Whether a system message after the first renders in place, prefix-stably."""
        self._self_check()
        self.mid_system = self._renders_mid_system()

    # -- rendering ------------------------------------------------------------------------

    def render(
        self,
        messages: Sequence[Message],
        tools: list[dict[str, Any]] | None,
        *,
        add_generation_prompt: bool,
    ) -> str:
        """The template's text for `messages` (and `tools`)."""
        return self._render_dicts(
            [message_to_template(m) for m in messages], tools, add_generation_prompt
        )

    def encode_text(self, text: str) -> list[int]:
        """Tokenize template text (special tokens in the text are recognised, none added)."""
        if self._fast is not None:
            return self._fast.encode_batch_fast([text], add_special_tokens=False)[0].ids
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_full(
        self, messages: Sequence[Message], tools: list[dict[str, Any]] | None
    ) -> list[int]:
        """Token ids of a whole conversation plus the generation prompt (a new chain's prompt)."""
        return self.encode_text(self.render(messages, tools, add_generation_prompt=True))

    def encode_delta(
        self,
        new_messages: Sequence[Message],
        tools: list[dict[str, Any]] | None,
        *,
        previous_ended: bool,
    ) -> list[int]:
        """Token ids that continue a chain with `new_messages` and open the next assistant turn.

        Args:
            new_messages: messages after the chain's history; an assistant message may only
                come first (the rewrite of a rolled-back turn).
            tools: the chain's tools (they only shape the system turn, which is not re-sent).
            previous_ended: whether the buffer already ends with the end-of-turn token (the
                last assistant turn stopped on EOS); if not, it is added as context.
        """
        if not new_messages:
            raise ValueError("a delta needs at least one new message")
        if any(m.role == "assistant" for m in new_messages[1:]):
            raise ValueError("only the first new message may be an assistant message")
        if not self.mid_system and any(m.role == "system" for m in new_messages):
            raise ValueError("this chat template cannot render a system message after the first")
        text = self._delta_text(new_messages, tools)
        head = self.separator if previous_ended else self.eos_text + self.separator
        return self.encode_text(head + text)

    def _delta_text(
        self, new_messages: Sequence[Message], tools: list[dict[str, Any]] | None
    ) -> str:
        anchor = [{"role": "user", "content": ""}]
        tools_id = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS) if tools else b""
        base = self._base_renders.get(tools_id)
        if base is None:
            base = self._base_renders[tools_id] = self._render_dicts(anchor, tools, False)
        full = self._render_dicts(
            anchor + [message_to_template(m) for m in new_messages], tools, True
        )
        if not full.startswith(base):
            raise TemplateError("the chat template is not prefix-stable for appended messages")
        delta = full[len(base) :]
        return delta

    def _render_dicts(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, gen: bool
    ) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            tokenize=False,
            add_generation_prompt=gen,
            **self.template_kwargs,
        )

    # -- start-up detection -----------------------------------------------------------------

    def _detect_generation_prompt(self) -> str:
        messages = [{"role": "user", "content": _PROBE_USER}]
        without = self._render_dicts(messages, None, False)
        with_prompt = self._render_dicts(messages, None, True)
        if not with_prompt.startswith(without) or with_prompt == without:
            raise TemplateError("add_generation_prompt must append a suffix to the render")
        return with_prompt[len(without) :]

    def _detect_end_of_turn(self) -> tuple[str, str]:
        user = [{"role": "user", "content": _PROBE_USER}]
        both = user + [{"role": "assistant", "content": _PROBE_ASSISTANT}]
        prompt = self._render_dicts(user, None, True)
        rendered = self._render_dicts(both, None, False)
        if not rendered.startswith(prompt + _PROBE_ASSISTANT):
            raise TemplateError(
                "an assistant message must render as generation prompt + content + end of turn"
            )
        tail = rendered[len(prompt) + len(_PROBE_ASSISTANT) :]
        eos = self.tokenizer.eos_token
        if not eos or not tail.startswith(eos):
            raise TemplateError(
                f"the assistant turn must end with the tokenizer's EOS {eos!r}; it ends {tail!r}"
            )
        return eos, tail[len(eos) :]

    def _self_check(self) -> None:
        system = Message(role="system", content="probe system")
        user = Message(role="user", content=_PROBE_USER)
        assistant = Message(role="assistant", content="probe reply")
        tool_reply = Message(role="tool", content="probe tool output", tool_call_id="c0")
        for tools in (None, _PROBE_TOOLS):
            prefix = [system, user]
            prompt_text = self.render(prefix, tools, add_generation_prompt=True)
            full_text = self.render(
                [*prefix, assistant, tool_reply], tools, add_generation_prompt=True
            )
            stitched = (
                prompt_text
                + assistant.content
                + self.eos_text
                + self.separator
                + self._delta_text([tool_reply], tools)
            )
            if stitched != full_text:
                raise TemplateError(
                    "incremental encoding does not reproduce the full render:\n"
                    f"  stitched: {stitched!r}\n  full:     {full_text!r}"
                )
            delta_ids = self.encode_delta([tool_reply], tools, previous_ended=True)
            full_ids = self.encode_text(full_text)
            if full_ids[-len(delta_ids) :] != delta_ids:
                raise TemplateError("a delta tokenizes differently alone than in the full render")
        if self.encode_text(self.generation_prompt) != self.generation_prompt_ids:
            raise TemplateError("the generation prompt does not tokenize stably")
        if self._fast is not None:
            probe = full_text + " héllo\n\twörld <tool_call>{}</tool_call>"
            slow = self.tokenizer(probe, add_special_tokens=False)["input_ids"]
            if self.encode_text(probe) != slow:
                self._fast = None  # the wrapper post-processes: keep the slow, exact path

    def _renders_mid_system(self) -> bool:
        """Probe: a delta with a system message (first, alone, or before a user message)
        stitches onto the prefix to the full render, tokenizes alike there, and shows the text.
        """
        system = Message(role="system", content="probe system")
        user = Message(role="user", content=_PROBE_USER)
        assistant = Message(role="assistant", content="probe reply")
        note = Message(role="system", content=_PROBE_NOTE)
        try:
            for tools in (None, _PROBE_TOOLS):
                for delta in ([note], [note, user]):
                    prefix = [system, user]
                    prompt_text = self.render(prefix, tools, add_generation_prompt=True)
                    full_text = self.render(
                        [*prefix, assistant, *delta], tools, add_generation_prompt=True
                    )
                    tail = self.eos_text + self.separator + self._delta_text(delta, tools)
                    if prompt_text + assistant.content + tail != full_text:
                        return False
                    if _PROBE_NOTE not in tail:
                        return False
                    delta_ids = self.encode_text(self.separator + self._delta_text(delta, tools))
                    if self.encode_text(full_text)[-len(delta_ids) :] != delta_ids:
                        return False
        except Exception:  # deliberate: a template may raise on such a message in any way
            return False
        return True
