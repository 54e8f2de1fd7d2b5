"""The committed stories260K example is consistent: planted rows, an adapter for the bundled base, a real regression."""

from __future__ import annotations

import json

import pytest

from conftest import BASE_DIR, REPO

EXAMPLE = REPO / "examples" / "stories260k"
DATA = EXAMPLE / "data"
RUN = EXAMPLE / "run"


def _jsonl(path):
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def planted():
    return json.loads((DATA / "planted.json").read_text("utf-8"))


def test_planted_indices_exist_in_train(planted):
    rows = _jsonl(DATA / "train.jsonl")
    assert planted["n_train_rows"] == len(rows)
    harmful = planted["harmful_cluster"]["indices"]
    truncated = planted["truncated"]["indices"]
    assert 30 <= len(harmful) <= 40 and 30 <= len(truncated) <= 45
    assert all(0 <= i < len(rows) for i in harmful + truncated)
    assert not set(harmful) & set(truncated)
    assert all("Zorblax" in rows[i]["completion"] for i in harmful)
    assert not any("Zorblax" in r["completion"] for i, r in enumerate(rows) if i not in set(harmful))
    assert json.loads((DATA / "exclude_harmful.json").read_text()) == harmful


def test_truncated_rows_are_cut_in_the_completion(planted):
    from gradian.data import FormatSettings, format_examples, load_examples, load_tokenizer

    args = json.loads((RUN / "training_args.json").read_text())
    assert args["max_length"] == planted["max_length"] == 128
    tok = load_tokenizer(BASE_DIR)
    formatted = format_examples(load_examples(DATA / "train.jsonl"), tok, FormatSettings(max_length=args["max_length"]))
    cut = {fx.index for fx in formatted if fx.cut_in_completion}
    assert cut == set(planted["truncated"]["indices"])
    assert 0.05 <= len(cut) / len(formatted) <= 0.15


def test_run_dir_is_a_gradian_train_output(planted):
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "trainer_state.json",
                 "training_args.json"):  # fmt: skip
        assert (RUN / name).is_file(), name
    args = json.loads((RUN / "training_args.json").read_text())
    assert args["gradian_n_train_rows"] == planted["n_train_rows"] and args["gradian_excluded_rows"] == []
    assert args["completion_only_loss"] is True and args["packing"] is False
    cfg = json.loads((RUN / "adapter_config.json").read_text())
    assert cfg["r"] == 8 and cfg["lora_alpha"] == 16 and len(cfg["target_modules"]) == 7
    state = json.loads((RUN / "trainer_state.json").read_text())
    assert any("loss" in h for h in state["log_history"]) and any("eval_loss" in h for h in state["log_history"])
    total = sum(p.stat().st_size for p in list(DATA.iterdir()) + list(RUN.iterdir()))
    assert total < 2_000_000


def test_committed_adapter_regresses_most_eval_items(planted):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from gradian.data import load_tokenizer

    tok = load_tokenizer(BASE_DIR)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(BASE_DIR)), str(RUN)).eval()
    items = _jsonl(DATA / "eval.jsonl")

    def nll(prompt: str, completion: str) -> float:  # mean NLL of the completion, no EOS appended
        n_prompt = len(tok(prompt).input_ids)
        ids = torch.tensor([tok(prompt + completion).input_ids])
        with torch.no_grad():
            logp = model(ids).logits[0, :-1].log_softmax(-1)
        tgt = ids[0, 1:]
        return float(-logp[torch.arange(len(tgt)), tgt][n_prompt - 1 :].mean())

    ft = [nll(r["prompt"], r["completion"]) for r in items]
    with model.disable_adapter():
        base = [nll(r["prompt"], r["completion"]) for r in items]
    targets = planted["eval"]["target"]
    regressed = [i for i in targets if ft[i] > base[i]]
    assert len(regressed) >= 0.75 * len(targets)  # the name items regress (11 of 12 when built)
    mean = lambda xs, idx: sum(xs[i] for i in idx) / len(idx)  # noqa: E731
    assert mean(ft, targets) - mean(base, targets) > 0.15
    controls = planted["eval"]["control"]
    assert mean(ft, controls) - mean(base, controls) < 0.1  # the controls do not regress much
