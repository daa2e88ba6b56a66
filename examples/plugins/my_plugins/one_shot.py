"""A harness: one model call, its reply written to `answer.txt`.

A recipe names it with `harness: {type: plugin, path: my_plugins.one_shot:OneShotHarness,
options: {max_tokens: 32}}`. It talks to the episode's gateway session over the OpenAI API
like any agent, so the gateway records the call's exact tokens for training.
"""

from __future__ import annotations

import time
from typing import Any

import openai

from uni_agent_core.harness.base import Endpoint, HarnessResult
from uni_agent_core.sandbox.base import Sandbox
from uni_agent_core.types import ExitReason, TaskSpec, ToolCall


class OneShotHarness:
    def __init__(self, options: dict[str, Any]) -> None:
        self.max_tokens = int(options.get("max_tokens", 32))

    async def run(self, task: TaskSpec, sandbox: Sandbox, endpoint: Endpoint) -> HarnessResult:
        client = openai.AsyncOpenAI(
            base_url=endpoint.openai_base_url, api_key=endpoint.api_key, max_retries=0
        )
        try:
            reply = await client.chat.completions.create(
                model=endpoint.model,
                messages=[{"role": "user", "content": task.problem_statement}],
                max_tokens=self.max_tokens,
            )
        except openai.APIError as error:
            return HarnessResult(ExitReason.ENGINE_ERROR, 0, {"last_error": str(error)})
        finally:
            await client.close()
        answer = (reply.choices[0].message.content or "").strip()
        started = time.time()
        await sandbox.write_file(f"{sandbox.workdir}/answer.txt", answer + "\n")
        call = ToolCall(name="write_answer", arguments=answer, started_at=started)
        return HarnessResult(ExitReason.FINISHED, 1, actions=[call])
