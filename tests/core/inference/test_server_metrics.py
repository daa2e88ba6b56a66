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


def test_data_parallel_engines_add_up_their_capacity_and_average_their_usage() -> None:
    text = (
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.4\n'
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0\n'
        'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="1000"} 1.0\n'
    )
    assert kv_memory(text, "vllm") == KvMemory(capacity_tokens=32_000, free_tokens=22_400)


def test_missing_figures_give_none_not_a_guess() -> None:
    assert kv_memory("", "vllm") is None
    assert kv_memory('vllm:kv_cache_usage_perc{a="b"} 0.3\n', "vllm") is None
    assert kv_memory("sglang:token_usage 0.2\n", "sglang") is None
    assert kv_memory("garbage line\nvllm:kv_cache_usage_perc x\n", "vllm") is None
    no_blocks = 'vllm:kv_cache_usage_perc 0.3\nvllm:cache_config_info{block_size="16"} 1.0\n'
    assert kv_memory(no_blocks, "vllm") is None
