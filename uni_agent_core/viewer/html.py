"""One step of a run as one self-contained HTML page (inline CSS and JS, no external URL).

The page: a header (run and step), a legend, the step's episodes as a table filtered client-side
by reward, exit reason, harness and level, then one section per episode. Each episode's chains
are `<div class="chain" data-chain-id=N>` with a header naming the chain and why the gateway
opened it; the prompt is folded in a `<details>`, and the response is shown token by token:

- `span.tok.trained` / `span.tok.context`: one response token, by loss mask; its `title` gives
  the token id, logprob and policy version;
- `span.trained-span`: each maximal run of trained tokens (as many per chain as the step file's
  trainable segments);
- `span.rollback`: where the client rewrote an action the engine sampled: the dropped text
  struck through and "rolled back (N tokens)", placed where the rewritten context starts.

Lines written before per-token records are shown by segments (`span.seg.trained` inside a
`span.trained-span`, `span.seg.context`), with no hover. All text is escaped.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from html import escape
from urllib.parse import quote

from uni_agent_core.viewer.steps import Chain, Episode, Rollback, Token, ViewerError

DEFAULT_TRACE_URL = (
    "{mlflow_ui}/#/experiments/{experiment_id}/traces?selectedEvaluationId={trace_id}"
)
"""Where the MLflow UI shows one trace; `trace_url_template` fills all but `{trace_id}`."""

FILTERS = (
    ("reward", "reward"),
    ("exit", "exit reason"),
    ("harness", "harness"),
    ("level", "level"),
)
"""Data attribute of an episode row and the label of its filter."""

NO_LEVEL = "none"

CSS = """
body { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px;
       color: #222; background: #fafafa; margin: 1.5em; }
h1 { font-size: 1.3em; margin: 0 0 .3em; } h2 { font-size: 1.1em; margin: 0 0 .3em; }
a { color: #2a5d9f; }
.summary, .nav { color: #555; margin: .3em 0; }
.legend { margin: .6em 0 1em; } .legend > span { margin-right: 1.2em; padding: 0 .3em; }
.filters label { margin-right: 1em; }
table.episodes { border-collapse: collapse; margin: .6em 0 1.2em; }
table.episodes th, table.episodes td { padding: 2px 10px; border-bottom: 1px solid #e3e3e3;
  text-align: left; }
table.episodes th { background: #f0f0f0; }
.episode { background: #fff; border: 1px solid #ddd; border-radius: 4px; padding: .8em 1em;
  margin: 1.2em 0; }
.outcome { color: #444; margin-bottom: .6em; }
.chain { border-left: 3px solid #a9c3de; margin: .9em 0; padding: .1em 0 .1em .8em; }
.chain-head { color: #2f4a66; font-weight: bold; margin-bottom: .3em; }
.note { color: #886; font-style: italic; }
details.prompt summary { cursor: pointer; color: #555; }
.text, .response { white-space: pre-wrap; word-break: break-word; margin: .3em 0; }
details.prompt .text { background: #f6f6f6; padding: .4em; max-height: 40em; overflow: auto; }
.trained { background: #d7f0d7; }
.context { background: #f2f2f4; color: #4a4a4a; }
.trained-span { border-bottom: 1px solid #86c386; }
.tok:hover { outline: 1px solid #777; }
.rollback { background: #fde4e4; color: #8a1f1f; border: 1px dashed #d88; padding: 0 .2em; }
.rollback del { color: #a66; }
.rollback-label { font-weight: bold; }
"""

SCRIPT = """
(function () {
  var selects = document.querySelectorAll("select.filter");
  function apply() {
    var want = {};
    selects.forEach(function (s) { if (s.value !== "") { want[s.dataset.key] = s.value; } });
    var shown = 0;
    document.querySelectorAll("tr.episode-row").forEach(function (row) {
      var ok = Object.keys(want).every(function (k) { return row.dataset[k] === want[k]; });
      row.hidden = !ok;
      var section = document.getElementById(row.dataset.target);
      if (section) { section.hidden = !ok; }
      if (ok) { shown += 1; }
    });
    var count = document.getElementById("shown");
    if (count) { count.textContent = String(shown); }
  }
  selects.forEach(function (s) { s.addEventListener("change", apply); });
})();
"""


def trace_url_template(
    mlflow_ui: str, experiment_id: str, template: str = DEFAULT_TRACE_URL
) -> str:
    """`template` with the MLflow UI address and experiment filled, `{trace_id}` left open.

    Raises:
        ViewerError: the template names a field other than those three.
    """

    def literal(text: str) -> str:  # the result is formatted again, with the trace id
        return text.replace("{", "{{").replace("}", "}}")

    try:
        return template.format(
            mlflow_ui=literal(mlflow_ui.rstrip("/")),
            experiment_id=literal(experiment_id),
            trace_id="{trace_id}",
        )
    except (KeyError, IndexError, ValueError) as error:
        raise ViewerError(
            f"bad trace URL template {template!r}: use only {{mlflow_ui}}, {{experiment_id}} "
            "and {trace_id}"
        ) from error


def render_step_html(
    episodes: Sequence[Episode],
    *,
    run_name: str,
    step: int,
    trace_url: str | None = None,
    index_href: str | None = None,
) -> str:
    """One step's episodes as a self-contained HTML page.

    Args:
        episodes: the step's episodes (`steps.read_step`).
        run_name: shown in the title and header.
        step: the step number, shown in the title and header.
        trace_url: a URL template with `{trace_id}` (see `trace_url_template`); episodes with a
            trace id then link to their MLflow trace. None: no trace links.
        index_href: where an "all steps" link points (None: no link).

    Raises:
        ViewerError: `trace_url` has a field other than `{trace_id}`.
    """
    link = _trace_link(trace_url)
    title = f"{run_name} — step {step}"
    chains = sum(len(e.chains) for e in episodes)
    rewards = [e.reward for e in episodes if not math.isnan(e.reward)]
    mean = f"{sum(rewards) / len(rewards):.4g}" if rewards else "n/a"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
    ]
    if index_href is not None:
        parts.append(f'<div class="nav"><a href="{escape(index_href)}">all steps</a></div>')
    parts += [
        f'<div class="summary">{len(episodes)} episodes (<span id="shown">{len(episodes)}'
        f"</span> shown), {chains} chains, mean reward {mean}</div>",
        _legend(),
        _episode_table(episodes, link),
    ]
    if not episodes:
        parts.append('<p class="note">this step wrote no episodes</p>')
    parts += [_episode_section(i, episode, link) for i, episode in enumerate(episodes)]
    parts += [f"<script>{SCRIPT}</script>", "</body></html>"]
    return "\n".join(parts) + "\n"


def render_index_html(run_name: str, steps: Sequence[int], href: Callable[[int], str]) -> str:
    """A page listing a run's steps, each linking to `href(step)`."""
    items = "".join(f'<li><a href="{escape(href(step))}">step {step}</a></li>' for step in steps)
    body = f"<ul>{items}</ul>" if steps else '<p class="note">no step files yet</p>'
    title = f"{run_name} — trajectories"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>\n"
        f"<h1>{escape(title)}</h1>\n{body}\n</body></html>\n"
    )


def _trace_link(template: str | None) -> Callable[[str], str] | None:
    if template is None:
        return None
    try:
        template.format(trace_id="x")
    except (KeyError, IndexError, ValueError) as error:
        raise ViewerError(
            f"bad trace URL template {template!r}: it may name only {{trace_id}}"
        ) from error
    return lambda trace_id: template.format(trace_id=quote(trace_id, safe=""))


def _reward_text(reward: float) -> str:
    return "n/a" if math.isnan(reward) else f"{reward:.4g}"


def _resolved_text(resolved: bool | None) -> str:
    return "?" if resolved is None else ("yes" if resolved else "no")


def _legend() -> str:
    return (
        '<div class="legend">'
        '<span class="trained">trained token (loss mask 1, sampled by the policy)</span>'
        '<span class="context">context (loss mask 0: prompt, tool output, rewrites)</span>'
        '<span class="rollback">rolled back action (struck through)</span>'
        "<span>hover a token: id, logprob, policy version</span></div>"
    )


def _filter_values(episodes: Sequence[Episode]) -> dict[str, list[str]]:
    rewards = sorted({e.reward for e in episodes if not math.isnan(e.reward)})
    unknown = ["n/a"] if any(math.isnan(e.reward) for e in episodes) else []
    return {
        "reward": list(dict.fromkeys([_reward_text(r) for r in rewards] + unknown)),
        "exit": sorted({e.exit_reason for e in episodes}),
        "harness": sorted({e.harness for e in episodes}),
        "level": sorted({e.level or NO_LEVEL for e in episodes}),
    }


def _episode_table(episodes: Sequence[Episode], link: Callable[[str], str] | None) -> str:
    values = _filter_values(episodes)
    selects = []
    for key, label in FILTERS:
        options = '<option value="">all</option>' + "".join(
            f'<option value="{escape(v)}">{escape(v)}</option>' for v in values[key]
        )
        selects.append(
            f'<label>{escape(label)} <select class="filter" data-key="{key}">{options}'
            "</select></label>"
        )
    head = (
        "<tr><th>#</th><th>task</th><th>sample</th><th>reward</th><th>exit reason</th>"
        "<th>resolved</th><th>harness</th><th>level</th><th>chains</th><th>trained tokens</th>"
        "<th>trace</th></tr>"
    )
    rows = [_episode_row(i, e, link) for i, e in enumerate(episodes)]
    return (
        f'<div class="filters">{"".join(selects)}</div>'
        f'<table class="episodes"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _episode_row(index: int, episode: Episode, link: Callable[[str], str] | None) -> str:
    data = {
        "reward": _reward_text(episode.reward),
        "exit": episode.exit_reason,
        "harness": episode.harness,
        "level": episode.level or NO_LEVEL,
        "target": f"episode-{index}",
    }
    attributes = " ".join(f'data-{k}="{escape(v)}"' for k, v in data.items())
    trained = sum(c.trainable_tokens for c in episode.chains)
    cells = [
        f'<a href="#episode-{index}">{index}</a>',
        escape(episode.task_id),
        str(episode.sample_index),
        escape(data["reward"]),
        escape(episode.exit_reason),
        _resolved_text(episode.resolved),
        escape(episode.harness),
        escape(episode.level or "—"),
        str(len(episode.chains)),
        str(trained),
        _trace_anchor(episode, link),
    ]
    return (
        f'<tr class="episode-row" {attributes}>'
        + "".join(f"<td>{c}</td>" for c in cells)
        + ("</tr>")
    )


def _trace_anchor(episode: Episode, link: Callable[[str], str] | None) -> str:
    if link is None or not episode.trace_id:
        return ""
    return f'<a class="trace-link" href="{escape(link(episode.trace_id))}">trace</a>'


def _episode_section(index: int, episode: Episode, link: Callable[[str], str] | None) -> str:
    facts = [
        f"reward <b>{escape(_reward_text(episode.reward))}</b>",
        f"exit <b>{escape(episode.exit_reason)}</b>",
        f"resolved {_resolved_text(episode.resolved)}",
        f"harness {escape(episode.harness)}",
        f"level {escape(episode.level or '—')}",
    ]
    if episode.group_id:
        facts.append(f"group {escape(episode.group_id)}")
    anchor = _trace_anchor(episode, link)
    if anchor:
        facts.append(anchor)
    chains = "".join(_chain_block(chain) for chain in episode.chains)
    return (
        f'<section class="episode" id="episode-{index}">'
        f"<h2>{escape(episode.task_id)} · sample {episode.sample_index}</h2>"
        f'<div class="outcome">{" · ".join(facts)}</div>{chains}</section>'
    )


def _chain_block(chain: Chain) -> str:
    versions = ", ".join(str(v) for v in chain.policy_versions) or "—"
    head = (
        f"chain {chain.chain_id} · opened by: {escape(chain.opened_by)} · "
        f"{chain.trainable_tokens} trained tokens · policy versions {versions}"
    )
    if chain.rollbacks:
        head += f" · {len(chain.rollbacks)} rollback{'s' if len(chain.rollbacks) > 1 else ''}"
    prompt = (
        f'<details class="prompt"><summary>prompt ({len(chain.prompt)} characters)</summary>'
        f'<div class="text">{escape(chain.prompt)}</div></details>'
    )
    if chain.tokens is None:
        note = '<div class="note">written before per-token records: segments only, no hover</div>'
        response = _response_by_segments(chain)
    else:
        note = ""
        response = _response_by_tokens(chain.tokens, chain.rollbacks)
    return (
        f'<div class="chain" data-chain-id="{chain.chain_id}">'
        f'<div class="chain-head">{head}</div>{note}{prompt}'
        f'<div class="response">{response}</div></div>'
    )


def _response_by_tokens(tokens: Sequence[Token], rollbacks: Sequence[Rollback]) -> str:
    """Token spans, each maximal trained run wrapped in one `trained-span`; a rollback marker
    goes before the token where the rewritten context starts (one past the end: at the end)."""
    markers: dict[int, list[Rollback]] = defaultdict(list)
    for rollback in rollbacks:
        markers[min(max(rollback.at, 0), len(tokens))].append(rollback)
    parts: list[str] = []
    in_run = False
    for index, token in enumerate(tokens):
        if in_run and not token.trainable:
            parts.append("</span>")
            in_run = False
        parts += [_rollback_marker(r) for r in markers.get(index, [])]
        if token.trainable and not in_run:
            parts.append('<span class="trained-span">')
            in_run = True
        parts.append(_token_span(token))
    if in_run:
        parts.append("</span>")
    parts += [_rollback_marker(r) for r in markers.get(len(tokens), [])]
    return "".join(parts)


def _token_span(token: Token) -> str:
    # A context token was not sampled: whatever logprob the record holds for it means nothing.
    shown = token.logprob if token.trainable else None
    logprob = "n/a" if shown is None else f"{shown:.4f}"
    version = "n/a" if token.version is None else str(token.version)
    kind = "trained" if token.trainable else "context"
    title = f"id {token.id} | logprob {logprob} | policy version {version}"
    return f'<span class="tok {kind}" title="{title}">{escape(token.text)}</span>'


def _response_by_segments(chain: Chain) -> str:
    parts = [
        f'<span class="trained-span seg trained">{escape(s.text)}</span>'
        if s.trainable
        else f'<span class="seg context">{escape(s.text)}</span>'
        for s in chain.segments
    ]
    parts += [_rollback_marker(r) for r in chain.rollbacks]
    return "".join(parts)


def _rollback_marker(rollback: Rollback) -> str:
    return (
        f'<span class="rollback" data-at="{rollback.at}">'
        f'<span class="rollback-label">⟲ rolled back ({rollback.dropped_tokens} tokens)</span> '
        f"<del>{escape(rollback.dropped_text)}</del></span>"
    )
