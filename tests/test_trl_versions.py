"""Setup rules that hold on real TRL runs: the versions a run records (its model card), the packing rule's TRL window
(C205), and the base compared with the adapter's record by content, not name (X404).

The runs are real ``SFTTrainer.train()`` runs on the bundled stories260K base (tests/trl_run.py): packed
prompt/completion rows, completion-only loss, LoRA on every linear layer; the adapter records a hub id as its base
while diagnose is given a local copy under another folder name, as most users run it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gradian.diagnose.api import diagnose_full
from gradian.diagnose.baseid import compare_bases
from gradian.diagnose.settings import DiagnoseSettings
from gradian.run import discover, load_setup
from gradian.run.versions import card_versions
from test_diagnose_helpers import STORIES

trl = pytest.importorskip("trl")
pytest.importorskip("datasets")

HUB_ID = "example-org/stories260K"  # what the adapter records; not in any local cache, so only content is compared


@pytest.fixture(scope="module")
def packed_run(tmp_path_factory) -> Path:
    from trl_run import make_trl_run

    return make_trl_run(tmp_path_factory.mktemp("trl-packed") / "run", packing=True, base_name=HUB_ID)


@pytest.fixture(scope="module")
def local_base(tmp_path_factory) -> Path:
    """stories260K copied under another folder name: a user's local copy of the hub model the adapter names."""
    dst = tmp_path_factory.mktemp("models") / "my-stories-copy"
    shutil.copytree(STORIES, dst)
    return dst


def diag(**kw):
    fs, notes, _ = diagnose_full(settings=DiagnoseSettings(), **kw)
    assert not [n for n in notes if "internal error" in n.reason], notes
    return fs


def _inputs(run: Path) -> dict[str, Path]:
    return {"run": run, "train": run / "train.jsonl", "eval": run / "eval.jsonl"}


def _with_card_trl(run: Path, out: Path, version: str | None) -> Path:
    """A copy of ``run`` whose model cards say TRL ``version`` (None: no model card at all)."""
    shutil.copytree(run, out)
    for card in out.rglob("README.md"):
        if version is None:
            card.unlink()
        else:
            lines = card.read_text("utf-8").splitlines()
            card.write_text("\n".join(f"- TRL: {version}" if ln.startswith("- TRL:") else ln for ln in lines))
    return out


def test_card_versions_read_trl_trainer_and_axolotl_cards(tmp_path: Path) -> None:
    cases = {
        "trl": "## Training procedure\n\n### Framework versions\n\n- PEFT 0.21.2\n- TRL: 1.16.0\n"
        "- Pytorch: 2.13.0+cpu\n",
        "hf": "### Framework versions\n\n- Transformers 4.46.1\n- Pytorch 2.5.1+cu124\n- Datasets 3.1.0\n",
        "axolotl": "<details><summary>See axolotl config</summary>\n\naxolotl version: `0.9.1.post1`\n```yaml\n",
        "elsewhere": "# Notes\n\n- TRL: 9.9.9 (a list outside Framework versions is not a record)\n- TRL: 9.9.9\n",
    }
    got = {}
    for name, text in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text(text)
        got[name] = {v.package: v.version for v in card_versions(tmp_path / name / "README.md")}
    assert got == {
        "trl": {"peft": "0.21.2", "trl": "1.16.0", "torch": "2.13.0+cpu"},
        "hf": {"transformers": "4.46.1", "torch": "2.5.1+cu124", "datasets": "3.1.0"},
        "axolotl": {"axolotl": "0.9.1.post1"},
        "elsewhere": {},
    }


def test_versions_read_from_the_runs_model_card(packed_run: Path) -> None:
    import transformers

    setup = load_setup(discover(packed_run))
    assert setup.versions["trl"] == trl.__version__
    assert setup.versions["transformers"] == transformers.__version__
    assert setup.sources["versions.trl"] == "run/README.md: Framework versions"
    (note,) = [n for n in setup.notes if n.startswith("versions recorded by the run:")]
    assert f"trl {trl.__version__}" in note


RUNS = Path(__file__).parent / "fixtures" / "runs"


@pytest.mark.parametrize(
    ("fixture", "card", "want"),
    [
        ("llamafactory_run", "### Framework versions\n\n- PEFT 0.15.2\n- Transformers 4.52.4\n- Pytorch 2.7.1\n",
         {"transformers": "4.52.4", "torch": "2.7.1"}),
        ("axolotl", "<details><summary>See axolotl config</summary>\n\naxolotl version: `0.9.1.post1`\n",
         {"axolotl": "0.9.1.post1"}),
    ],
)  # fmt: skip
def test_versions_of_axolotl_and_llamafactory_runs(fixture: str, card: str, want: dict, tmp_path: Path) -> None:
    """Axolotl and LLaMA-Factory write the model card through the transformers Trainer (Axolotl adds its version
    line); trainer_state.json and their logs record no version. Without a card the setup says none was recorded."""
    run = tmp_path / fixture
    shutil.copytree(RUNS / fixture, run)
    bare = load_setup(discover(run))
    assert "transformers" not in bare.versions and "axolotl" not in bare.versions
    (run / "README.md").write_text(card)
    setup = load_setup(discover(run))
    assert {k: setup.versions[k] for k in want} == want
    assert all(setup.sources[f"versions.{k}"].endswith("/README.md: " + ("axolotl version" if k == "axolotl" else
               "Framework versions")) for k in want)  # fmt: skip


@pytest.mark.slow
def test_report_json_carries_the_runs_versions(packed_run: Path, tmp_path: Path) -> None:
    from gradian.pipeline import attribute_and_report

    eval_file = Path(__file__).resolve().parents[1] / "examples" / "stories260k" / "data" / "eval.jsonl"
    attribute_and_report(run=packed_run, train=packed_run / "train.jsonl", eval=eval_file, base=str(STORIES),
                         out=tmp_path / "out")  # fmt: skip
    versions = json.loads((tmp_path / "out" / "report.json").read_text())["settings"]["versions"]
    assert versions["trl"] == {"version": trl.__version__, "source": "run/README.md: Framework versions"}


def test_installed_trl_keeps_the_completion_mask_when_packing() -> None:
    """The fact C205's window rests on, asked of the installed TRL (>= 0.20): a packed batch of prompt/completion
    rows keeps -100 on the prompt tokens."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from gradian.run.versions import parse_version
    from realsets import stories

    assert parse_version(trl.__version__) >= (0, 20)
    args = SFTConfig(output_dir="unused", report_to=[], use_cpu=True, packing=True, max_length=512,
                     per_device_train_batch_size=2)  # fmt: skip
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(str(STORIES)), args=args,
                         train_dataset=Dataset.from_list(stories()[:40]),
                         processing_class=AutoTokenizer.from_pretrained(str(STORIES)))  # fmt: skip
    labels = next(iter(trainer.get_train_dataloader()))["labels"]
    assert 0 < int((labels != -100).sum()) < labels.numel()


def test_clean_packed_trl_run_with_a_local_base_has_no_error(packed_run: Path, local_base: Path) -> None:
    assert json.loads((packed_run / "adapter_config.json").read_text())["base_model_name_or_path"] == HUB_ID
    fs = diag(**_inputs(packed_run), base=str(local_base))
    assert [(f.code, f.message) for f in fs if f.severity.value == "error"] == []
    assert "C205" not in {f.code for f in fs}
    (x404,) = [f for f in fs if f.code == "X404"]
    assert x404.severity.value == "info"  # only the name differs
    assert "the 35 LoRA target shapes" in x404.evidence["compared"]  # 5 layers x 7 linear modules


def test_packing_error_below_trls_window(packed_run: Path, tmp_path: Path) -> None:
    """TRL before 0.20 packed input_ids alone (trl/trainer/sft_trainer.py at tag v0.19.1: ``select_columns(
    "input_ids")`` before ``pack_dataset``; trl#3749, first in v0.20.0, keeps the masks). This run dir is the real
    TRL run above with its model cards edited to say TRL 0.19.1: it checks that a run recording an older TRL gets the
    error and one recording no TRL version gets only a note. The real TRL 0.19.1 and 0.20.0 runs are in
    test_version_ends.py."""
    old = _with_card_trl(packed_run, tmp_path / "old", "0.19.1")
    (c205,) = [f for f in diag(**_inputs(old), base=str(STORIES), select=["C205"])]
    assert c205.severity.value == "error" and "TRL 0.19.1" in c205.message
    assert c205.evidence["version_window"].startswith("TRL >= 0.20 keeps the completion/assistant mask")
    unknown = _with_card_trl(packed_run, tmp_path / "unknown", None)
    for pickled in unknown.rglob("training_args.bin"):
        pickled.unlink()
    args = json.loads((unknown / "training_args.json").read_text())
    assert args.pop("packing_strategy") == "bfd"  # a name TRL uses from 0.20: it alone would settle the window
    (unknown / "training_args.json").write_text(json.dumps(args))
    assert [f.severity.value for f in diag(**_inputs(unknown), base=str(STORIES), select=["C205"])] == ["info"]


def test_packing_strategy_implies_the_trl_window_without_a_card(packed_run: Path, tmp_path: Path) -> None:
    """No model card (a run saved without checkpoints writes PEFT's card only): the packing_strategy the dumped
    SFTConfig holds tells the TRL apart, "bfd" from 0.20 on, "ffd" in 0.19 only (TRL's sft_config.py at those tags).
    The "ffd" case is this run's training_args.json edited to hold 0.19's name."""
    bare = _with_card_trl(packed_run, tmp_path / "bare", None)
    setup = load_setup(discover(bare))
    assert "trl" not in setup.versions and setup.version_ranges["trl"].low == (0, 20)
    assert diag(**_inputs(bare), base=str(STORIES), select=["C205"]) == []
    args = json.loads((bare / "training_args.json").read_text())
    (bare / "training_args.json").write_text(json.dumps({**args, "packing_strategy": "ffd"}))
    (c205,) = diag(**_inputs(bare), base=str(STORIES), select=["C205"])
    assert c205.severity.value == "error" and "implied by training_args.json: packing_strategy 'ffd'" in c205.message


def test_pad_is_eos_window_is_trl_0_16_1(packed_run: Path, tmp_path: Path) -> None:
    """TRL 0.16.0 still used transformers' collator, which masks padding by id (EOS included when pad == EOS);
    trl#3200, first in v0.16.1, pads labels by position. The run's cards edited to each version."""
    assert json.loads((packed_run / "tokenizer_config.json").read_text())["pad_token"] == "</s>"  # pad == EOS
    got = {}
    for version in ("0.16.0", "0.16.1"):
        run = _with_card_trl(packed_run, tmp_path / version, version)
        got[version] = [f.severity.value for f in diag(**_inputs(run), base=str(STORIES), select=["C213"])]
    assert got == {"0.16.0": ["error"], "0.16.1": []}


def _other_base(out: Path, hidden: int = 96, layers: int = 6) -> Path:
    """A real Llama checkpoint with stories260K's module names at other sizes (default: hidden 96, 6 layers)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    cfg = AutoConfig.from_pretrained(str(STORIES))
    if hidden != cfg.hidden_size:
        cfg.hidden_size, cfg.intermediate_size, cfg.head_dim = hidden, 256, hidden // cfg.num_attention_heads
    cfg.num_hidden_layers = layers
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(STORIES)).save_pretrained(str(out))
    return out


def test_base_of_other_shapes_is_an_error(packed_run: Path, tmp_path: Path) -> None:
    other = _other_base(tmp_path / "stories260K")  # the same folder name as the recorded hub id
    fs = diag(**_inputs(packed_run), base=str(other), select=["X404"])
    assert [f.severity.value for f in fs] == ["error"]
    assert "do not fit the base given" in fs[0].message
    assert fs[0].evidence["shape_diffs"] and fs[0].evidence["missing_modules"] == []
    shallow = _other_base(tmp_path / "shallow" / "stories260K", hidden=64, layers=3)  # same widths, 3 of 5 layers
    fs = diag(**_inputs(packed_run), base=str(shallow), select=["X404"])
    assert [f.severity.value for f in fs] == ["error"] and fs[0].evidence["shape_diffs"] == []
    assert fs[0].message.startswith("the base given has no weight for 14 LoRA target modules")


def test_bases_compared_by_config_shapes_and_weights(packed_run: Path, tmp_path: Path) -> None:
    """Both bases local: the same content under two names is the same base (down to the weights' hash); other
    weights of the same shapes are a warning; another architecture is an error from the configs alone."""
    import torch
    from transformers import AutoModelForCausalLM

    recorded, copy = tmp_path / "a", tmp_path / "b"
    shutil.copytree(STORIES, recorded)
    shutil.copytree(STORIES, copy)
    config = json.loads((STORIES / "config.json").read_text())
    weights = packed_run / "adapter_model.safetensors"
    same = compare_bases(str(recorded), str(copy), config, weights, False)
    assert not same.mismatched and same.same_weights is True
    assert [c.split(" (")[0] for c in same.compared] == ["config", "the 35 LoRA target shapes", "the weights' sha256"]

    model = AutoModelForCausalLM.from_pretrained(str(copy))
    with torch.no_grad():
        model.model.norm.weight.add_(0.01)
    model.save_pretrained(str(copy))
    assert compare_bases(str(recorded), str(copy), config, weights, False).same_weights is False
    fs = diag(**_inputs(packed_run), base=str(copy), select=["X404"])
    assert [f.severity.value for f in fs] == ["info"]  # the adapter records the hub id: the copy's hash is unknown

    other = dict(config, vocab_size=1024)
    cmp = compare_bases(str(recorded), str(copy), other, None, False)
    assert cmp.config_diffs == [("vocab_size", 512, 1024)]
