"""Tool-call parsers: hermes round trips through the real chat template, xml, stream filter."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uni_agent_core.gateway.parsers import (
    HermesParser,
    ParseResult,
    ToolCallStreamFilter,
    XmlParser,
    get_parser,
)
from uni_agent_core.models import load_policy

ASSISTANT_OPEN = "<|im_start|>assistant\n"
END_OF_TURN = "<|im_end|>"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    _, tok = load_policy("tiny")
    return tok


def render_hermes(tokenizer: Any, content: str, calls: list[tuple[str, Any]]) -> str:
    """The assistant body our chat template renders for `content` and `calls`."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)
        ]
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}, message], tokenize=False
    )
    start = text.index(ASSISTANT_OPEN) + len(ASSISTANT_OPEN)
    return text[start : text.index(END_OF_TURN, start)]


def render_xml(content: str, calls: list[tuple[str, dict[str, Any]]], wrap: bool = True) -> str:
    """Qwen3-Coder's rendering: trimmed content, a blank line, then the calls."""
    out = content
    for name, args in calls:
        params = "".join(
            f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
            for k, v in args.items()
        )
        call = f"<function={name}>\n{params}</function>"
        out += "\n\n" + (f"<tool_call>\n{call}\n</tool_call>" if wrap else call)
    return out


def call_pairs(result: ParseResult) -> list[tuple[str, Any]]:
    assert all(call.id is None for call in result.tool_calls)
    return [(call.name, call.arguments) for call in result.tool_calls]


ROUND_TRIPS = {
    "text only": ("Just an answer.\nWith two lines.", []),
    "empty": ("", []),
    "one call": ("", [("shell", {"cmd": "ls -la"})]),
    "several calls": (
        "",
        [("shell", {"cmd": "ls"}), ("editor", {"path": "a.py", "line": 3}), ("finish", {})],
    ),
    "content and calls": ("Let me look at the files.", [("shell", {"cmd": "ls"})]),
    "content ending in newlines": ("Plan:\n1. look\n\n", [("shell", {"cmd": "pwd"})]),
    "unicode, newlines, nested": (
        "Édition — 日本語 ✓",
        [
            (
                "editor",
                {
                    "text": 'def f():\n    return "é\\n"\n',
                    "opts": {"nested": {"list": [1, 2.5, None, True], "empty": {}}},
                    "emoji": "🙂\t<b>",
                },
            )
        ],
    ),
}


@pytest.mark.parametrize("case", ROUND_TRIPS, ids=list(ROUND_TRIPS))
def test_hermes_inverts_the_chat_template(tokenizer: Any, case: str) -> None:
    content, calls = ROUND_TRIPS[case]
    result = HermesParser().parse(render_hermes(tokenizer, content, calls))
    assert result.error is None
    assert not result.truncated
    assert result.content == content
    assert call_pairs(result) == calls


def test_hermes_arguments_as_json_string_become_a_dict(tokenizer: Any) -> None:
    text = render_hermes(tokenizer, "", [("shell", json.dumps({"cmd": "echo hi"}))])
    assert call_pairs(HermesParser().parse(text)) == [("shell", {"cmd": "echo hi"})]
    quoted = '<tool_call>{"name": "shell", "arguments": "{\\"cmd\\": \\"ls\\"}"}</tool_call>'
    assert call_pairs(HermesParser().parse(quoted)) == [("shell", {"cmd": "ls"})]


def test_hermes_tolerates_whitespace_and_parameters_key() -> None:
    text = (
        'Sure.\n<tool_call>  \n\t{"name": "f", "parameters": {"a": 1}}\n\n</tool_call>\n\n'
        '<tool_call>{"name": "g"}</tool_call>\n'
    )
    result = HermesParser().parse(text)
    assert result.error is None
    assert result.content == "Sure."
    assert call_pairs(result) == [("f", {"a": 1}), ("g", {})]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"name": "f", "arguments": {"a": 1}', "invalid JSON"),
        ('{"arguments": {"a": 1}}', "'name'"),
        ('{"name": "", "arguments": {}}', "'name'"),
        ('["f", {}]', "JSON object"),
        ('{"name": "f", "arguments": [1, 2]}', "must be a JSON object"),
        ('{"name": "f", "arguments": "not json"}', "must be a JSON object"),
        ('{"name": "f", "arguments": "[1]"}', "must be a JSON object"),
    ],
)
def test_hermes_malformed_call_is_an_error_with_raw_content(body: str, message: str) -> None:
    good = '<tool_call>\n{"name": "ok", "arguments": {}}\n</tool_call>'
    text = f"Trying.\n{good}\n<tool_call>\n{body}\n</tool_call>"
    result = HermesParser().parse(text)
    assert result.error is not None
    assert message in result.error
    assert "tool call 2" in result.error
    assert result.content == text
    assert result.tool_calls == []
    assert not result.truncated


def test_hermes_text_after_a_call_is_an_error() -> None:
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call>\nDone!'
    result = HermesParser().parse(text)
    assert result.error is not None and "after </tool_call>" in result.error
    assert (result.content, result.tool_calls) == (text, [])


@pytest.mark.parametrize(
    "text",
    [
        'Let me run it.\n<tool_call>\n{"name": "shell", "arguments": {"cmd": "l',
        "Wrap each call in a <tool_call> tag, like the docs say.",
        '<tool_call>{"name": "f", "arguments": {}}</tool_call>\n<tool_ca',
    ],
    ids=["cut mid call", "prose mention", "cut in second tag"],
)
def test_hermes_unclosed_call_is_truncated(text: str) -> None:
    result = HermesParser().parse(text)
    assert result.truncated
    assert result.error is None
    assert (result.content, result.tool_calls) == (text, [])


def test_hermes_partial_tag_without_call_is_content() -> None:
    assert HermesParser().parse("a < b\n<tool") == ParseResult(content="a < b\n<tool")


XML_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "edit",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "line": {"type": "integer"},
                    "force": {"type": "boolean"},
                    "opts": {"type": "object"},
                    "limit": {"type": ["integer", "null"]},
                    "label": {"type": ["string", "null"]},
                    "name": {"type": "string"},
                },
            },
        },
    }
]
XML_ARGS = {
    "path": "12",
    "line": "7",
    "force": "true",
    "opts": '{"a": [1, null]}',
    "limit": "null",
    "label": "3",
    "name": '"quoted"',
}


def test_xml_values_stay_strings_without_schema() -> None:
    text = render_xml("I will edit.", [("edit", XML_ARGS)])
    result = XmlParser().parse(text)
    assert result.error is None
    assert result.content == "I will edit."
    assert call_pairs(result) == [("edit", XML_ARGS)]


def test_xml_schema_decodes_non_string_parameters() -> None:
    text = render_xml("", [("edit", XML_ARGS), ("other", {"line": "7"})])
    result = XmlParser().parse(text, tools=XML_TOOLS)
    assert result.error is None
    assert call_pairs(result) == [
        (
            "edit",
            {
                "path": "12",
                "line": 7,
                "force": True,
                "opts": {"a": [1, None]},
                "limit": None,
                "label": "3",
                "name": '"quoted"',
            },
        ),
        ("other", {"line": "7"}),
    ]


def test_xml_schema_keeps_values_that_are_not_json() -> None:
    args = {"line": "seven", "force": "False", "opts": '"just a string"'}
    result = XmlParser().parse(render_xml("", [("edit", args)]), tools=XML_TOOLS)
    assert call_pairs(result) == [
        ("edit", {"line": "seven", "force": False, "opts": '"just a string"'})
    ]


def test_xml_strips_exactly_one_newline_and_allows_no_wrapper() -> None:
    text = (
        "<function=write>\n<parameter=text>\n\n  body\n\n</parameter>\n"
        "<parameter=empty></parameter>\n</function>\n"
        "<tool_call><function=finish></function></tool_call>"
    )
    result = XmlParser().parse(text)
    assert result.error is None
    assert call_pairs(result) == [("write", {"text": "\n  body\n", "empty": ""}), ("finish", {})]


@pytest.mark.parametrize(
    ("text", "truncated", "error"),
    [
        ("ok\n<tool_call>\n<function=edit>\n<parameter=path>\na.p", True, None),
        ("<tool_call>\n<function=edit>\n</function>\n</tool_", True, None),
        ("<function=edit", True, None),
        ("<function=edit>\n<parameter=path>\na\n</parameter>\ntext\n</function>", False, "KEY"),
        ("<function=>\n</function>", False, "function name"),
        (
            "<function=e>\n<parameter=a>1</parameter><parameter=a>2</parameter></function>",
            False,
            "twice",
        ),
        ("<tool_call>\n<function=e>\n</function>\nmore\n</tool_call>", False, "</tool_call>"),
        ("<function=e>\n</function>\nafterwards", False, "after the call"),
    ],
)
def test_xml_failures_return_raw_content(text: str, truncated: bool, error: str | None) -> None:
    result = XmlParser().parse(text)
    assert result.truncated is truncated
    if error is None:
        assert result.error is None
    else:
        assert result.error is not None and error in result.error
    assert (result.content, result.tool_calls) == (text, [])


def test_get_parser() -> None:
    assert isinstance(get_parser("hermes"), HermesParser)
    assert isinstance(get_parser("xml"), XmlParser)
    with pytest.raises(ValueError, match="'hermes' or 'xml'"):
        get_parser("json")  # type: ignore[arg-type]


def stream(deltas: list[str], parser: str = "hermes") -> tuple[list[str], str]:
    """Feed `deltas`; return what each feed emitted and everything emitted."""
    filt = ToolCallStreamFilter(parser)  # type: ignore[arg-type]
    outs = [filt.feed(delta) for delta in deltas]
    outs.append(filt.finish())
    return outs, "".join(outs)


def test_stream_filter_holds_a_split_tag() -> None:
    outs, emitted = stream(["Let me look.\n<too", "l_call>\n{", '"name": "f"}\n</tool_call>'])
    assert outs == ["Let me look.", "", "", ""]
    assert emitted == "Let me look."


def test_stream_filter_releases_what_is_not_a_tag() -> None:
    outs, _ = stream(["a <", "b> <tool", "box> x\n", "y\n\n", "z"])
    assert outs == ["a ", "<b> ", "<toolbox> x", "\ny\n", "\nz", ""]
    outs, _ = stream(["end\n<tool"])
    assert outs == ["end", "\n<tool"]


def test_stream_filter_xml_function_tag() -> None:
    outs, emitted = stream(["Edit now.  \n\n<func", "tion=edit>\n</function>"], parser="xml")
    assert outs == ["Edit now.", "", ""]
    text = "Edit now.  \n\n<function=edit>\n</function>"
    assert emitted == XmlParser().parse(text).content


def splits(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted({min(c, len(text)) for c in cuts}), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


CONTENT = st.lists(
    st.sampled_from(["a", "é ", "\n", "\n\n", "<", ">", "<tool", "_call>", "</tool_call>", "<b>"]),
    max_size=8,
).map("".join)
ARGS = st.dictionaries(
    st.text("abc_", min_size=1, max_size=4),
    st.one_of(st.integers(), st.booleans(), st.none(), st.text("xy \n\"'é{}", max_size=6)),
    max_size=3,
)
CALLS = st.lists(st.tuples(st.sampled_from(["shell", "edit", "finish"]), ARGS), max_size=3)


@settings(max_examples=150, deadline=None)
@given(content=CONTENT, calls=CALLS, data=st.data())
def test_stream_filter_emits_exactly_the_parsed_content(
    tokenizer: Any, content: str, calls: list[tuple[str, dict[str, Any]]], data: st.DataObject
) -> None:
    text = render_hermes(tokenizer, content, calls)
    result = HermesParser().parse(text)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    _, emitted = stream(splits(text, cuts))
    if "<tool_call>" in content:
        # The content itself opens a call: the reply fails to parse and is returned raw, of
        # which the streamed text is a prefix.
        assert result.error is not None or result.truncated
        assert text.startswith(emitted)
    else:
        assert (result.content, call_pairs(result)) == (content, calls)
        assert emitted == content


@settings(max_examples=100, deadline=None)
@given(content=CONTENT, calls=CALLS, wrap=st.booleans(), data=st.data())
def test_stream_filter_matches_xml_parse(
    content: str, calls: list[tuple[str, dict[str, Any]]], wrap: bool, data: st.DataObject
) -> None:
    text = render_xml(content, calls, wrap=wrap)
    result = XmlParser().parse(text)
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    _, emitted = stream(splits(text, cuts), parser="xml")
    if result.error is None and not result.truncated:
        assert emitted == result.content
    else:
        assert text.startswith(emitted)
