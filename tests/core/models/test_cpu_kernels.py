"""Building and declining the native CPU kernels (`uni_agent_core/models/cpu_kernels.py`)."""

from __future__ import annotations

import pytest

from uni_agent_core.models import cpu_kernels


def test_the_switch_keeps_every_caller_on_its_python_path(monkeypatch) -> None:
    monkeypatch.setenv(cpu_kernels.DISABLE_VARIABLE, "0")
    with pytest.raises(cpu_kernels.KernelUnavailable, match="AGENT_RL_CPU_KERNELS=0"):
        cpu_kernels._load()


def test_a_cpu_without_avx512_declines_without_compiling(monkeypatch) -> None:
    import torch

    monkeypatch.delenv(cpu_kernels.DISABLE_VARIABLE, raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(cpu_kernels, "_build", pytest.fail)
    with pytest.raises(cpu_kernels.KernelUnavailable, match="AVX-512"):
        cpu_kernels._load()


def test_a_failed_build_is_a_reason_not_a_crash(monkeypatch, tmp_path) -> None:
    from torch.utils import cpp_extension

    def no_compiler(**_):
        raise RuntimeError("Error building extension 'agent_rl_cpu'\nc++: not found")

    monkeypatch.setattr(cpu_kernels, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    import torch

    with pytest.raises(cpu_kernels.KernelUnavailable, match="Error building extension"):
        cpu_kernels._build(torch)


def test_the_build_is_keyed_by_source_torch_and_cpu() -> None:
    key = cpu_kernels._build_key("2.13.0", b"source")
    assert key.startswith("agent_rl_cpu-")
    assert key != cpu_kernels._build_key("2.14.0", b"source")
    assert key != cpu_kernels._build_key("2.13.0", b"other source")
    assert key == cpu_kernels._build_key("2.13.0", b"source")
