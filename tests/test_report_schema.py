"""report.json's typed schema: every shape a report.json can have (attribute's, a built one, an older or a
third-party one) reads back and writes again as the same JSON, keys in the same order; build sets the derived keys
as the dict code did."""

from __future__ import annotations

import json

from gradian.report.build import build_report
from gradian.report.schema import ClusterMap, EvalItem, RankedRow, Report
from gradian.verdict.schema import Verdict


def same_json(data: dict) -> bool:
    back = Report.from_dict(json.loads(json.dumps(data))).to_dict()
    return json.dumps(back) == json.dumps(data)


def test_attributes_report_reads_back_as_written():
    attribution = {
        "schema": "gradian.report/1",
        "method": "kfac",
        "settings": {"method": "kfac", "regression": {"rose": 2}, "query_items": [0, 1]},
        "no_regression": False,
        "examples": [
            {"index": 3, "id": None, "score": 2.5, "rank": 1, "token_harm": [["a", None], ["b", 2.5]]},
            {"index": 1, "id": "r1", "score": -1, "rank": 2},
        ],
        "regressed": [{"index": 0, "id": None, "base_nll": 1.0, "finetuned_nll": 2.0, "delta": 1.0,
                       "relative": 1.0, "n_tokens": 3, "regressed": True, "completion": "x", "generated": "greedy"}],
        "eval": [{"index": 0, "id": None, "base_nll": 1.0, "finetuned_nll": 2.0}],
        "contributions": [{"index": 3, "per_item": [{"eval_index": 0, "score": 2.5}]}],
        "notes": ["n"],
        "timings": {"total_s": 1.0},
    }  # fmt: skip
    assert same_json(attribution)
    rep = Report.from_dict(attribution)
    assert rep.examples[1].score == -1 and rep.regressed[0].change == 1.0 and rep.regressed[0].generated == "greedy"
    assert rep.regressed[0].extra == {"completion": "x"} and rep.extra["notes"] == ["n"]
    assert rep.attribute_options().method == "kfac"  # no saved options: the settings' values


def test_unknown_keys_and_odd_values_are_kept_in_place():
    older = {
        "examples": [{"index": 0, "score": 1, "per_item": {"5": 1.0}, "custom": {"k": [1]}}],
        "regressed": [{"index": 5}],
        "future_key": [1, 2],
        "verdict": {"kind": "spread", "cause": "unknown", "headline": "h"},
        "clustering": {"how": "saved", "k": 2, "map": {}},
        "logs": {"source": "trainer_state.json", "total_steps": 4, "points": [{"step": 1, "loss": 2.0, "extra": 1}]},
    }
    back = Report.from_dict(older).to_dict()
    assert list(back)[:3] == ["examples", "regressed", "future_key"] and back["future_key"] == [1, 2]
    assert back["examples"][0] == older["examples"][0] and list(back["examples"][0]) == list(older["examples"][0])
    assert back["clustering"] == older["clustering"] and back["logs"] == older["logs"]
    assert Verdict.from_dict(older["verdict"]).text == ""  # an older verdict without sentences loads too


def test_set_writes_a_key_even_when_none_and_forget_drops_it():
    row = RankedRow(index=4, score=1.0)
    assert row.to_dict() == {"index": 4, "score": 1.0}  # unset Nones are not written
    row.set(cluster=None, findings=[])
    assert row.to_dict() == {"index": 4, "score": 1.0, "cluster": None, "findings": []}
    row.forget(["cluster", "findings"])
    assert row.to_dict() == {"index": 4, "score": 1.0} and row.findings is None
    item = EvalItem.from_dict({"index": 2, "id": None})
    item.set(text="t")
    assert list(item.to_dict()) == ["index", "id", "text"]
    assert ClusterMap().to_dict() == {}


def test_build_report_writes_derived_keys_after_the_attributions_and_is_idempotent():
    attribution = {
        "method": "m",
        "examples": [{"index": i, "id": f"r{i}", "score": float(3 - i), "rank": i + 1} for i in range(4)],
        "regressed": [{"index": 0, "base_nll": 1.0, "finetuned_nll": 2.0}],
        "settings": {},
    }
    built = build_report(attribution, train_examples={i: f"text {i}" for i in range(4)}).to_dict()
    assert list(built) == ["method", "examples", "regressed", "settings", "schema", "n_rows", "clusters",
                           "clustering", "findings", "verdict", "options"]  # fmt: skip
    assert list(built["examples"][0]) == ["index", "id", "score", "rank", "cluster", "findings", "text"]
    assert list(built["regressed"][0]) == ["index", "base_nll", "finetuned_nll"]
    again = build_report(json.loads(json.dumps(built))).to_dict()
    assert json.dumps(again) == json.dumps(built)
    assert same_json(built)
