"""False alarms reported on clean real runs (issue 15), each checked on a real artifact: a real TRL SFTTrainer run on
the bundled stories260K base, real tokenizers carrying the chat templates TRL ships, real safetensors weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gradian.diagnose.api import diagnose_full
from gradian.diagnose.catalog import find_rule
from gradian.diagnose.context import DiagnoseContext, build_context
from gradian.diagnose.engine import run_rule
from gradian.diagnose.settings import DiagnoseSettings
from realsets import STORIES_DATA, stories, write_jsonl
from test_diagnose_helpers import STORIES, clean_setup

trl = pytest.importorskip("trl")


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory) -> Path:
    from trl_run import make_trl_run

    return make_trl_run(tmp_path_factory.mktemp("trl") / "run")


def diag(**kw):
    fs, notes, _ = diagnose_full(settings=DiagnoseSettings(), **kw)
    assert not [n for n in notes if "internal error" in n.reason], notes
    return fs


def test_clean_trl_run_has_no_error_or_warning(trl_run):
    fs = diag(run=trl_run, train=trl_run / "train.jsonl", eval=trl_run / "eval.jsonl")
    assert [(f.code, f.message) for f in fs if f.severity.value != "info"] == []


def test_mid_run_checkpoint_beside_a_later_one_is_not_incomplete(trl_run):
    (ck,) = [c for c in trl_run.glob("checkpoint-*") if c.name == "checkpoint-10"]
    fs = diag(run=ck, select=["L312"])
    assert [(f.severity.value, f.evidence.get("later_checkpoint")) for f in fs] == [
        ("info", str(trl_run / "checkpoint-30"))
    ]
    shutil.rmtree(trl_run / "checkpoint-20")  # without later checkpoints it is a real incomplete run
    moved = trl_run.parent / "ck30"
    shutil.move(str(trl_run / "checkpoint-30"), moved)
    try:
        assert [f.severity.value for f in diag(run=ck, select=["L312"])] == ["warning"]
    finally:
        shutil.move(str(moved), trl_run / "checkpoint-30")


def test_doctor_pad_equals_eos_is_fine_under_trl(trl_run):
    from gradian.doctor import run_doctor

    tok_cfg = json.loads((trl_run / "tokenizer_config.json").read_text())
    assert tok_cfg["pad_token"] == tok_cfg["eos_token"]  # TRL set pad = eos, as it does for such tokenizers
    (pad,) = [c for c in run_doctor(run=trl_run) if c.name == "tokenizer pad"]
    assert pad.status == "ok" and "TRL" in pad.detail


def test_too_few_steps_fix_never_suggests_the_current_accumulation(trl_run):
    cfg = json.loads((trl_run / "training_args.json").read_text())
    assert cfg["gradient_accumulation_steps"] == 1
    cfg["per_device_train_batch_size"] = 64  # 240 rows / 64 = 4 steps
    (trl_run.parent / "big_batch.json").write_text(json.dumps(cfg))
    (f,) = diag(train=trl_run / "train.jsonl", config=trl_run.parent / "big_batch.json", select=["C204"])
    assert f.fix.key != "gradient_accumulation_steps" and f.fix.key == "per_device_train_batch_size"
    assert f.fix.value < 64


def _chat_rows(n: int = 40) -> list[dict]:
    return [{"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["completion"]}]}
            for r in stories()[:n]]  # fmt: skip


@pytest.mark.parametrize("family", ["qwen2_5", "llama3", "qwen3", "gemma", "phi3"])
def test_assistant_mask_rule_silent_on_templates_trl_patches(family):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(STORIES))
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / f"{family}.jinja").read_text()
    ctx = DiagnoseContext(tokenizer=tok, setup=clean_setup(), setup_known=True)
    ctx.setup.masking, ctx.setup.versions = "assistant_only", {"trl": trl.__version__}
    assert run_rule(find_rule("C215"), ctx) == []
    ctx.setup.versions = {}  # no TRL version recorded: whether the run's TRL patched it is unknown, a note
    assert [f.severity.value for f in run_rule(find_rule("C215"), ctx)] == ["info"]
    ctx.setup.versions = {"trl": "0.21.0"}  # TRL < 1.1 used the template as it is (trl#5470)
    assert [f.severity.value for f in run_rule(find_rule("C215"), ctx)] == ["error"]
    ctx.setup.versions = {"trl": trl.__version__}
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"  # TRL cannot patch
    assert [f.code for f in run_rule(find_rule("C215"), ctx)] == ["C215"]


def _base_with_chat_tokens(out: Path, *, zero_rows: bool) -> Path:
    """The stories260K base with <|im_start|>/<|im_end|> added: their embedding rows zero (as base checkpoints ship
    reserved tokens) or trained (random), and a ChatML template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(STORIES))
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}")  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(str(STORIES))
    model.resize_token_embeddings(len(tok))
    with torch.no_grad():
        rows = model.get_input_embeddings().weight[-2:]
        rows.zero_() if zero_rows else rows.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


def test_untrained_template_tokens_read_from_weights_not_name(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", _chat_rows())
    cfg = tmp_path / "training_args.json"
    cfg.write_text(json.dumps({"learning_rate": 2e-4, "num_train_epochs": 1, "output_dir": "out"}))
    named_instruct = _base_with_chat_tokens(tmp_path / "Llama-3-8B-Instruct", zero_rows=True)
    named_base = _base_with_chat_tokens(tmp_path / "my-base-model", zero_rows=False)
    rule = find_rule("C212")
    ctx = build_context(train=train, config=cfg, base=str(named_instruct))
    (f,) = run_rule(rule, ctx)  # an "Instruct" name, but the rows are untrained: fires
    assert set(f.evidence["template_tokens"]) == {"<|im_start|>", "<|im_end|>"}
    ctx = build_context(train=train, config=cfg, base=str(named_base))
    assert run_rule(rule, ctx) == []  # a "base" name, but the rows are trained: silent


def test_generic_openings_shared_with_eval_prompts_are_not_a_leak(tmp_path):
    rows = stories()
    ev = [json.loads(x) for x in (STORIES_DATA / "eval.jsonl").read_text().splitlines() if x.strip()]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    evf = write_jsonl(tmp_path / "eval.jsonl", ev)
    assert [f.severity.value for f in diag(train=train, eval=evf, select=["D105"])] in ([], ["info"])
    leak = {"prompt": "Tom found a green key under the old oak tree near the", "completion": " river."}
    write_jsonl(evf, [*ev, leak])
    write_jsonl(train, [*rows, {**leak, "completion": " lake, and he kept it."}])
    (f,) = [f for f in diag(train=train, eval=evf, select=["D105"]) if f.severity.value != "info"]
    assert f.evidence["rows"] == [len(rows)] and f.severity.value == "warning"


def test_bundled_example_generic_prompts_noted_as_info():
    """The example's planted rows reuse generic eval openings with other completions: an info note (what the rows
    have in common, for the verdict), not a warning."""
    d = STORIES_DATA
    fs = diag(train=d / "train.jsonl", eval=d / "eval.jsonl", select=["D105"])
    assert [f.severity.value for f in fs] == ["info"] and fs[0].evidence["count"] == 24
