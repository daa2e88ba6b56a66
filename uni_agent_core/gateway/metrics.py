"""Gateway counters and latency histograms, rendered as Prometheus text for `GET /metrics`."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from uni_agent_core.inference.types import TokenOutput

_LATENCY_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass
class Histogram:
    """A cumulative-bucket histogram (Prometheus semantics)."""

    buckets: tuple[float, ...] = _LATENCY_BUCKETS_S
    counts: list[int] = field(default_factory=lambda: [0] * (len(_LATENCY_BUCKETS_S) + 1))
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.n += 1

    def render(self, name: str, help_text: str) -> list[str]:
        lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        cumulative = 0
        for bound, count in zip(self.buckets, self.counts, strict=False):
            cumulative += count
            lines.append(f'{name}_bucket{{le="{bound}"}} {cumulative}')
        lines.append(f'{name}_bucket{{le="+Inf"}} {self.n}')
        lines += [f"{name}_sum {self.total}", f"{name}_count {self.n}"]
        return lines


@dataclass
class GatewayMetrics:
    """Everything `/metrics` reports; one instance per gateway process."""

    requests: int = 0
    request_errors: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cached_tokens: int = 0
    engine_calls: int = 0
    chains_opened: int = 0
    splits: int = 0
    rollbacks: int = 0
    rollback_dropped_tokens: int = 0
    ambiguous_rollbacks: int = 0
    context_length_refusals: int = 0
    abandoned_generations: int = 0
    parse_failures: int = 0
    truncated_tool_calls: int = 0
    invalid_tool_inputs: int = 0
    sampling_overrides_ignored: int = 0
    sessions_created: int = 0
    sessions_expired: int = 0
    accept_errors: int = 0
    live_sessions: int = 0
    heap_trims: int = 0
    heap_trim_seconds: float = 0.0
    request_latency: Histogram = field(default_factory=Histogram)
    engine_latency: Histogram = field(default_factory=Histogram)
    ignored_fields: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(protocol, field) -> requests that carried the field, accepted and dropped."""

    def observe_ignored(self, protocol: str, fields: Iterable[str]) -> None:
        """Count the fields one request of `protocol` carried that the gateway ignored."""
        for name in fields:
            self.ignored_fields[protocol, name] += 1

    def observe_heap_trim(self, seconds: float) -> None:
        self.heap_trims += 1
        self.heap_trim_seconds += seconds

    def observe_call(self, prompt_tokens: int, output: TokenOutput) -> None:
        self.engine_calls += 1
        self.tokens_in += prompt_tokens
        self.tokens_out += len(output.token_ids)
        self.cached_tokens += output.cached_prefix_tokens

    def render(self) -> str:
        """Prometheus text exposition format."""
        counters = {
            "requests_total": (self.requests, "chat requests received"),
            "request_errors_total": (self.request_errors, "chat requests answered with an error"),
            "tokens_in_total": (self.tokens_in, "prompt tokens sent to engines"),
            "tokens_out_total": (self.tokens_out, "tokens sampled by engines"),
            "cached_tokens_total": (self.cached_tokens, "prompt tokens served from prefix caches"),
            "engine_calls_total": (self.engine_calls, "engine generations"),
            "chains_opened_total": (self.chains_opened, "chains opened (new or sibling)"),
            "splits_total": (self.splits, "chains opened in sessions that already had one"),
            "rollbacks_total": (self.rollbacks, "latest-assistant rewrites rolled back"),
            "rollback_dropped_tokens_total": (
                self.rollback_dropped_tokens,
                "trainable tokens dropped by rollbacks",
            ),
            "ambiguous_rollbacks_total": (self.ambiguous_rollbacks, "tied rollbacks split"),
            "context_length_refusals_total": (
                self.context_length_refusals,
                "requests refused with 400: the prompt fills the chain's capacity",
            ),
            "abandoned_generations_total": (
                self.abandoned_generations,
                "generations cancelled because their client disconnected",
            ),
            "tool_parse_failures_total": (self.parse_failures, "replies whose tool calls failed"),
            "truncated_tool_calls_total": (self.truncated_tool_calls, "tool calls cut by length"),
            "invalid_tool_inputs_total": (
                self.invalid_tool_inputs,
                "tool arguments sent to Anthropic clients as {} (not a JSON object)",
            ),
            "sampling_overrides_ignored_total": (
                self.sampling_overrides_ignored,
                "request sampling parameters ignored",
            ),
            "sessions_created_total": (self.sessions_created, "sessions created"),
            "sessions_expired_total": (self.sessions_expired, "idle sessions expired"),
            "accept_errors_total": (
                self.accept_errors,
                "connections the process could not accept (out of descriptors)",
            ),
            "heap_trims_total": (self.heap_trims, "freed heap handed back to the OS after bursts"),
            "heap_trim_seconds_total": (self.heap_trim_seconds, "time spent handing it back"),
        }
        lines: list[str] = []
        for name, (value, help_text) in counters.items():
            full = f"agent_rl_gateway_{name}"
            lines += [f"# HELP {full} {help_text}", f"# TYPE {full} counter", f"{full} {value}"]
        lines += [
            "# HELP agent_rl_gateway_live_sessions live sessions",
            "# TYPE agent_rl_gateway_live_sessions gauge",
            f"agent_rl_gateway_live_sessions {self.live_sessions}",
        ]
        ignored = "agent_rl_gateway_ignored_request_fields_total"
        lines += [
            f"# HELP {ignored} requests that carried a field the gateway accepted and ignored",
            f"# TYPE {ignored} counter",
        ]
        lines += [
            f'{ignored}{{protocol="{protocol}",field="{name}"}} {count}'
            for (protocol, name), count in sorted(self.ignored_fields.items())
        ]
        lines += self.request_latency.render(
            "agent_rl_gateway_request_seconds", "chat request latency"
        )
        lines += self.engine_latency.render(
            "agent_rl_gateway_engine_seconds", "engine generation latency"
        )
        return "\n".join(lines) + "\n"
