"""The seven named failure modes, each built like a user's real run (JSONL + TRL/Axolotl config +
trainer_state.json in a dir) and run through the CLI; plus the CLI surface (rules, explain, formats, exit codes,
settings, select/ignore, --set)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from gradian.cli import main
from test_diagnose_helpers import STORIES

pytestmark = pytest.mark.skipif(not STORIES.is_dir(), reason="bundled stories260k tokenizer missing")

WORDS = "the cat sat on a mat while dogs ran far and wide over green hills under blue skies".split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)) + "."


def rows(n: int, seed: int = 0, long_every: int = 0, eos: bool = True) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        comp = " " + sentence(rng, 8 if not (long_every and i % long_every == 0) else 400) + (" </s>" if eos else "")
        out.append({"prompt": f"Story {i}: {sentence(rng, 10)}\nContinue:", "completion": comp})
    return out


def trainer_state(n_steps: int = 40, epochs: float = 2.0) -> dict:
    hist = [{"step": s, "epoch": epochs * s / n_steps, "loss": 2.0 - s / (2 * n_steps), "grad_norm": 0.6,
             "learning_rate": 2e-4} for s in range(2, n_steps + 1, 2)]  # fmt: skip
    return {"log_history": hist, "max_steps": n_steps, "global_step": n_steps}


def make_run(tmp: Path, train: list[dict], config_name: str, config: dict, *, eval_rows=None, state=None) -> Path:
    d = tmp / "run"
    d.mkdir()
    (d / "train.jsonl").write_text("\n".join(json.dumps(r) for r in train) + "\n")
    if eval_rows is not None:
        (d / "eval.jsonl").write_text("\n".join(json.dumps(r) for r in eval_rows) + "\n")
    text = json.dumps(config) if config_name.endswith(".json") else yaml.safe_dump(config)
    (d / config_name).write_text(text)
    (d / "trainer_state.json").write_text(json.dumps(state or trainer_state()))
    adapter = {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "target_modules": "all-linear",
               "base_model_name_or_path": str(STORIES), "task_type": "CAUSAL_LM"}  # fmt: skip
    (d / "adapter_config.json").write_text(json.dumps(adapter))
    return d


def trl_config(**kw) -> dict:
    cfg = {"learning_rate": 2e-4, "num_train_epochs": 2, "per_device_train_batch_size": 4,
           "gradient_accumulation_steps": 2, "max_length": 512, "completion_only_loss": True, "packing": False,
           "bf16": True, "eval_strategy": "no", "output_dir": "out", "logging_steps": 2}  # fmt: skip
    cfg.update(kw)
    return cfg


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def diagnose_json(capsys, d: Path, *extra: str) -> tuple[int, list[dict]]:
    args = ["diagnose", "--run", str(d), "--train", str(d / "train.jsonl"), "--base", str(STORIES), "--format", "json"]
    if (d / "eval.jsonl").is_file():
        args += ["--eval", str(d / "eval.jsonl")]
    code, out, err = run_cli(capsys, *args, *extra)
    assert code in (0, 1), err
    return code, json.loads(out)


def by_name(findings: list[dict], name: str) -> list[dict]:
    return [f for f in findings if f["name"] == name]


def test_truncated_completions(tmp_path, capsys):
    d = make_run(tmp_path, rows(200, long_every=10), "training_args.json", trl_config(max_length=128))
    code, fs = diagnose_json(capsys, d)
    cut = by_name(fs, "completion_cut")
    assert code == 1 and cut and cut[0]["severity"] == "error"
    assert set(range(0, 200, 10)) <= set(cut[0]["evidence"]["rows"])
    assert by_name(fs, "truncation")[0]["evidence"]["key"] == "max_length"


def test_loss_mask_covers_prompt(tmp_path, capsys):
    cfg = {"base_model": str(STORIES), "adapter": "lora", "lora_r": 16, "lora_alpha": 32, "lora_target_linear": True,
           "sequence_len": 512, "train_on_inputs": True, "learning_rate": 2e-4, "num_epochs": 2, "micro_batch_size": 4,
           "gradient_accumulation_steps": 2, "datasets": [{"path": "train.jsonl", "type": "completion"}],
           "val_set_size": 0.05, "bf16": True}  # fmt: skip
    d = make_run(tmp_path, rows(200), "axolotl.yml", cfg)
    _, fs = diagnose_json(capsys, d)
    f = by_name(fs, "loss_on_prompt")
    assert f and f[0]["evidence"]["key"] == "masking" and "train_on_inputs" in f[0]["evidence"]["source"]


def test_instruction_layout_in_text_rows_learned_from_the_file(tmp_path, capsys):
    """Axolotl `type: completion` text rows in a "Problem:/Solution:" layout (no known family): C216 and D130 learn the
    markers from the file; the bundled stories and GSM8K-style prompt/completion rows do not trip them."""
    cfg = {"base_model": str(STORIES), "adapter": "lora", "lora_r": 16, "lora_alpha": 32, "lora_target_linear": True,
           "sequence_len": 512, "train_on_inputs": False, "learning_rate": 2e-4, "num_epochs": 2,
           "micro_batch_size": 4, "gradient_accumulation_steps": 2, "val_set_size": 0.05, "bf16": True,
           "datasets": [{"path": "train.jsonl", "type": "completion"}]}  # fmt: skip
    text = [{"text": f"Problem:\n{r['prompt']}\n\nSolution:\n{r['completion'].strip()}"} for r in rows(200)]
    d = make_run(tmp_path, text, "axolotl.yml", cfg)
    _, fs = diagnose_json(capsys, d)
    (c216,) = by_name(fs, "loss_on_prompt")
    assert {"Problem:", "Solution:"} <= set(c216["evidence"]["markers"]) and c216["evidence"]["count"] == 200
    assert by_name(fs, "template_in_text")[0]["evidence"]["count"] == 200


def test_no_eos(tmp_path, capsys):
    cfg = {"learning_rate": 2e-4, "num_train_epochs": 2, "per_device_train_batch_size": 4, "output_dir": "out",
           "gradient_accumulation_steps": 2, "eval_strategy": "no", "bf16": True}  # fmt: skip
    d = make_run(tmp_path, rows(200, eos=False), "training_args.json", cfg)
    code, fs = diagnose_json(capsys, d)
    f = by_name(fs, "missing_eos")
    assert code == 1 and f and f[0]["severity"] == "error" and len(f[0]["evidence"]["rows"]) == 200


def test_train_eval_contamination(tmp_path, capsys):
    tr = rows(200)
    for r in tr:
        r["completion"] = " " + " ".join(random.Random(r["prompt"]).choice(WORDS) for _ in range(25)) + " </s>"
    ev = [dict(tr[i]) for i in (3, 50, 120)] + rows(40, seed=9)
    d = make_run(tmp_path, tr, "training_args.json", trl_config(), eval_rows=ev)
    code, fs = diagnose_json(capsys, d)
    f = by_name(fs, "train_eval_overlap")
    assert code == 1 and f[0]["severity"] == "error" and {3, 50, 120} <= set(f[0]["evidence"]["rows"])


def test_full_ft_learning_rate_on_lora(tmp_path, capsys):
    d = make_run(tmp_path, rows(200), "training_args.json", trl_config(learning_rate=2e-5))
    _, fs = diagnose_json(capsys, d)
    f = by_name(fs, "lr_for_full_ft")
    assert f and f[0]["evidence"]["key"] == "learning_rate" and f[0]["evidence"]["value"] == 2e-5
    assert f[0]["fix"]["key"] == "learning_rate"


def test_twelve_epochs_over_400_rows_is_error(tmp_path, capsys):
    d = make_run(tmp_path, rows(400), "training_args.json", trl_config(num_train_epochs=12))
    code, fs = diagnose_json(capsys, d)
    f = by_name(fs, "epochs_overfit")
    assert code == 1 and f[0]["severity"] == "error" and f[0]["evidence"]["value"] == 12


def test_packing_with_completion_only(tmp_path, capsys):
    """An error where the run's model card records a TRL that drops the mask when packing (< 0.20); a note where
    the run records no TRL version."""
    d = make_run(tmp_path, rows(200), "training_args.json", trl_config(packing=True))
    _, fs = diagnose_json(capsys, d)
    f = by_name(fs, "packing_with_completion_mask")
    assert f[0]["severity"] == "info" and "recorded no TRL version" in f[0]["message"]
    (d / "README.md").write_text("### Framework versions\n\n- TRL: 0.19.1\n- Transformers: 4.53.3\n")
    code, fs = diagnose_json(capsys, d)
    f = by_name(fs, "packing_with_completion_mask")
    assert code == 1 and f[0]["severity"] == "error" and f[0]["evidence"]["key"] == "packing"
    assert "TRL 0.19.1" in f[0]["message"]


# ---- CLI surface ---------------------------------------------------------------------------------------------------
def test_clean_run_exit_0_and_formats(tmp_path, capsys):
    d = make_run(tmp_path, rows(200), "training_args.json", trl_config(), eval_rows=rows(30, seed=5))
    code, fs = diagnose_json(capsys, d)
    assert code == 0, [f["code"] for f in fs if f["severity"] == "error"]
    assert all({"code", "name", "severity", "message", "evidence", "fix"} <= set(f) for f in fs)
    code, out, _ = run_cli(capsys, "diagnose", "--run", str(d), "--train", str(d / "train.jsonl"), "--base",
                           str(STORIES), "--format", "markdown")  # fmt: skip
    assert code == 0 and out.startswith("# gradian diagnose")
    md = tmp_path / "r.txt"
    code, _, _ = run_cli(capsys, "diagnose", "--run", str(d), "--train", str(d / "train.jsonl"), "--out", str(md))
    assert code == 0 and "error(s)" in md.read_text()


def test_fail_on_select_ignore_set(tmp_path, capsys):
    d = make_run(tmp_path, rows(200), "training_args.json", trl_config(learning_rate=2e-5))
    base = ["diagnose", "--run", str(d), "--train", str(d / "train.jsonl"), "--base", str(STORIES)]
    assert run_cli(capsys, *base)[0] == 0  # only a warning
    assert run_cli(capsys, *base, "--fail-on", "warning")[0] == 1
    assert run_cli(capsys, *base, "--fail-on", "warning", "--ignore", "lr_for_full_ft,C219")[0] in (0, 1)
    code, out, _ = run_cli(capsys, *base, "--format", "json", "--select", "C201")
    assert [f["code"] for f in json.loads(out)] == ["C201"]
    code, out, _ = run_cli(capsys, *base, "--format", "json", "--select", "C201", "--set", "lr_for_full_ft.max_lr=1e-5")
    assert json.loads(out) == []
    assert run_cli(capsys, *base, "--set", "nope.x=1")[0] == 2
    assert run_cli(capsys, *base, "--select", "Z999")[0] == 2
    assert run_cli(capsys, "diagnose", "--train", str(tmp_path / "missing.jsonl"))[0] == 2


def test_settings_file(tmp_path, capsys, monkeypatch):
    d = make_run(tmp_path, rows(200), "training_args.json", trl_config(num_train_epochs=12))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gradian.toml").write_text('[diagnose]\nignore = ["epochs_overfit"]\n')
    code, fs = diagnose_json(capsys, d)
    assert not by_name(fs, "epochs_overfit")
    (tmp_path / "gradian.toml").unlink()
    (tmp_path / "pyproject.toml").write_text("[tool.gradian.diagnose.epochs_overfit]\nerror_epochs = 20\n"
                                             "small_epochs = 20\n")  # fmt: skip
    code, fs = diagnose_json(capsys, d)
    assert by_name(fs, "epochs_overfit")[0]["severity"] == "warning"


def test_rules_and_explain(capsys):
    code, out, _ = run_cli(capsys, "rules", "--format", "json")
    rules = json.loads(out)
    assert code == 0 and len(rules) >= 50 and {"code", "name", "severity", "cause", "thresholds"} <= set(rules[0])
    assert {r["cause"] for r in rules} == {"mechanical", "content", "setup"}
    code, out, _ = run_cli(capsys, "rules")
    assert code == 0 and "D106" in out and "mechanical" in out
    code, out, _ = run_cli(capsys, "diagnose", "--explain", "D106")
    assert code == 0 and "truncation" in out and "warn_percent" in out
    assert "Why it matters" in run_cli(capsys, "diagnose", "--explain", "epochs_overfit")[1]
    assert run_cli(capsys, "diagnose", "--explain", "nope")[0] == 2


def test_no_tokenizer_skips_token_rules_with_note(tmp_path, capsys):
    d = make_run(tmp_path, rows(200, long_every=10), "training_args.json", trl_config(max_length=128))
    ac = {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "target_modules": "all-linear",
          "base_model_name_or_path": "org/not-local"}  # fmt: skip
    (d / "adapter_config.json").write_text(json.dumps(ac))
    code, out, _ = run_cli(capsys, "diagnose", "--run", str(d), "--train", str(d / "train.jsonl"))
    assert "token-level check skipped" in out and "D107" in out
    assert "D124" in out  # the character-level estimate still runs


def test_chat_rows_without_template_still_checked(tmp_path, capsys):
    """stories260K has no chat template: one D127 error, and the schema, role and duplicate checks still run."""
    rng = random.Random(0)
    rows_ = [{"messages": [{"role": "user", "content": sentence(rng, 9)},
                           {"role": "assistant", "content": sentence(rng, 12)}]} for _ in range(150)]  # fmt: skip
    rows_ += [rows_[0]] * 10  # duplicates
    rows_[20] = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    d = make_run(tmp_path, rows_, "training_args.json", trl_config(completion_only_loss=None))
    code, fs = diagnose_json(capsys, d)
    assert code == 1
    (d127,) = by_name(fs, "unformattable")
    assert d127["severity"] == "error" and "no chat template" in d127["message"]
    assert "cannot be formatted with this tokenizer" in d127["message"]
    assert 20 in by_name(fs, "roles")[0]["evidence"]["rows"]
    assert by_name(fs, "duplicates")
    code, out, err = run_cli(capsys, "diagnose", "--run", str(d), "--train", str(d / "train.jsonl"), "--base",
                             str(STORIES))  # fmt: skip
    assert code == 1 and "Traceback" not in out + err and "D127" in out and "see D127" in out


def test_rows_named_by_editor_line(tmp_path, capsys, monkeypatch):
    """A bad JSONL line after a blank line is named by its editor line in text output; JSON keeps 0-based rows."""
    monkeypatch.chdir(tmp_path)
    good = [json.dumps({"prompt": f"Q{i} {sentence(random.Random(i), 6)}", "completion": " ok."}) for i in range(3)]
    f = Path("bad.jsonl")
    f.write_text("\n".join([good[0], good[1], "", '{"prompt": "x", "completion"', good[2]]) + "\n")
    code, out, err = run_cli(capsys, "diagnose", "--train", str(f), "--select", "D101")
    assert code == 1 and f"lines in {f}: 4" in out, out
    code, out, err = run_cli(capsys, "diagnose", "--train", str(f), "--select", "D101", "--format", "json")
    assert json.loads(out)[0]["evidence"]["rows"] == [2]


def test_editor_lines_csv_and_json(tmp_path):
    from gradian.diagnose.lines import describe_rows

    c = tmp_path / "t.csv"
    c.write_text('prompt,completion\n"two\nlines",a\n\nb,c\n')
    assert describe_rows([0, 1], str(c)) == (f"lines in {c}", ["2", "5"])
    j = tmp_path / "t.json"
    j.write_text("[]")
    assert describe_rows([0], str(j)) == (f"rows in {j} (1-based)", ["1"])
    assert describe_rows([0], "missing.jsonl") == ("rows in missing.jsonl (0-based)", ["0"])


def test_python_api(tmp_path):
    import gradian

    d = make_run(tmp_path, rows(400), "training_args.json", trl_config(num_train_epochs=12))
    fs = gradian.diagnose(run=d, train=d / "train.jsonl", base=str(STORIES))
    assert any(f.name == "epochs_overfit" and f.severity.value == "error" for f in fs)


def test_droprows(tmp_path):
    from gradian.diagnose.droprows import main as drop

    src = tmp_path / "t.jsonl"
    src.write_text("\n".join(json.dumps({"i": i}) for i in range(5)) + "\n")
    drop([str(src), "--rows", "1,3", "-o", str(tmp_path / "o.jsonl")])
    assert [json.loads(x)["i"] for x in (tmp_path / "o.jsonl").read_text().splitlines()] == [0, 2, 4]
