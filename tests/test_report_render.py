"""build_report + render_all: files exist and parse, required keys, escaping, re-rendering from saved results."""

from __future__ import annotations

import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "report"))
import report_data  # noqa: E402

from gradian.diagnose.types import Finding  # noqa: E402
from gradian.errors import GradianError  # noqa: E402
from gradian.report import build_report, md_escape, render_all, rerender, save_report_inputs  # noqa: E402
from gradian.report import svg as svgmod  # noqa: E402
from gradian.report.render import render_html, render_markdown  # noqa: E402


@pytest.fixture(scope="module")
def inputs():
    return report_data.make_inputs()


@pytest.fixture(scope="module")
def built(inputs):
    return build_report(
        inputs["attribution"],
        findings=inputs["findings"],
        embeddings=inputs["embeddings"],
        train_examples=inputs["train"],
        eval_examples=inputs["eval"],
        logs=inputs["logs"],
    )


@pytest.fixture(scope="module")
def report(built):
    return built.to_dict()  # report.json's content


class Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def parse(html: str) -> Tags:
    p = Tags()
    p.feed(html)
    return p


def test_report_keys_and_planted_cluster(report, inputs):
    assert report["schema"] == "gradian.report/1"
    for key in ("examples", "regressed", "method", "settings", "clusters", "findings", "verdict", "clustering"):
        assert key in report
    for c in report["clusters"]:
        assert {"id", "size", "harm_share", "rows", "label", "findings"} <= set(c)
    top = report["clusters"][0]
    assert set(top["rows"]) == set(inputs["bad"])
    assert top["label"].split(" / ")[0] == "zorbax"
    assert top["findings"][0]["code"] == "D101"
    for e in report["examples"]:
        assert "cluster" in e and isinstance(e["findings"], list)
    by_index = {e["index"]: e for e in report["examples"]}
    assert by_index[inputs["bad"][0]]["findings"] == ["D101"]
    first = report["examples"][0]
    assert first["rank"] == 1 and first["contributions"][0]["item"] == 0 and "text" in first
    v = report["verdict"]
    assert v["kind"] == "concentrated" and v["culprit_clusters"] == [1]
    assert sorted(v["drop_rows"]) == inputs["bad"]
    assert report["findings"] == [Finding.from_dict(f).to_dict() for f in inputs["findings"]]  # read as diagnose's


def test_render_all_files(report, tmp_path, inputs):
    paths = render_all(report, tmp_path)
    for name in ("report.html", "report.md", "report.json", "drop_rows.txt", "drop_rows.json"):
        assert (tmp_path / name).is_file(), name
    data = json.loads((tmp_path / "report.json").read_text())
    assert {"schema", "examples", "regressed", "clusters", "findings", "verdict"} <= set(data)
    assert [int(x) for x in (tmp_path / "drop_rows.txt").read_text().split()] == report["verdict"]["drop_rows"]
    drop = json.loads((tmp_path / "drop_rows.json").read_text())
    assert drop["rows"] == report["verdict"]["drop_rows"] and drop["ids"][0].startswith("train-")
    assert paths["html"] == tmp_path / "report.html"


def test_html_escapes_dataset_text(report):
    html = render_html(report)
    p = parse(html)
    assert "script" not in p.tags and "img" not in p.tags
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in html
    text = "".join(p.text)
    assert "<script>document.title='pwned'</script>" in text
    assert 'onerror="document.title=' in text
    assert html.count("<svg") >= 5
    heads = [h for h in ("Verdict", "Regressed items", "Clusters", "Top rows", "Setup findings", "Plots")]
    positions = [html.index(f">{h}</h2>") for h in heads]
    assert positions == sorted(positions)
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html


def test_hostile_text_in_svg_labels_and_titles():
    bad = "<script>alert(1)</script>\"'&"
    out = svgmod.bar_chart(bad, [bad], [(bad, [1.0])], ylabel=bad)
    out += svgmod.scatter(bad, [(0.0, 1.0, 0, bad)], group_names=[bad])
    out += svgmod.line_chart(bad, [(bad, [0, 1], [1, 2])], markers=[(0.5, bad)])
    out += svgmod.histogram(bad, [1.0, 2.0])
    assert "<script" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&amp;" in out


def test_markdown_escapes():
    s = md_escape("a | b `c` <script>x</script> *d* [l](javascript:x) \n next")
    assert "|" not in s.replace("&#124;", "") and "`" not in s and "<" not in s
    assert "\\*d\\*" in s and "\\[l\\]" in s and "\n" not in s
    # a Markdown renderer (markdown-it, as rich uses) shows the text as it was: entities intact, no markup made
    from markdown_it import MarkdownIt

    shown = MarkdownIt().render(md_escape("set `num_epochs` to 3 | #1 *x*")).strip()
    assert shown == "<p>set `num_epochs` to 3 | #1 *x*</p>"


def test_markdown_report(report):
    md = render_markdown(report)
    assert md.startswith("# Gradian report\n\n## Verdict")
    assert "<script>" not in md and "<img" not in md
    assert "&lt;script&gt;" in md
    for h in ("## Regressed items", "## Clusters", "## Top rows", "## Setup findings"):
        assert h in md
    table_lines = [line for line in md.splitlines() if line.startswith("| ") and "train-" in line]
    widths = {line.count(" | ") for line in table_lines if line.count(" | ") >= 7}
    assert len(widths) == 1  # no stray pipe breaks a row


def test_no_embeddings_no_clusters_and_strict_json(tmp_path, inputs):
    attribution = json.loads(json.dumps(inputs["attribution"]))
    attribution["examples"][0]["score"] = float("nan")
    rep = build_report(attribution, findings=[]).to_dict()
    assert rep["clusters"] == [] and "not clustered" in rep["clustering"]["how"]
    render_all(rep, tmp_path)
    json.loads((tmp_path / "report.json").read_text())  # strict: NaN written as null
    assert "<svg" in (tmp_path / "report.html").read_text()


def test_stale_drop_files_removed(tmp_path, report):
    render_all(report, tmp_path)
    spread = dict(report, verdict={**report["verdict"], "drop_rows": [], "drop_ids": []})
    render_all(spread, tmp_path)
    assert not (tmp_path / "drop_rows.txt").exists()


def test_rerender_from_saved_results(tmp_path, inputs, report):
    (tmp_path / "report.json").write_text(json.dumps(inputs["attribution"]))
    save_report_inputs(
        tmp_path,
        embeddings=inputs["embeddings"],
        train_examples=inputs["train"],
        eval_examples=inputs["eval"],
        findings=inputs["findings"],
        logs=inputs["logs"],
    )
    rerender(tmp_path)
    first = json.loads((tmp_path / "report.json").read_text())
    assert first["verdict"]["drop_rows"] == report["verdict"]["drop_rows"]
    assert [c["rows"] for c in first["clusters"]] == [c["rows"] for c in report["clusters"]]
    # again, from the built report alone: clusters, labels, map and text are kept
    for name in ("embeddings.npy", "rows.jsonl", "eval_rows.jsonl", "findings.json", "trainer_logs.json"):
        (tmp_path / name).unlink()
    rerender(tmp_path)
    second = json.loads((tmp_path / "report.json").read_text())
    assert [c["rows"] for c in second["clusters"]] == [c["rows"] for c in first["clusters"]]
    assert [c["label"] for c in second["clusters"]] == [c["label"] for c in first["clusters"]]
    assert second["verdict"]["text"] == first["verdict"]["text"]
    assert second["clustering"]["map"]["x"] == first["clustering"]["map"]["x"]
    html = (tmp_path / "report.html").read_text()
    assert "Loss curve" in html and "&lt;script&gt;" in html


def test_rerender_with_safetensors_and_index(tmp_path, inputs):
    from safetensors.numpy import save_file

    emb = inputs["embeddings"]
    order = np.arange(len(emb))[::-1].copy()
    save_file(
        {"embeddings": emb[order].astype(np.float32), "index": order.astype(np.int64)},
        str(tmp_path / "embeddings.safetensors"),
    )
    (tmp_path / "report.json").write_text(json.dumps(inputs["attribution"]))
    rerender(tmp_path)
    rep = json.loads((tmp_path / "report.json").read_text())
    assert set(rep["clusters"][0]["rows"]) == set(inputs["bad"])


def test_report_command_errors(tmp_path):
    with pytest.raises(GradianError, match="no report.json"):
        rerender(tmp_path)
    (tmp_path / "report.json").write_text("{not json")
    with pytest.raises(GradianError, match="not valid JSON"):
        rerender(tmp_path)
    (tmp_path / "report.json").write_text(json.dumps({"schema": "x"}))
    with pytest.raises(GradianError, match="examples"):
        rerender(tmp_path)


def test_report_command_via_typer(tmp_path, inputs):
    import typer
    from typer.testing import CliRunner

    from gradian.report.cli import report_command

    app = typer.Typer()
    app.command()(report_command)
    (tmp_path / "report.json").write_text(json.dumps(inputs["attribution"]))
    result = CliRunner().invoke(app, [str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "report.html" in result.output and (tmp_path / "report.md").is_file()


def test_attribute_contributions_feed_per_item_column():
    """attribute writes per-item scores as "contributions"; the report shows them per top row."""
    from gradian.report.build import per_item_contributions

    attribution = {
        "regressed": [{"index": 3}, {"index": 7}],
        "examples": [{"index": 0, "score": 2.0, "rank": 1}],
        "contributions": [
            {"index": 0, "score": 2.0, "per_item": [{"eval_index": 3, "score": 1.5}, {"eval_index": 7, "score": 0.5}]}
        ],
    }
    assert per_item_contributions(attribution) == {0: {3: 1.5, 7: 0.5}}


def test_findings_tables_show_the_fix_as_a_sentence():
    """diagnose writes a fix as {"text", "key", "value", "command"}: both tables show its sentence and the command,
    never the dict; a finding read back from report.json is the finding diagnose wrote."""
    from gradian.diagnose.types import Finding, Fix, Severity

    finding = Finding(
        "D106",
        "truncation",
        Severity.ERROR,
        "36 row(s) exceed the max length 128",
        evidence={"rows": [0, 3], "split": "train"},
        fix=Fix(text="Raise max_length.", key="max_length", value=239, command="gradian-droprows train.jsonl"),
        cause="mechanical",
    )
    saved = json.loads(json.dumps(finding.to_dict()))
    assert Finding.from_dict(saved) == finding
    assert Finding.from_dict(saved).train_rows() == [0, 3]
    assert Finding.from_dict({**saved, "evidence": {"rows": [1], "split": "eval"}}).train_rows() == []
    report = {"findings": [saved]}
    md = render_markdown(report)
    html = render_html(report)
    want = "Raise max_length (set max_length to 239). Run: gradian-droprows train.jsonl"
    assert want.replace("_", "\\_") in md
    assert want in html
    assert "{'text'" not in md and "{&#x27;text" not in html and "{'text" not in html


def test_saved_clusters_read_back_as_typed_clusters(report):
    """report.json's clusters are exactly Cluster.to_dict(): reading them back loses nothing."""
    from gradian.report.schema import Cluster

    saved = json.loads(json.dumps(report["clusters"]))
    assert saved and all(Cluster.from_dict(c).to_dict() == c for c in saved)
    assert any(c["findings"] for c in saved)  # the per-cluster findings round-trip too


def test_the_built_report_is_typed_and_reads_back_as_written(built, report, tmp_path):
    """build, render, verdict and verify share one typed Report: attributes in-process, report.json through one
    to_dict / from_dict pair that loses nothing (a report.json read back and written again is the same file)."""
    from gradian.report.schema import EvalItem, RankedRow, Report
    from gradian.verdict.schema import Verdict, VerdictGroup

    assert isinstance(built, Report) and isinstance(built.verdict, Verdict)
    assert all(isinstance(e, RankedRow) for e in built.examples) and all(
        isinstance(r, EvalItem) for r in built.regressed
    )
    assert all(isinstance(g, VerdictGroup) for g in built.verdict.groups) and built.verdict.groups
    assert built.verdict.drop_rows == report["verdict"]["drop_rows"] and built.verdict.text == report["verdict"]["text"]
    assert [e.index for e in built.examples] == [e["index"] for e in report["examples"]]
    assert list(report)[-7:] == ["n_rows", "clusters", "clustering", "findings", "verdict", "logs", "options"]
    render_all(built, tmp_path)
    on_disk = (tmp_path / "report.json").read_text()
    again = Report.from_dict(json.loads(on_disk))
    assert again.verdict == built.verdict and again.clusters == built.clusters
    render_all(again, tmp_path / "again")
    assert (tmp_path / "again" / "report.json").read_text() == on_disk
    assert (tmp_path / "again" / "report.md").read_text() == (tmp_path / "report.md").read_text()


def test_rows_to_read_are_listed_apart_from_the_rows_to_drop(report, tmp_path):
    """A term hint's rows (verdict.how.hints) show under their own label in every format, never in drop_rows."""
    import copy

    r = copy.deepcopy(report)
    drop = r["verdict"]["drop_rows"]
    assert drop and r["verdict"].get("how") is not None
    r["verdict"]["how"]["hints"] = [{"term": "zorblax", "group": 0, "rows": [3, 1, 2], "size": 3, "holding": 4,
                                     "p": 1e-5, "frequency": 0.9}]  # fmt: skip
    md, html = render_markdown(r), render_html(r)
    assert 'Rows to read (3 that hold "zorblax", not in drop\\_rows): 3, 1, 2' in md
    assert "Rows to read (3 that hold &quot;zorblax&quot;, not in drop_rows): 3, 1, 2" in html
    paths = render_all(r, tmp_path)
    assert json.loads(paths["json"].read_text())["verdict"]["how"]["hints"][0]["rows"] == [3, 1, 2]
    assert paths["drop_txt"].read_text().split() == [str(x) for x in drop]
