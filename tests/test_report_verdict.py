"""Every branch of the verdict, from constructed clusters, findings and scores."""

from __future__ import annotations

from gradian.report.verdict import is_concentrated, make_verdict, setup_errors

REG = [{"index": 0, "base_nll": 1.0, "finetuned_nll": 2.0}, {"index": 1, "base_nll": 1.0, "finetuned_nll": 1.5}]


def cluster(cid, rows, harm_share, size_share, label="", findings=()):
    return {
        "id": cid,
        "size": len(rows),
        "rows": rows,
        "harm_share": harm_share,
        "size_share": size_share,
        "label": label,
        "findings": list(findings),
    }


def examples(scores):
    return [{"index": i, "id": f"r{i}", "score": s} for i, s in scores.items()]


def cluster_finding(code, name, percent, fix):
    """A diagnose finding as a cluster summary carries it: the share of the (10-row) culprit cluster it flags."""
    title = name.replace("_", " ")
    text = f"{percent:.0f}% of this cluster is flagged: {title} ({code} {name})"
    return {"code": code, "name": name, "percent": percent, "count": round(percent / 10), "text": text, "fix": fix}


def concentrated_case(findings_in_cluster=()):
    scores = {i: (1.0 if i < 10 else 0.01) for i in range(100)}
    scores[5] = -0.2  # a helpful row inside the culprit cluster is not dropped
    clusters = [
        cluster(1, list(range(10)), 0.9, 0.1, "zorbax / girl", findings_in_cluster),
        cluster(2, list(range(10, 100)), 0.1, 0.9, "dog / bone"),
    ]
    return clusters, scores


def test_concentrated_content():
    clusters, scores = concentrated_case()
    v = make_verdict(clusters, [], examples(scores), REG)
    assert v["kind"] == "concentrated" and v["cause"] == "content" and v["reliable"]
    assert v["culprit_clusters"] == [1]
    assert v["drop_rows"] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert v["drop_ids"][0] == "r0"
    assert "Cluster 1 (zorbax / girl) carries 90% of the harm to the 2 regressed eval items" in v["text"]
    assert "content" in v["text"] and "'zorbax / girl'" in v["text"]
    assert any("--verify" in s and "drop_rows.txt" in s for s in v["next_steps"])


def test_concentrated_mechanical():
    flag = cluster_finding("D101", "completion_cut", 90.0, "raise max_length")
    clusters, scores = concentrated_case([flag])
    v = make_verdict(clusters, [], examples(scores), REG)
    assert v["kind"] == "concentrated" and v["cause"] == "mechanical"
    assert "mechanical" in v["text"] and "D101 completion_cut" in v["text"]
    assert v["next_steps"][0].startswith("Fix completion cut (D101 completion_cut): raise max_length")


def test_content_finding_is_named_but_the_cause_stays_content():
    """Rows that share eval prompts (D105) are what the culprit has in common, not a pipeline mechanism."""
    flag = cluster_finding("D105", "train_eval_overlap", 60.0, "drop the overlapping train rows")
    clusters, scores = concentrated_case([flag])
    v = make_verdict(clusters, [], examples(scores), REG)
    assert v["kind"] == "concentrated" and v["cause"] == "content"
    assert "looks mechanical" not in v["text"] and "What they have in common: 60%" in v["text"] and "D105" in v["text"]
    assert v["next_steps"][0].startswith("Drop the ")  # the rows first; what they share after
    assert v["next_steps"][1].startswith("Fix train eval overlap (D105 train_eval_overlap): drop the overlapping")


def test_minor_finding_is_not_mechanical():
    flag = {"code": "D101", "name": "completion_cut", "percent": 20.0, "count": 2, "text": "20% ...", "fix": "x"}
    clusters, scores = concentrated_case([flag])
    assert make_verdict(clusters, [], examples(scores), REG)["cause"] == "content"


def test_spread_thin_names_no_culprit():
    scores = {i: 0.01 * (1 + i % 7) for i in range(400)}
    clusters = [
        cluster(1, list(range(0, 200)), 0.55, 0.5),
        cluster(2, list(range(200, 400)), 0.45, 0.5),
    ]
    v = make_verdict(clusters, [], examples(scores), REG)
    assert v["kind"] == "spread"
    assert v["culprit_clusters"] == [] and v["drop_rows"] == []
    assert "spread thin" in v["text"] and "No single group of rows explains the regression" in v["text"]
    assert v["next_steps"]


def test_share_below_twice_size_is_not_concentrated():
    assert not is_concentrated({"harm_share": 0.5, "size_share": 0.3})
    assert is_concentrated({"harm_share": 0.6, "size_share": 0.3})
    assert not is_concentrated({"harm_share": 0.2, "size_share": 0.01})  # too small a share of the harm


def test_few_rows_dominate():
    scores = {i: 0.001 for i in range(300)}
    scores[7], scores[42], scores[99] = 5.0, 4.0, 3.0
    clusters = [cluster(1, list(range(150)), 0.55, 0.5), cluster(2, list(range(150, 300)), 0.45, 0.5)]
    findings = [{"code": "D3", "name": "no_eos", "severity": "warning", "evidence": {"rows": [7, 42, 99]}}]
    v = make_verdict(clusters, findings, examples(scores), REG)
    assert v["kind"] == "few_rows"
    assert v["drop_rows"] == [7, 42, 99]
    assert "3 of the 3 are flagged" in v["text"]


def test_setup_error_said_first():
    clusters, scores = concentrated_case()
    findings = [
        {
            "code": "L302",
            "name": "loss_nan",
            "severity": "error",
            "message": "NaN loss",
            "evidence": {"steps": [60]},
            "fix": "lower the learning rate",
        },
        {
            "code": "C10",
            "name": "lr_full_ft",
            "severity": "error",
            "evidence": {"key": "learning_rate", "value": 0.01},
            "fix": "use 2e-4",
        },
    ]
    v = make_verdict(clusters, findings, examples(scores), REG)
    assert not v["reliable"]
    assert v["sentences"][0].startswith("Fix the setup first: 2 setup errors")
    assert "unreliable" in v["sentences"][0]
    assert v["next_steps"][0].startswith("Fix loss nan (L302 loss_nan)")
    assert "config key `learning_rate`, now 0.01" in v["next_steps"][1]
    assert [c["key"] for c in v["config_changes"]] == [None, "learning_rate"]
    assert v["kind"] == "concentrated"  # the ranking is still described, after the warning


def test_row_error_covering_most_rows_is_a_setup_error():
    pervasive = {"code": "D9", "name": "mask_over_prompt", "severity": "error", "evidence": {"rows": list(range(80))}}
    local = {"code": "D8", "name": "cut", "severity": "error", "evidence": {"rows": [1, 2]}}
    warn = {"code": "C1", "name": "lr", "severity": "warning", "evidence": {"key": "lr"}}
    assert setup_errors([pervasive, local, warn], n_rows=100) == [pervasive]


def test_no_regression():
    clusters, scores = concentrated_case()
    v = make_verdict(clusters, [], examples(scores), [])
    assert v["kind"] == "no_regression" and v["drop_rows"] == []


def test_no_positive_harm():
    scores = {i: -0.1 for i in range(50)}
    v = make_verdict([cluster(1, list(range(50)), 0.0, 1.0)], [], examples(scores), REG)
    assert v["kind"] == "no_harm" and "no training row has positive harm" in v["text"]


def test_no_clusters_falls_back_to_ranking():
    scores = {i: 0.01 for i in range(100)}  # top 1% = 1 row
    scores[3] = 10.0
    v = make_verdict([], [], examples(scores), REG)
    assert v["kind"] == "few_rows" and v["drop_rows"] == [3]


def test_culprit_at_exactly_twice_its_share():
    """All the harm from half the rows is exactly 2x: a culprit, despite float rounding of the shares."""
    from gradian.report.verdict import is_concentrated

    assert is_concentrated({"harm_share": 1.0, "size_share": 0.1 + 0.2 + 0.2000000000000001})
    assert not is_concentrated({"harm_share": 0.9, "size_share": 0.5})


def test_row_errors_that_explain_the_culprit_are_not_called_separate():
    """D106 and D107 flag the same culprit rows: both explain it; an unrelated row error is 'separate'."""
    cut = {"code": "D107", "name": "completion_cut", "percent": 100.0, "count": 10, "fix": "raise max_length"}
    trunc = {"code": "D106", "name": "truncation", "percent": 100.0, "count": 10, "fix": "raise max_length"}
    clusters, scores = concentrated_case([trunc, cut])
    rows = list(range(10))
    findings = [
        {"code": "D106", "name": "truncation", "severity": "error", "evidence": {"rows": rows}, "fix": "x"},
        {"code": "D107", "name": "completion_cut", "severity": "error", "evidence": {"rows": rows}, "fix": "x"},
        {"code": "D109", "name": "missing_eos", "severity": "error", "evidence": {"rows": [50, 51]}, "fix": "add EOS"},
    ]
    v = make_verdict(clusters, findings, examples(scores), REG)
    assert v["cause"] == "mechanical"
    separate = [s for s in v["sentences"] if s.startswith("Separately")]
    assert len(separate) == 1 and "D109" in separate[0]
    assert "D106" not in separate[0] and "D107" not in separate[0]
