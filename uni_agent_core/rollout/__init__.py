"""Rolling out episodes: the rollout driver (`driver.py`: one episode = a fresh sandbox, the
harness against the gateway, the verifier's reward; one group = `group_size` of them) and the
rollout stack (`stack.py`: engine, in-loop gateway and driver built together). Training,
Best-of-N difficulty estimation and evaluation all roll out through it."""
