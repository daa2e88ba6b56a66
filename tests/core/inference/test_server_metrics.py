"""KV capacity and free KV tokens parsed from vLLM and SGLang Prometheus metrics."""

from uni_agent_core.inference.server_metrics import KvMemory, kv_memory

VLLM_OLD = """# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="2048"} 1.0
vllm:num_requests_running{model_name="m"} 3.0
"""

SGLANG = """# HELP sglang:token_usage The token usage
sglang:token_usage{model_name="m"} 0.1
sglang:max_total_num_tokens{model_name="m"} 500000.0
"""


def test_vllm_older_metric_names_and_sglang_are_read() -> None:
    assert kv_memory(VLLM_OLD, "vllm") == KvMemory(capacity_tokens=32_768, free_tokens=16_384)
    assert kv_memory(SGLANG, "sglang") == KvMemory(capacity_tokens=500_000, free_tokens=450_000)


def test_missing_figures_give_none_not_a_guess() -> None:
    assert kv_memory("", "vllm") is None
    assert kv_memory('vllm:kv_cache_usage_perc{a="b"} 0.3\n', "vllm") is None
    assert kv_memory("sglang:token_usage 0.2\n", "sglang") is None
    assert kv_memory("garbage line\nvllm:kv_cache_usage_perc x\n", "vllm") is None
