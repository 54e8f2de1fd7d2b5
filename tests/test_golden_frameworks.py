"""Gradian against golden fixtures recorded from Axolotl's and LLaMA-Factory's real preprocessing.

CI has neither framework (their pins clash with this venv; docs/how-to/trainers.md), so the fixtures under
tests/fixtures/golden hold what each framework's own pipeline gave for the same rows: input ids, labels (-100 where no
loss) and the rows it dropped. bench/frameworks/make_golden_*.py recorded them in separate venvs. Each case here writes
the rows and the framework's YAML as a user's run leaves them, lets Gradian read both (``discover`` -> ``load_setup``
-> ``format_settings`` -> ``format_examples``, the path ``gradian tokens`` takes) and asserts equal ids, equal labels
and the same dropped rows.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from transformers import AutoTokenizer

from gradian.data import format_examples, load_examples, normalize_row
from gradian.run import discover, format_settings, load_setup

GOLDEN = Path(__file__).parent / "fixtures" / "golden"
BASE = Path(__file__).resolve().parents[1] / "examples" / "stories260k" / "base"
AXOLOTL = sorted(GOLDEN.glob("axolotl_*_preprocess.json"))  # one fixture per Axolotl version recorded
LLAMAFACTORY = sorted(GOLDEN.glob("llamafactory_*_preprocess.json"))


def _doc(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text("utf-8"))


def _cases(paths: list[Path]) -> list[Any]:
    """(fixture, case name) for every case of every version's fixture, with ids like ``0.19.0-alpaca``."""
    out = []
    for path in paths:
        version = path.name.split("_")[1]
        out += [pytest.param(path, c["name"], id=f"{version}-{c['name']}") for c in _doc(path)["cases"]]
    return out


def _tokenizer_dir(name: str, request: pytest.FixtureRequest, doc: dict[str, Any]) -> Path:
    src = BASE if name == "stories260K" else request.getfixturevalue("smollm2_tokenizer_dir")
    digest = hashlib.sha256((src / "tokenizer.json").read_bytes()).hexdigest()
    assert digest == doc["tokenizers"][name], f"{src} is not the tokenizer the fixtures were recorded with"
    return src


def _diffs(case: dict[str, Any], got: list[Any]) -> list[str]:
    """What differs between the framework's samples and Gradian's rows, one line each."""
    out = []
    by_index = {fx.index: fx for fx in got}
    for res in case["results"]:
        fx = by_index[res["row"]]
        where = f"row {res['row']}"
        if res["dropped"] != fx.dropped:
            out.append(f"{where}: framework dropped={res['dropped']}, gradian dropped={fx.dropped}")
            continue
        if res["dropped"]:
            continue
        n = len(res["samples"])
        if n > 1 and not any(f"splits it into {n} samples" in d for d in fx.decisions):
            out.append(f"{where}: the framework made {n} samples of it, gradian does not say so")
            continue
        # A row split into samples (Axolotl type: completion) is shown whole: the samples joined.
        want = {k: [t for smp in res["samples"] for t in smp[k]] for k in ("input_ids", "labels")}
        if want["input_ids"] != fx.input_ids:
            out.append(f"{where}: input ids differ ({len(want['input_ids'])} vs {len(fx.input_ids)} tokens)")
        elif want["labels"] != fx.labels():
            first = next(i for i, (a, b) in enumerate(zip(want["labels"], fx.labels(), strict=True)) if a != b)
            out.append(f"{where}: labels differ first at token {first}")
    return out


def _gradian(config: dict[str, Any], rows: list[dict[str, Any]], tok_dir: Path, folder: Path) -> list[Any]:
    folder.mkdir()
    train = folder / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    setup = load_setup(discover(config=folder / "config.yaml", train=train, tokenizer=tok_dir))
    fs = format_settings(setup)
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    return format_examples(load_examples(train, text_field=fs.text_field), tok, fs)


@pytest.mark.parametrize(("path", "name"), _cases(AXOLOTL))
def test_axolotl_preprocess(path: Path, name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    doc = _doc(path)
    case = next(c for c in doc["cases"] if c["name"] == name)
    tok_dir = _tokenizer_dir(case["tokenizer"], request, doc)
    config = {"base_model": "stories260K", **case["config"]}
    config["datasets"] = [{**d, "path": "train.jsonl"} for d in config["datasets"]]
    got = _gradian(config, case["rows"], tok_dir, tmp_path / "run")
    assert _diffs(case, got) == []


@pytest.mark.parametrize(("path", "name"), _cases(LLAMAFACTORY))
def test_llamafactory_preprocess(path: Path, name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    doc = _doc(path)
    case = next(c for c in doc["cases"] if c["name"] == name)
    src = _tokenizer_dir(case["tokenizer"], request, doc)
    # The tokenizer as LLaMA-Factory saves it into the run: its chat template, EOS and added stop words.
    saved = case["saved_tokenizer"]
    tok = AutoTokenizer.from_pretrained(str(src))
    tok.add_special_tokens({"additional_special_tokens": saved["added_tokens"]})
    tok.eos_token = saved["eos_token"]
    tok.chat_template = saved["chat_template"]
    tok_dir = tmp_path / "tokenizer"
    tok.save_pretrained(str(tok_dir))
    config = {"model_name_or_path": "stories260K", "stage": "sft", "finetuning_type": "lora", "dataset": "rows",
              **case["config"]}  # fmt: skip
    got = _gradian(config, case["rows"], tok_dir, tmp_path / "run")
    assert _diffs(case, got) == []


def _labelled_spans(labels: list[int]) -> int:
    return sum(1 for i, t in enumerate(labels) if t != -100 and (i == 0 or labels[i - 1] == -100))


@pytest.mark.parametrize("path", AXOLOTL + LLAMAFACTORY, ids=lambda p: p.name.rsplit("_", 1)[0])
def test_fixtures_exercise_what_they_claim(path: Path) -> None:
    """The recorded matrix covers what it is meant to: over-long rows (dropped by Axolotl, cut by LLaMA-Factory),
    multi-turn rows with more than one labelled span, a split row, and masking that train_on_inputs /
    train_on_prompt changes."""
    cases = {c["name"]: c for c in _doc(path)["cases"]}
    results = [(c, r) for c in cases.values() for r in c["results"]]
    dropped = {c["name"] for c, r in results if r["dropped"]}
    chats = [s for c, r in results if {"messages", "conversations"} & set(c["rows"][r["row"]]) for s in r["samples"]]
    assert any(_labelled_spans(s["labels"]) >= 2 for s in chats)
    axolotl = path in AXOLOTL
    if axolotl:
        assert {"alpaca", "alpaca_smollm2", "chat_template", "chat_template_sharegpt"} <= dropped
        assert any(len(r["samples"]) > 1 for r in cases["completion"]["results"])
    else:
        assert dropped == {"sharegpt_chatml"}  # its row with two user turns in a row
        assert any(len(s["input_ids"]) == c["config"]["cutoff_len"] for c, r in results for s in r["samples"])
    suffix = "_train_on_inputs" if axolotl else "_train_on_prompt"
    pairs = [(cases[n], cases[n + suffix]) for n in cases if n + suffix in cases]
    assert pairs
    for off, on in pairs:
        for a, b in zip(off["results"], on["results"], strict=True):
            if a["samples"]:
                assert a["samples"][0]["input_ids"] == b["samples"][0]["input_ids"]
                n_off, n_on = (sum(t != -100 for t in x["samples"][0]["labels"]) for x in (a, b))
                assert n_on > n_off, (on["name"], a["row"])


def test_alpaca_prompt_matches_axolotl() -> None:
    doc = json.loads((GOLDEN / "axolotl_0.19.0_alpaca.json").read_text("utf-8"))
    for case in doc["cases"]:
        raw = {"instruction": case["instruction"], "output": "x"}
        if case["input"] is not None:
            raw["input"] = case["input"]
        ex, layout = normalize_row(raw, index=0, source="t.jsonl")
        assert layout == "alpaca"
        assert ex.prompt == case["prompt"], case["instruction"]


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*_config_keys.json")), ids=lambda p: p.stem)
def test_every_key_of_the_trainers_own_schema_is_known(path: Path, tmp_path: Path) -> None:
    """A config with every key the trainer's own schema (and its bundled plugins) accepts gets no C222 unknown-key
    warning: the keys were read from the real schema by bench/frameworks/record_config_keys.py."""
    doc = _doc(path)
    keys = set(doc["keys"]) | {k for plugin in doc["plugins"].values() for k in plugin}
    cfg = {k: None for k in sorted(keys)}
    if doc["framework"] == "axolotl":
        cfg |= {"base_model": str(BASE), "adapter": "lora", "datasets": [{"path": "train.jsonl", "type": "alpaca"}]}
    else:
        cfg |= {"model_name_or_path": str(BASE), "stage": "sft", "finetuning_type": "lora", "template": "default"}
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(cfg), "utf-8")
    setup = load_setup(discover(config=tmp_path / "train.yaml"))
    assert setup.framework == doc["framework"]
    assert setup.unknown_keys == [], f"{len(setup.unknown_keys)} keys of {doc['framework']} {doc['version']} unknown"
