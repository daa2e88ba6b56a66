"""A step page shows every chain token by token: loss-mask colours, one `trained-span` per
trainable segment, hover titles, rollback markers, chain headers, filters and trace links; old
lines render by segments; everything is escaped and nothing is loaded from elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from uni_agent_core.viewer.export import write_step_views
from uni_agent_core.viewer.html import render_step_html, trace_url_template
from uni_agent_core.viewer.steps import ViewerError, read_step

TEMPLATE = "http://mlflow.local:5000/#/experiments/7/traces?selectedEvaluationId={trace_id}"


def render(tmp_path: Path, rows, write_step_file, **kwargs) -> str:
    path = write_step_file(tmp_path / "trajectories", 4, rows)
    return render_step_html(read_step(path), run_name="run <a>", step=4, **kwargs)


def test_one_chain_element_per_line_in_file_order(tmp_path, step_rows, write_step_file, parse_page):
    page = parse_page(render(tmp_path, step_rows, write_step_file))
    chains = page.by_class("chain")
    assert [c.attrs["data-chain-id"] for c in chains] == ["0", "1", "0", "0"]
    episodes = page.by_class("episode")
    assert [len(e.by_class("chain")) for e in episodes] == [2, 1, 1]


def test_trained_spans_match_the_trainable_segments(
    tmp_path, step_rows, write_step_file, parse_page
):
    page = parse_page(render(tmp_path, step_rows, write_step_file))
    for chain, row in zip(page.by_class("chain"), step_rows, strict=True):
        trainable = [s["text"] for s in row["segments"] if s["trainable"]]
        spans = chain.by_class("trained-span")
        assert [s.text() for s in spans] == trainable
    assert [len(c.by_class("trained-span")) for c in page.by_class("chain")] == [3, 1, 3, 2]


def test_every_response_token_is_a_span_with_id_logprob_and_version(
    tmp_path, step_rows, write_step_file, parse_page
):
    page = parse_page(render(tmp_path, step_rows, write_step_file))
    first = page.by_class("chain")[0]
    tokens = first.by_class("tok")
    row = step_rows[0]["tokens"]
    assert [t.text() for t in tokens] == row["text"]
    assert ["trained" in t.classes for t in tokens] == [bool(m) for m in row["mask"]]
    assert ["context" in t.classes for t in tokens] == [not m for m in row["mask"]]
    assert tokens[1].attrs["title"] == "id 101 | logprob -0.1000 | policy version 3"
    assert tokens[2].attrs["title"] == "id 102 | logprob n/a | policy version n/a"


def test_rollback_marker_sits_where_the_rewrite_starts(
    tmp_path, step_rows, write_step_file, parse_page
):
    page = parse_page(render(tmp_path, step_rows, write_step_file))
    first = page.by_class("chain")[0]
    [marker] = first.by_class("rollback")
    assert "rolled back (2 tokens)" in marker.text()
    assert [d.text() for d in marker.by_tag("del")] == ["rm -rf /tmp/x"]
    sequence = first.find_all(lambda n: bool({"tok", "rollback"} & n.classes))
    position = sequence.index(marker)
    assert sequence[position + 1].text() == "[rewritten]"
    assert len([n for n in sequence[:position] if "tok" in n.classes]) == 6
    assert "1 rollback" in first.by_class("chain-head")[0].text()


def test_chain_headers_say_why_the_gateway_opened_the_chain(
    tmp_path, step_rows, write_step_file, parse_page
):
    page = parse_page(render(tmp_path, step_rows, write_step_file))
    heads = [c.by_class("chain-head")[0].text() for c in page.by_class("chain")]
    assert heads[0].startswith("chain 0 · opened by: first")
    assert heads[1].startswith("chain 1 · opened by: split: history diverged (compaction or edit)")
    assert heads[3].startswith("chain 0 · opened by: unknown")


def test_old_lines_render_by_segments_without_hover(
    tmp_path, step_rows, write_step_file, parse_page
):
    page = parse_page(render(tmp_path, step_rows, write_step_file))
    old = page.by_class("chain")[3]
    assert old.by_class("tok") == []
    assert [s.text() for s in old.by_class("seg")] == ["old answer", "\ntool says hi\n", "bye"]
    assert "segments only" in old.by_class("note")[0].text()
    section = page.by_class("episode")[2]
    assert "harness unknown" in section.by_class("outcome")[0].text()


def test_text_is_escaped_and_whitespace_kept(tmp_path, step_rows, write_step_file, parse_page):
    html = render(tmp_path, step_rows, write_step_file)
    page = parse_page(html)
    assert len(page.by_tag("script")) == 1  # the page's own filter script only
    assert page.by_tag("title")[0].text() == "run <a> — step 4"
    chain = page.by_class("chain")[2]
    response = chain.by_class("response")[0]
    assert response.text() == "".join(step_rows[2]["tokens"]["text"])
    assert "\n  indented & <b>" in response.text()
    [prompt] = chain.by_tag("details")
    assert prompt.by_class("text")[0].text() == step_rows[2]["prompt"]
    assert "white-space: pre-wrap" in html


def test_the_episode_table_has_filters_and_rows_that_carry_their_values(
    tmp_path, step_rows, write_step_file, parse_page
):
    page = parse_page(render(tmp_path, step_rows, write_step_file))
    selects = {s.attrs["data-key"]: s for s in page.by_class("filter")}
    assert set(selects) == {"reward", "exit", "harness", "level"}
    options = {k: [o.attrs["value"] for o in s.by_tag("option")] for k, s in selects.items()}
    assert options["reward"] == ["", "0", "0.5", "1"]
    assert options["exit"] == ["", "finished", "max_turns", "submitted"]
    assert options["harness"] == ["", "codex", "react", "unknown"]
    assert options["level"] == ["", "L1", "L2", "none"]
    rows = page.by_class("episode-row")
    assert [
        (r.attrs["data-reward"], r.attrs["data-exit"], r.attrs["data-level"]) for r in rows
    ] == [
        ("1", "submitted", "L1"),
        ("0", "max_turns", "L2"),
        ("0.5", "finished", "none"),
    ]
    anchors = [r.by_tag("a")[0].attrs["href"] for r in rows]
    assert anchors == ["#episode-0", "#episode-1", "#episode-2"]
    assert [e.attrs["id"] for e in page.by_class("episode")] == [
        "episode-0",
        "episode-1",
        "episode-2",
    ]


def test_trace_links_only_with_a_template_and_a_trace_id(
    tmp_path, step_rows, write_step_file, parse_page
):
    linked = parse_page(render(tmp_path, step_rows, write_step_file, trace_url=TEMPLATE))
    hrefs = [a.attrs["href"] for a in linked.by_class("trace-link")]
    expected = TEMPLATE.format(trace_id="tr-abc%201")
    assert hrefs == [expected, expected]  # task-a's row and section; task-b has no trace id
    rows = linked.by_class("episode-row")
    assert rows[0].by_class("trace-link") and not rows[1].by_class("trace-link")
    plain = parse_page(render(tmp_path, step_rows, write_step_file))
    assert plain.by_class("trace-link") == []


def test_the_page_loads_nothing_from_elsewhere(tmp_path, step_rows, write_step_file, parse_page):
    html = render(tmp_path, step_rows, write_step_file)
    page = parse_page(html)
    assert "http://" not in html and "https://" not in html
    assert page.by_tag("link") == []
    assert all("src" not in n.attrs for n in page.find_all(lambda n: True))
    assert len(page.by_tag("style")) == 1


def test_trace_url_template_fills_all_but_the_trace_id():
    template = trace_url_template("http://ui:5000/", "12")
    assert template == "http://ui:5000/#/experiments/12/traces?selectedEvaluationId={trace_id}"
    odd = trace_url_template(
        "http://ui/{x}", "1", template="{mlflow_ui}/{experiment_id}/{trace_id}"
    )
    assert odd.format(trace_id="t") == "http://ui/{x}/1/t"
    with pytest.raises(ViewerError, match="bad trace URL template"):
        trace_url_template("http://ui", "1", template="{mlflow_ui}/{run}")
    with pytest.raises(ViewerError, match="only \\{trace_id\\}"):
        render_step_html([], run_name="r", step=1, trace_url="{mlflow_ui}/{trace_id}")


def test_an_empty_step_renders(parse_page):
    page = parse_page(render_step_html([], run_name="r", step=0))
    assert page.by_class("chain") == [] and "no episodes" in page.text()


def test_write_step_views_writes_a_page_beside_each_step_file(run_dir: Path, parse_page):
    trajectories = run_dir / "trajectories"
    (trajectories / "notes.jsonl").write_text("{}\n")
    written = write_step_views(trajectories)
    assert written == [trajectories / "step-000001.html", trajectories / "step-000002.html"]
    page = parse_page(written[1].read_text(encoding="utf-8"))
    assert page.by_tag("h1")[0].text() == "run-a — step 2"
    assert len(page.by_class("chain")) == 2
    assert write_step_views(trajectories, steps=[2], run_name="x") == [written[1]]
    assert sorted(p.name for p in trajectories.iterdir() if p.suffix == ".partial") == []


def test_a_malformed_line_names_file_line_and_field(tmp_path, step_rows, write_step_file):
    rows = [step_rows[0], {k: v for k, v in step_rows[1].items() if k != "segments"}]
    path = write_step_file(tmp_path, 1, rows)
    with pytest.raises(ViewerError, match=r"step-000001\.jsonl:2: missing field 'segments'"):
        read_step(path)
    short = dict(step_rows[0], tokens=dict(step_rows[0]["tokens"], logprob=[0.0]))
    path = write_step_file(tmp_path, 2, [short])
    with pytest.raises(ViewerError, match="'tokens.logprob' has 1 entries, 'tokens.ids' 9"):
        read_step(path)
    path.write_text(json.dumps(step_rows[0]) + "\nnot json\n")
    with pytest.raises(ViewerError, match=":2: not a JSON line"):
        read_step(path)
