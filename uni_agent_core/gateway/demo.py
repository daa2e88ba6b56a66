"""`agent-rl gateway demo`: a short agent conversation through a live gateway, token truth shown.

Starts a gateway on loopback over the in-process engine, opens a session, and plays a small
tool-using conversation with the real `openai` SDK (the reply of each turn is echoed back with
a tool result, as an agent harness would). It then prints what the trainer would receive: the
chains, their trainable tokens, and the TITO check of every engine call.
"""

from __future__ import annotations

import httpx

from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.testing import control_headers, running_gateway
from uni_agent_core.gateway.tito import tito_violations
from uni_agent_core.inference.hf_engine import HFEngine
from uni_agent_core.tools.catalog import SHELL_TOOL
from uni_agent_core.types import EngineCall, Trajectory


def run_demo(model: str = "smollm2-135m", turns: int = 3, max_tokens: int = 48) -> int:
    """Play `turns` turns through a live gateway and print the recorded trajectories."""
    import openai

    engine = HFEngine.from_policy(model)
    manager = SessionManager(engine, engine.tokenizer)
    with running_gateway(manager, model_name=model) as url:
        control = control_headers(manager)
        session = httpx.post(url + "/sessions", json={}, headers=control, timeout=30).json()
        print(f"gateway {url}, session {session['session_id']}")
        client = openai.OpenAI(base_url=session["openai_base_url"], api_key=session["api_key"])
        messages = [
            {"role": "system", "content": "You are a coding agent. Use the shell tool."},
            {"role": "user", "content": "Which files are in the repository?"},
        ]
        for turn in range(turns):
            # The history and the tool schema are plain JSON dicts (replies re-enter it as
            # `model_dump()`); openai's per-role TypedDicts cannot describe them.
            reply = client.chat.completions.create(
                model=model,
                messages=messages,  # type: ignore[arg-type]
                tools=[SHELL_TOOL],  # type: ignore[list-item]
                max_tokens=max_tokens,
            )
            message = reply.choices[0].message
            shown = (message.content or "").replace("\n", " ")[:70]
            print(f"turn {turn + 1}: {reply.choices[0].finish_reason:10s} {shown!r}")
            messages.append(message.model_dump(exclude_none=True))
            if message.tool_calls:
                for call in message.tool_calls:
                    messages.append(
                        {"role": "tool", "tool_call_id": call.id, "content": "README.md\nsrc/"}
                    )
            else:
                messages.append({"role": "user", "content": "Please use the shell tool."})
        root = f"{url}/sessions/{session['session_id']}"
        trajectories = [
            Trajectory(**t) for t in httpx.get(root + "/trajectories", headers=control).json()
        ]
        calls = [EngineCall(**c) for c in httpx.get(root + "/calls", headers=control).json()]
    for t in trajectories:
        print(
            f"chain {t.chain_id}: {len(t.prompt_ids)} prompt + {len(t.response_ids)} response "
            f"tokens, {t.trainable_tokens} trainable, {t.num_turns} turns"
        )
    problems = tito_violations(trajectories, calls)
    print(f"TITO check over {len(calls)} engine calls: {problems or 'OK'}")
    return 1 if problems else 0
