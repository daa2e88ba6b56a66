"""`agent-rl gateway demo` runs end to end with the tiny policy."""

from __future__ import annotations

from uni_agent_core.gateway.demo import run_demo


def test_demo_records_a_clean_trajectory(capsys) -> None:
    assert run_demo(model="tiny", turns=2, max_tokens=12) == 0
    out = capsys.readouterr().out
    assert "TITO check over 2 engine calls: OK" in out
    assert "chain 0:" in out
