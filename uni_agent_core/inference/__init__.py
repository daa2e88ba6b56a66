"""Inference engines: the `Engine` contract, the in-process `HFEngine`, server-backed engines."""

from uni_agent_core.inference.hf_engine import EngineStepError, HFEngine
from uni_agent_core.inference.types import (
    Engine,
    EngineClosedError,
    EngineStats,
    FinishReason,
    GenerateRequest,
    PauseMode,
    TokenOutput,
)

__all__ = [
    "Engine",
    "EngineClosedError",
    "EngineStats",
    "EngineStepError",
    "FinishReason",
    "GenerateRequest",
    "HFEngine",
    "PauseMode",
    "TokenOutput",
]


def __getattr__(name: str):
    # The server engine pulls in httpx; import it only when asked for.
    if name == "OpenAIServerEngine":
        from uni_agent_core.inference.openai_server import OpenAIServerEngine

        return OpenAIServerEngine
    raise AttributeError(name)
