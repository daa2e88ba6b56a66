"""The ChatML chat template with hermes-style tool calling used by agent-rl's bundled policies.

Both bundled policies (`tiny`, `smollm2-135m`) are ChatML models. The template renders:

- `tools` into the system turn (a `<tools>` block of JSON function signatures),
- assistant `tool_calls` as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks,
- each `tool` message as its own user turn wrapped in `<tool_response>` tags.

Every message renders to one self-contained turn ending with `<|im_end|>` and a newline, so a
conversation's render is the concatenation of its turns. That makes the template *prefix
stable*: rendering more messages never changes the text of earlier ones, which the gateway's
incremental encoder relies on (it never re-tokenizes what the model sampled).
"""

from __future__ import annotations

GENERATION_PROMPT = "<|im_start|>assistant\n"
END_OF_TURN = "<|im_end|>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

_TOOLS_PREAMBLE = (
    "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>"
)
_TOOLS_POSTAMBLE = (
    "\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call>'
)


def chatml_tool_template(default_system: str | None = None) -> str:
    """Return the Jinja chat template.

    Args:
        default_system: System prompt inserted when the conversation has no system message
            (SmolLM2 was trained with one); None inserts nothing.
    """
    default_block = ""
    if default_system:
        escaped = default_system.replace("\\", "\\\\").replace("'", "\\'")
        default_block = f"{{%- set ns.system = '{escaped}' %}}"
    return (
        "{%- set ns = namespace(system=none) %}"
        + default_block
        + "{%- if messages and messages[0]['role'] == 'system' %}"
        "{%- set ns.system = messages[0]['content'] if messages[0]['content'] is string "
        "else '' %}"
        "{%- set loop_messages = messages[1:] %}"
        "{%- else %}{%- set loop_messages = messages %}{%- endif %}"
        "{%- if tools %}"
        "{{- '<|im_start|>system\\n' }}"
        "{%- if ns.system %}{{- ns.system + '\\n\\n' }}{%- endif %}"
        "{{- '" + _TOOLS_PREAMBLE + "' }}"
        "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
        "{{- '" + _TOOLS_POSTAMBLE + "<|im_end|>\\n' }}"
        "{%- elif ns.system is not none %}"
        "{{- '<|im_start|>system\\n' + ns.system + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- for message in loop_messages %}"
        "{%- set content = message['content'] if message['content'] is string else '' %}"
        "{%- if message['role'] == 'tool' %}"
        "{{- '<|im_start|>user\\n<tool_response>\\n' + content }}"
        "{{- '\\n</tool_response><|im_end|>\\n' }}"
        "{%- elif message['role'] == 'assistant' %}"
        "{{- '<|im_start|>assistant\\n' + content }}"
        "{%- for call in message.get('tool_calls') or [] %}"
        "{%- set fn = call['function'] if call.get('function') else call %}"
        "{%- if content or not loop.first %}{{- '\\n' }}{%- endif %}"
        "{{- '<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' }}"
        "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}"
        "{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}"
        "{{- '}\\n</tool_call>' }}"
        "{%- endfor %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- else %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
