"""Every version window a rule rests on, checked against the real library at both of its ends: the last release
outside the window and the first inside it, each installed with ``pip install --no-deps --target`` into the folder
GRADIAN_VERSION_LIBS names (``scripts/version_libs.sh`` fills it; CI does, and sets GRADIAN_REQUIRE_VERSION_LIBS so
that a missing one fails instead of skipping). Each end runs in a subprocess with its folder first on PYTHONPATH and
the venv's torch and transformers behind it (the transformers ends carry their own transformers, tokenizers,
huggingface_hub and datasets): tests/trl_ends.py, tests/grad_accum_ends.py and tests/checkpointing_ends.py on the
bundled stories260K base.

Each test asserts (a) what the library really did at each end and (b) that Gradian's rule reads the run that end
wrote (or, where that TRL refused the setting or wrote no model card, that run with the setting or the card line a
user's run would hold) on the right side of the window."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gradian.diagnose.api import diagnose_full
from gradian.diagnose.rules.config import (
    DROPS_MAX_SEQ_LENGTH,
    GRAD_ACCUM_FIXED,
    LABELS_EOS,
    PACKING_KEEPS_MASK,
    PATCHES_TEMPLATES,
    READS_MAX_LENGTH,
    TF_INPUT_GRADS,
)
from gradian.diagnose.settings import DiagnoseSettings
from gradian.run import discover, format_settings, load_setup
from gradian.run.setup import TRL_APPENDS_EOS
from gradian.run.versions import VersionWindow, parse_version, trl_range_from_fields
from test_diagnose_helpers import STORIES

pytest.importorskip("trl")
pytest.importorskip("datasets")
WINDOWS = [PACKING_KEEPS_MASK, READS_MAX_LENGTH, DROPS_MAX_SEQ_LENGTH, LABELS_EOS, PATCHES_TEMPLATES, GRAD_ACCUM_FIXED,
           TRL_APPENDS_EOS, TF_INPUT_GRADS]  # fmt: skip

HERE = Path(__file__).parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
LIBS = Path(os.environ.get("GRADIAN_VERSION_LIBS") or CACHE / "gradian-tests" / "libs")  # scripts/version_libs.sh's
REQUIRED = bool(os.environ.get("GRADIAN_REQUIRE_VERSION_LIBS"))
QWEN3 = Path(__import__("trl").__file__).parent / "chat_templates" / "qwen3.jinja"  # the template TRL ships
RUNS = tempfile.TemporaryDirectory(prefix="gradian-ends-")  # the runs the ends write, removed at exit


@cache
def _end(script: str, lib: str, *args: str) -> tuple[dict[str, Any], Path]:
    """Run ``script`` under the library folder ``lib`` (e.g. ``trl-0.19.1``): its FACTS and the run dir it wrote."""
    target = LIBS / lib
    if not target.is_dir():
        if REQUIRED:
            raise RuntimeError(f"GRADIAN_REQUIRE_VERSION_LIBS is set but {target} is missing (scripts/version_libs.sh)")
        pytest.skip(f"{target} is not installed (scripts/version_libs.sh {LIBS})")
    out = Path(tempfile.mkdtemp(prefix=f"{lib}-", dir=RUNS.name)) / "run"
    env = {**os.environ, "PYTHONPATH": str(target), "GRADIAN_TEMPLATE": str(QWEN3), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(HERE / script), *args, str(STORIES), str(out)], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (facts,) = [json.loads(ln[6:]) for ln in proc.stdout.splitlines() if ln.startswith("FACTS ")]
    return facts, out


def trl_end(case: str, version: str) -> tuple[dict[str, Any], Path]:
    facts, run = _end("trl_ends.py", f"trl-{version}", case)
    assert facts["trl"] == version
    return facts, run


def _copy(run: Path, out: Path, card: tuple[str, str] | None = None, **config: Any) -> Path:
    """A copy of ``run`` whose model card records ``card`` (package line, version) and whose training_args.json
    also holds ``config``, a key given None dropped (training_args.bin dropped, so the json is the config read)."""
    shutil.copytree(run, out)
    for pickled in out.rglob("training_args.bin"):
        pickled.unlink()
    if card is not None:
        (out / "README.md").write_text(f"### Framework versions\n\n- {card[0]}: {card[1]}\n")
        for other in out.glob("checkpoint-*/README.md"):
            other.unlink()
    if config:
        args = json.loads((out / "training_args.json").read_text())
        merged = {k: v for k, v in {**args, **config}.items() if not (k in config and v is None)}
        (out / "training_args.json").write_text(json.dumps(merged))
    return out


def codes(run: Path, rule: str, **kw: Any) -> list[str]:
    fs, notes, _ = diagnose_full(run=run, train=run / "train.jsonl", base=str(STORIES), select=[rule],
                                 settings=DiagnoseSettings(), **kw)  # fmt: skip
    assert not [n for n in notes if "internal error" in n.reason], notes
    return [f.severity.value for f in fs]


@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: w.describe()[:40])
def test_every_window_names_its_ends(window: VersionWindow) -> None:
    """The two releases each window is run at: the last one before ``since`` and one at or after it."""
    before, inside = (parse_version(v) for v in window.ends)
    assert before is not None and inside is not None
    assert before < window.since <= inside


def test_sft_config_fields_imply_the_trl_version() -> None:
    """The fields a pickled SFTConfig holds bracket its TRL (the real 0.15.2, 0.16.0 and 0.16.1 ones are in
    test_eos_and_pad_is_eos_at_trl_0_16_and_0_16_1); a plain TrainingArguments implies nothing."""
    from dataclasses import fields

    from transformers import TrainingArguments
    from trl import SFTConfig

    got = trl_range_from_fields({f.name for f in fields(SFTConfig)}, "training_args.bin")
    assert got is not None and (got.low, got.high) == ((0, 20), None)
    assert trl_range_from_fields({f.name for f in fields(TrainingArguments)}, "training_args.bin") is None
    labels = {}
    for extra in ({"max_seq_length"}, {"max_seq_length", "max_length"}, {"max_seq_length", "max_length", "pad_token"}):
        got = trl_range_from_fields({"dataset_text_field", *extra}, "training_args.bin")
        labels[len(extra)] = got.label("trl") if got else None
    assert labels == {1: "TRL < 0.16", 2: "TRL >= 0.16 and < 0.16.1", 3: "TRL >= 0.16.1 and < 0.20"}


@pytest.mark.slow
def test_c205_packing_keeps_the_mask_from_trl_0_20(tmp_path: Path) -> None:
    """PACKING_KEEPS_MASK: TRL 0.19.1 packs input_ids alone (sft_trainer.py:794 ``select_columns("input_ids")``),
    TRL 0.20.0 packs the completion mask with them (sft_trainer.py:833)."""
    old, old_run = trl_end("pack", PACKING_KEEPS_MASK.ends[0])
    new, new_run = trl_end("pack", PACKING_KEEPS_MASK.ends[1])
    assert old["labelled"] == old["tokens"]  # prompts trained on
    assert 0 < new["labelled"] < new["tokens"]
    assert load_setup(discover(old_run)).versions["trl"] == "0.19.1"
    assert codes(old_run, "C205") == ["error"]
    assert codes(new_run, "C205") == []
    bare = _copy(old_run, tmp_path / "bare")
    for card in bare.rglob("README.md"):
        card.unlink()  # no card: the SFTConfig's packing_strategy ("ffd", TRL 0.19's name) settles it
    assert codes(bare, "C205") == ["error"]


@pytest.mark.slow
def test_c207_max_length_keys_at_trl_0_16_and_0_20(tmp_path: Path) -> None:
    """READS_MAX_LENGTH / DROPS_MAX_SEQ_LENGTH: SFTConfig has max_seq_length alone up to 0.15, both from 0.16 (it
    copies max_seq_length into max_length, sft_config.py:183 at 0.16.0), max_length alone from 0.20: the key it
    lacks is refused (TypeError), not ignored. A run that recorded the refused key was not configured by that
    SFTConfig; Gradian warns that its max length is not the one the config says."""
    assert (READS_MAX_LENGTH.ends, DROPS_MAX_SEQ_LENGTH.ends) == (("0.15.2", "0.16.0"), ("0.19.1", "0.20.0"))
    outs = {}
    for case, window in (("max_length", READS_MAX_LENGTH), ("max_seq_length", DROPS_MAX_SEQ_LENGTH)):
        for version in window.ends:
            facts, run = trl_end(case, version)
            outs[version] = (facts["accepted"], facts["longest"] == 16, run)  # 16: the key was read
    assert {v: a[:2] for v, a in outs.items()} == {"0.15.2": (False, False), "0.16.0": (True, True),
                                                   "0.19.1": (True, True), "0.20.0": (False, False)}  # fmt: skip
    old = _copy(outs["0.15.2"][2], tmp_path / "0.15.2", ("TRL", "0.15.2"), max_length=16, max_seq_length=None)
    new = _copy(outs["0.20.0"][2], tmp_path / "0.20.0", ("TRL", "0.20.0"), max_seq_length=16)
    assert (codes(old, "C207"), codes(new, "C207")) == (["warning"], ["warning"])
    for version in ("0.16.0", "0.19.1"):
        assert codes(outs[version][2], "C207") == []


@pytest.mark.slow
def test_eos_and_pad_is_eos_at_trl_0_16_and_0_16_1(tmp_path: Path) -> None:
    """TRL_APPENDS_EOS: TRL 0.15.2 tokenizes text rows as they are (sft_trainer.py:432), 0.16.0 appends EOS
    (sft_trainer.py:456). LABELS_EOS (C213): 0.16.0 collates with transformers' DataCollatorForLanguageModeling,
    which masks the padding id, so with pad == EOS the appended EOS gets no label; 0.16.1 pads labels by position
    (its own DataCollatorForLanguageModeling, sft_trainer.py:73) and labels it. These TRLs write no model card on
    these runs: their training_args.bin's SFTConfig fields imply the version (max_seq_length alone: < 0.16; both
    max length keys without pad_token: 0.16.0; with it: 0.16.1 to 0.19). Read with the card line a later TRL
    writes instead, the rules land on the same side."""
    assert (TRL_APPENDS_EOS.ends, LABELS_EOS.ends) == (("0.15.2", "0.16.0"), ("0.16.0", "0.16.1"))
    ends = {v: trl_end("text", v) for v in ("0.15.2", "0.16.0", "0.16.1")}
    assert {v: (f["pad_is_eos"], f["ends_eos"], f["eos_labelled"]) for v, (f, _) in ends.items()} == {
        "0.15.2": (True, False, False), "0.16.0": (True, True, False), "0.16.1": (True, True, True)}  # fmt: skip
    assert not [v for v, (_, run) in ends.items() if list(run.rglob("README.md"))]
    carded = {v: _copy(run, tmp_path / v, ("TRL", v)) for v, (_, run) in ends.items()}
    for runs in ({v: run for v, (_, run) in ends.items()}, carded):
        adds = {v: format_settings(load_setup(discover(runs[v]))).add_eos for v in ("0.15.2", "0.16.0")}
        assert adds == {"0.15.2": False, "0.16.0": True}
        assert (codes(runs["0.16.0"], "C213"), codes(runs["0.16.1"], "C213")) == (["error"], [])


@pytest.mark.slow
def test_c215_trl_patches_the_template_from_1_1(tmp_path: Path) -> None:
    """PATCHES_TEMPLATES: with assistant-only loss and Qwen3's stock template (no {% generation %} tags), TRL 1.0.0
    refuses the rows (no assistant tokens); 1.1.0 swaps in its tagged copy (sft_trainer.py:923) and trains on the
    replies, and saves the stock template with the tokenizer. The run 1.1.0 wrote gets no C215 (TRL 1.1 patches
    Qwen3's template, though the installed TRL is newer); the same run with a card recording 1.0.0 gets the error,
    as a user's 1.0.0 run that got past the check another way would."""
    old, _ = trl_end("template", PATCHES_TEMPLATES.ends[0])
    new, new_run = trl_end("template", PATCHES_TEMPLATES.ends[1])
    assert not old["ok"] and "no assistant tokens" in old["error"]
    assert new["ok"] and 0 < new["labelled"] < new["tokens"]
    assert (new_run / "chat_template.jinja").read_text() == QWEN3.read_text()
    assert load_setup(discover(new_run)).versions["trl"] == "1.1.0"
    assert codes(new_run, "C215") == []
    old_run = _copy(new_run, tmp_path / "1.0.0", ("TRL", PATCHES_TEMPLATES.ends[0]))
    assert codes(old_run, "C215") == ["error"]


@pytest.mark.slow
def test_c218_grad_accumulation_normalised_from_transformers_4_46(tmp_path: Path) -> None:
    """GRAD_ACCUM_FIXED: one SGD step on a 5-token and a 57-token row, as one batch and as two accumulated
    micro-batches. transformers 4.45.2 averages the loss per micro-batch (trainer.py:3520 divides each by the
    accumulation steps), so the updates differ; 4.46.0 counts the batch's tokens first (trainer.py:5033
    get_batch_samples, num_items_in_batch) and they agree. Both runs record their version in the Trainer's card."""
    old, old_run = _end("grad_accum_ends.py", f"transformers-{GRAD_ACCUM_FIXED.ends[0]}")
    new, new_run = _end("grad_accum_ends.py", f"transformers-{GRAD_ACCUM_FIXED.ends[1]}")
    assert (old["transformers"], new["transformers"]) == GRAD_ACCUM_FIXED.ends
    assert old["gap"] > 0.1 and new["gap"] < 1e-4
    for run in (old_run, new_run):
        (run / "train.jsonl").write_text('{"text": "Once upon a time"}\n')
    assert load_setup(discover(old_run)).versions["transformers"] == "4.45.2"
    assert codes(old_run, "C218") == ["warning"]
    assert codes(new_run, "C218") == []


@pytest.mark.slow
def test_c217_reentrant_checkpointing_trains_the_adapter_from_transformers_5() -> None:
    """TF_INPUT_GRADS: a get_peft_model LoRA under the Trainer with reentrant checkpointing. transformers 4.57.6's
    gradient_checkpointing_enable leaves the inputs without grad, so the first backward fails and lora_B keeps its
    zeros; 5.0.0's calls enable_input_require_grads() and the step moves it. Both record the version in the card."""
    old, old_run = _end("checkpointing_ends.py", f"transformers-{TF_INPUT_GRADS.ends[0]}")
    new, new_run = _end("checkpointing_ends.py", f"transformers-{TF_INPUT_GRADS.ends[1]}")
    assert (old["transformers"], new["transformers"]) == TF_INPUT_GRADS.ends
    assert "does not require grad" in old["error"] and old["lora_b_max"] == 0.0
    assert new["error"] is None and new["lora_b_max"] > 0
    for run in (old_run, new_run):
        (run / "train.jsonl").write_text('{"text": "Once upon a time"}\n')
    assert (codes(old_run, "C217"), codes(new_run, "C217")) == (["error"], [])
