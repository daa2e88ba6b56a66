"""The TITO invariant (token in, token out) as a checkable property of a session's record.

For every engine call of a chain: the prompt the engine received equals the chain's
`prompt_ids + response_ids` up to that call, and the call's output appears verbatim, in order,
as that chain's trainable span (mask 1, the engine's logprobs and versions). Outputs a later
rollback dropped (`superseded`) must only satisfy the prompt rule. Context tokens carry logprob
0.0 and version -1. Tests check it on every harness; benchmarks report it.
"""

from __future__ import annotations

from collections.abc import Iterable

from uni_agent_core.types import EngineCall, Trajectory


def tito_violations(trajectories: Iterable[Trajectory], calls: Iterable[EngineCall]) -> list[str]:
    """Every way the record breaks the TITO invariant (empty when it holds)."""
    chains = {t.chain_id: t for t in trajectories}
    problems: list[str] = []
    spans: dict[int, list[int]] = {cid: [] for cid in chains}
    for n, call in enumerate(calls):
        chain = chains.get(call.chain_id)
        if chain is None:
            problems.append(f"call {n}: chain {call.chain_id} has no trajectory")
            continue
        tokens = chain.prompt_ids + chain.response_ids
        if tokens[: len(call.prompt_ids)] != call.prompt_ids:
            problems.append(f"call {n}: engine prompt is not chain {call.chain_id}'s prefix")
            continue
        if call.superseded:
            continue
        start = len(call.prompt_ids) - len(chain.prompt_ids)
        end = start + len(call.output_ids)
        if start < 0 or chain.response_ids[start:end] != call.output_ids:
            problems.append(f"call {n}: output is not verbatim in chain {call.chain_id}")
            continue
        if chain.loss_mask[start:end] != [1] * len(call.output_ids):
            problems.append(f"call {n}: sampled tokens are not all trainable")
        if chain.logprobs[start:end] != call.output_logprobs:
            problems.append(f"call {n}: logprobs differ from the engine's")
        if chain.policy_versions[start:end] != call.policy_version:
            problems.append(f"call {n}: policy versions differ from the engine's")
        spans[call.chain_id].extend(call.output_ids)
    for cid, chain in chains.items():
        trainable = [t for t, m in zip(chain.response_ids, chain.loss_mask, strict=True) if m]
        if trainable != spans[cid]:
            problems.append(f"chain {cid}: trainable tokens are not exactly the sampled spans")
        for i, (lp, v, m) in enumerate(
            zip(chain.logprobs, chain.policy_versions, chain.loss_mask, strict=True)
        ):
            if not m and (lp != 0.0 or v != -1):
                problems.append(f"chain {cid}: context token {i} has logprob/version set")
                break
    return problems
