"""A discrete-event simulator of a rollout cluster, to measure router policies offline.

Agent sessions (`workloads.py`: SWE-like and mixed short/long, contexts growing to 32K/128K,
long-tailed outputs, tool results and tool pauses) send every turn through agent-rl's own
`RoutingCore` to N replicas (`replica.py`: continuous batching with chunked prefill, a real prefix
cache with LRU eviction inside a KV capacity in tokens, recompute preemption), each priced by a
cost profile (`profiles.py`: `vllm_h200` from published numbers, `hf_cpu_tiny` measured from
`HFEngine` here). `cluster.py` runs the events; `metrics.py` defines what a run reports:
throughput, prefill tokens, cache hit rate, p50/p99 latency, makespan, load imbalance, evictions.
`bench/router.py` runs the policy x workload x load grid.
"""

from uni_agent_core.router.sim.cluster import ClusterSim, simulate
from uni_agent_core.router.sim.metrics import RunMetrics
from uni_agent_core.router.sim.profiles import (
    HF_CPU_TINY,
    PROFILES,
    VLLM_H200,
    ReplicaProfile,
    calibrate_hf_engine,
)
from uni_agent_core.router.sim.replica import Job, Replica
from uni_agent_core.router.sim.workloads import MIXED, SWE, WORKLOADS, Workload

__all__ = [
    "HF_CPU_TINY",
    "MIXED",
    "PROFILES",
    "SWE",
    "VLLM_H200",
    "WORKLOADS",
    "ClusterSim",
    "Job",
    "Replica",
    "ReplicaProfile",
    "RunMetrics",
    "Workload",
    "calibrate_hf_engine",
    "simulate",
]
