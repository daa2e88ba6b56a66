"""agent-rl on verl: the distributed path for GPU and Ascend NPU pools.

- `agent_loop`: `UniAgentLoop`, verl's agent loop `uni_agent` — one agent-rl episode (gateway
  session, harness, sandbox, verifier) per verl sample, returned as `AgentLoopOutput`s.
- `engine_adapter`: `VerlServerEngine`, our `Engine` over verl's LLM server manager (token ids in,
  token ids + logprobs out), so the gateway records exactly what verl's servers sampled.
- `local_server`: `EngineServerManager`, verl's server-manager interface over one of our engines
  (e.g. `HFEngine`), to run `UniAgentLoop` on a CPU without Ray or vLLM.
- `compile`: recipe -> Hydra overrides for verl's `main_ppo` (v1 trainers), composed and checked
  against the config schema shipped in the installed verl wheel.
- `data`: the recipe's tasks as verl parquet rows (`agent_name: uni_agent`, the `TaskSpec` in
  `extra_info`).
- `launch`: `agent-rl verl launch` — writes the data and agent-loop config, prints or runs the
  command.

Importing this package does not import verl; `agent_loop` does (and registers `uni_agent`).
"""
