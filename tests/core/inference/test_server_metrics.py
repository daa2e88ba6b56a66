"""Free KV tokens parsed from vLLM and SGLang Prometheus metrics."""

from uni_agent_core.inference.server_metrics import free_kv_tokens

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
    assert free_kv_tokens(VLLM_OLD, "vllm") == 16_384
    assert free_kv_tokens(SGLANG, "sglang") == 450_000


def test_missing_figures_give_none_not_a_guess() -> None:
    assert free_kv_tokens("", "vllm") is None
    assert free_kv_tokens('vllm:kv_cache_usage_perc{a="b"} 0.3\n', "vllm") is None
    assert free_kv_tokens("sglang:token_usage 0.2\n", "sglang") is None
    assert free_kv_tokens("garbage line\nvllm:kv_cache_usage_perc x\n", "vllm") is None
