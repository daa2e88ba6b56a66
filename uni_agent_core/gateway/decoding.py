"""Turning sampled tokens into an assistant reply: text, tool calls and the finish reason.

Decoding only produces what the client is shown; the tokens recorded for training are always
the sampled ids themselves. Rules:

- without tools, the reply is the decoded text (special tokens such as EOS removed);
- with tools, tool calls are parsed (hermes or xml); a reply cut by the token limit is
  `length` and its text is returned raw, even if it started a tool call (a truncated call is
  never presented as a call); a malformed call is returned as text and counted;
- streaming hands out text as it becomes final: incomplete UTF-8 sequences are held back, and
  with tools nothing after the start of a tool call is streamed (calls are sent when parsed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from uni_agent_core.gateway.metrics import GatewayMetrics
from uni_agent_core.gateway.parsers import ParserName, ToolCallStreamFilter, get_parser
from uni_agent_core.gateway.request import FinishReasonOut, ToolCall
from uni_agent_core.inference.types import FinishReason


@dataclass
class DecodedReply:
    """An assistant reply as the client sees it."""

    content: str
    finish_reason: FinishReasonOut
    tool_calls: list[ToolCall] = field(default_factory=list)
    parse_error: str | None = None


class _Detokenizer:
    """Incremental detokenization that never emits half a UTF-8 character."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._emitted = 0

    def feed(self, token_ids: list[int], final: bool = False) -> str:
        self._ids.extend(token_ids)
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        end = len(text)
        if not final:
            while end > self._emitted and text[end - 1] == "\ufffd":
                end -= 1
        if end <= self._emitted:
            return ""
        piece, self._emitted = text[self._emitted : end], end
        return piece


class ReplyStreamer:
    """Streams the content of one reply as its tokens arrive."""

    def __init__(self, tokenizer: Any, parser: ParserName, tools: list[dict[str, Any]] | None):
        self._detokenizer = _Detokenizer(tokenizer)
        self._filter = ToolCallStreamFilter(parser) if tools else None

    def feed(self, token_ids: list[int]) -> str:
        text = self._detokenizer.feed(token_ids)
        return self._filter.feed(text) if self._filter else text

    def finish(self) -> str:
        text = self._detokenizer.feed([], final=True)
        if self._filter is None:
            return text
        return self._filter.feed(text) + self._filter.finish()


class ReplyDecoder:
    """Decodes sampled token ids into `DecodedReply`s for one tokenizer and tool-call format."""

    def __init__(self, tokenizer: Any, parser: ParserName, metrics: GatewayMetrics) -> None:
        self.tokenizer = tokenizer
        self.parser_name = parser
        self.parser = get_parser(parser)
        self.metrics = metrics

    def decode(
        self,
        token_ids: list[int],
        finish_reason: FinishReason,
        tools: list[dict[str, Any]] | None,
    ) -> DecodedReply:
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        cut = finish_reason is FinishReason.LENGTH
        if not tools:
            return DecodedReply(text, "length" if cut else "stop")
        parsed = self.parser.parse(text, tools=tools)
        if cut:
            if parsed.truncated or parsed.tool_calls:
                self.metrics.truncated_tool_calls += 1
            return DecodedReply(text, "length")
        if parsed.error is not None:
            self.metrics.parse_failures += 1
            return DecodedReply(text, "stop", parse_error=parsed.error)
        if parsed.truncated:
            self.metrics.truncated_tool_calls += 1
            return DecodedReply(text, "stop", parse_error="unterminated tool call")
        if parsed.tool_calls:
            return DecodedReply(parsed.content, "tool_calls", list(parsed.tool_calls))
        return DecodedReply(parsed.content, "stop")

    def streamer(self, tools: list[dict[str, Any]] | None) -> ReplyStreamer:
        return ReplyStreamer(self.tokenizer, self.parser_name, tools)

    def stream_text(self, token_ids: list[int], tools: list[dict[str, Any]] | None) -> str:
        """The streamable content of a finished reply (for engines that cannot stream)."""
        streamer = self.streamer(tools)
        return streamer.feed(token_ids) + streamer.finish()
