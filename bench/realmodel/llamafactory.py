r"""One real LLaMA-Factory run analysed by Gradian as a user would: the refusal case of the real-model
suite (bench/realmodel/suite.py, ``refusals_s0``) trained by LLaMA-Factory 0.9.5's own ``llamafactory-cli train``.

Data: a subset of refusals_s0/train.jsonl (144 GSM8K rows + 16 planted refusals) to keep CPU time down: the 16
planted rows plus the first 80 other rows, in file order (96 rows). LLaMA-Factory reads them as a ShareGPT dataset
with OpenAI-style ``messages`` (data/refusals.json + data/dataset_info.json); Gradian reads the same 96 rows as
conversational prompt/completion JSONL (train.jsonl, the format of the suite's TRL runs). Eval: refusals_s0's 40
benign prompts (prompts only).

Commands (from the repo root; every heavy one under ``nice -n 19`` with ``OMP_NUM_THREADS=1``; the LLaMA-Factory venv
is built by the LF section of bench/frameworks/make_venvs.sh at /work/venv-lf)::

    python bench/realmodel/llamafactory.py data          # W/train.jsonl, W/data/, W/planted.json, W/config.yaml
    python bench/realmodel/llamafactory.py train         # llamafactory-cli train W/config.yaml -> W/run
    /work/venv-lf/bin/python bench/realmodel/llamafactory.py lf-tokens   # LF's get_dataset rows -> W/lf_tokens.json
    .venv/bin/python bench/realmodel/llamafactory.py tokens     # gradian tokens vs W/lf_tokens.json
    .venv/bin/python bench/realmodel/llamafactory.py diagnose   # gradian diagnose -> W/diagnose.{log,json}
    .venv/bin/python bench/realmodel/llamafactory.py attribute  # gradian attribute -> W/attr_prompts
    .venv/bin/python bench/realmodel/llamafactory.py diagnose:_head attribute:_head   # again, at a later commit
    python bench/realmodel/llamafactory.py train-drop           # retrain without the 16 planted rows
    python bench/realmodel/llamafactory.py train-drop-named     # ... without the verdict's drop_rows
    python bench/realmodel/llamafactory.py train-drop-random    # ... without 8 and 16 random math rows
    .venv/bin/python bench/realmodel/llamafactory.py truth      # W/truth.json: what each retrain brings back
    .venv/bin/python bench/realmodel/llamafactory.py score      # bench/results/realmodel_llamafactory.json

where W = bench/work/realmodel/lf_refusals_s0. ``train`` runs (niced)::

    PYTHONPATH=bench/frameworks/stubs HF_HUB_OFFLINE=1 /work/venv-lf/bin/llamafactory-cli train W/config.yaml

(the retrains run the same with W/config_drop_*.yaml), and the Gradian steps run, as a user types them::

    gradian diagnose --run W/run --train W/train.jsonl --base examples/smollm2/model
    gradian attribute --run W/run --base examples/smollm2/model --train W/train.jsonl \
        --eval bench/work/realmodel/refusals_s0/eval_prompts.jsonl --out W/attr_prompts

bench/results/realmodel_llamafactory.md reads the numbers. LLaMA-Factory trained on the CPU with this config as is.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "bench/work/realmodel/refusals_s0"
W = ROOT / "bench/work/realmodel/lf_refusals_s0"
RUN = W / "run"
MODEL = ROOT / "examples/smollm2/model"
VENV_LF = Path(os.environ.get("VENV_LF", "/work/venv-lf"))
GRADIAN = ROOT / ".venv/bin/gradian"
RESULTS = ROOT / "bench/results"
N_OTHER = 80
sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import REGRESSED, item_nlls  # noqa: E402  (the suite's truth: the same items, the same NLL)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "frameworks"))
from make_golden_llamafactory import MESSAGES_INFO  # noqa: E402  (the dataset_info entry the golden cases use)

TEMPLATE = "smollm2"  # LLaMA-Factory 0.9.5's template for SmolLM2 (src/llamafactory/data/template.py)
CONFIG = {
    "stage": "sft",
    "do_train": True,
    "model_name_or_path": str(MODEL),
    "finetuning_type": "lora",
    "lora_rank": 16,
    "lora_alpha": 32,
    "lora_target": "all",
    "dataset": "refusals",
    "dataset_dir": str(W / "data"),
    "template": TEMPLATE,
    "cutoff_len": 256,
    "overwrite_cache": True,
    "preprocessing_num_workers": None,
    "output_dir": str(RUN),
    "overwrite_output_dir": True,
    "learning_rate": 5.0e-4,
    "num_train_epochs": 2,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "lr_scheduler_type": "cosine",
    "logging_steps": 2,
    "save_strategy": "no",
    "bf16": False,
    "report_to": "none",
    "seed": 0,
    "plot_loss": False,
}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def nice_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def subset() -> tuple[list[dict[str, Any]], list[int], set[int]]:
    """refusals_s0's 96-row subset: its rows, their row numbers in refusals_s0 (file order) and the planted ones."""
    rows = read_jsonl(SRC / "train.jsonl")
    planted = set(json.loads((SRC / "planted.json").read_text())["rows"])
    other = [i for i in range(len(rows)) if i not in planted][:N_OTHER]
    keep = sorted(planted | set(other))  # file order
    return [rows[i] for i in keep], keep, planted


def planted_doc(keep: list[int], planted: set[int]) -> str:
    """W/planted.json of a subset run: the planted rows' numbers in the subset."""
    return json.dumps({
        "rows": [j for j, i in enumerate(keep) if i in planted],
        "source_rows": keep,
        "kind": "refusals",
        "seed": 0,
        "note": f"refusals_s0 subset: its {len(planted)} planted rows + the first {N_OTHER} others, file order",
    }, indent=1)  # fmt: skip


def data() -> None:
    """The 96-row subset, LLaMA-Factory's dataset and config, and Gradian's --train file."""
    import yaml

    sub, keep, planted = subset()
    (W / "data").mkdir(parents=True, exist_ok=True)
    with (W / "train.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in sub)
    lf = [{"messages": r["prompt"] + r["completion"]} for r in sub]
    (W / "data/refusals.json").write_text(json.dumps(lf, indent=1))
    (W / "data/dataset_info.json").write_text(
        json.dumps({"refusals": {"file_name": "refusals.json", **MESSAGES_INFO}}, indent=1)
    )
    with (W / "train_messages.jsonl").open("w") as f:  # the same rows as LLaMA-Factory's file, one a line
        f.writelines(json.dumps(r) + "\n" for r in lf)
    (W / "planted.json").write_text(planted_doc(keep, planted))
    (W / "config.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    # The counterfactual: the same run without the planted rows (truth for the verdict's expected_recovery).
    kept = [r for r, i in zip(lf, keep, strict=True) if i not in planted]
    (W / "data/refusals_drop_planted.json").write_text(json.dumps(kept, indent=1))
    info = {"refusals": {"file_name": "refusals.json", **MESSAGES_INFO},
            "refusals_drop_planted": {"file_name": "refusals_drop_planted.json", **MESSAGES_INFO}}  # fmt: skip
    (W / "data/dataset_info.json").write_text(json.dumps(info, indent=1))
    drop_cfg = {**CONFIG, "dataset": "refusals_drop_planted", "output_dir": str(W / "run_drop_planted")}
    (W / "config_drop_planted.yaml").write_text(yaml.safe_dump(drop_cfg, sort_keys=False))
    print(f"{len(sub)} rows, planted at", [j for j, i in enumerate(keep) if i in planted])


def niced(*cmd: str) -> list[str]:
    """``cmd`` under ``nice -n $BENCH_NICE`` (19 unless set)."""
    return ["nice", "-n", os.environ.get("BENCH_NICE", "19"), *cmd]


def run_trainer(cmd: list[str], env: dict[str, str], w: Path, tag: str, cwd: Path | None = None) -> None:
    """A trainer's command (run in ``cwd``), timed: its output in w/<tag>.log, seconds and exit code in
    w/<tag>_time.json."""
    t0 = time.time()
    got = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=cwd)
    (w / f"{tag}.log").write_text(got.stdout + got.stderr)
    (w / f"{tag}_time.json").write_text(json.dumps({"seconds": time.time() - t0, "rc": got.returncode}))
    print(tag, "rc", got.returncode, f"{time.time() - t0:.0f}s")


def train(config: str = "config.yaml", tag: str = "train") -> None:
    """``llamafactory-cli train config.yaml`` in its own venv (torchaudio stubbed), timed."""
    env = {**nice_env(), "PYTHONPATH": str(ROOT / "bench/frameworks/stubs"), "HF_HUB_OFFLINE": "1",
           "CUDA_VISIBLE_DEVICES": "", "DISABLE_VERSION_CHECK": "1"}  # fmt: skip
    run_trainer(niced(str(VENV_LF / "bin/llamafactory-cli"), "train", str(W / config)), env, W, tag)


def train_drop() -> None:
    """The retrain without the 16 planted rows (same config and seed): W/run_drop_planted."""
    train("config_drop_planted.yaml", "train_drop_planted")


def _train_without(tag: str, gone: set[int]) -> None:
    """The run retrained without rows ``gone`` (same config and seed): W/run_drop_<tag>."""
    import yaml

    rows = json.loads((W / "data/refusals.json").read_text())
    name = f"refusals_drop_{tag}"
    (W / f"data/{name}.json").write_text(json.dumps([r for i, r in enumerate(rows) if i not in gone]))
    info = json.loads((W / "data/dataset_info.json").read_text())
    info[name] = {"file_name": f"{name}.json", **MESSAGES_INFO}
    (W / "data/dataset_info.json").write_text(json.dumps(info, indent=1))
    cfg = {**CONFIG, "dataset": name, "output_dir": str(W / f"run_drop_{tag}")}
    (W / f"config_drop_{tag}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (W / f"drop_{tag}.json").write_text(json.dumps(sorted(gone)))
    train(f"config_drop_{tag}.yaml", f"train_drop_{tag}")


def train_drop_named() -> None:
    """The retrain without the rows the verdict names (report.json verdict.drop_rows): W/run_drop_named, the truth
    for verdict.expected_recovery."""
    _train_without("named", set(json.loads((W / "attr_prompts/report.json").read_text())["verdict"]["drop_rows"]))


def train_drop_random() -> None:
    """Noise floors: retrains without as many random non-planted rows as the named (8) and as the planted (16)
    rows (random.Random(7), as suite.py's seed + 7): W/run_drop_random8, W/run_drop_random16."""
    import random

    planted = set(json.loads((W / "planted.json").read_text())["rows"])
    named = json.loads((W / "attr_prompts/report.json").read_text())["verdict"]["drop_rows"]
    others = [i for i in range(len(read_jsonl(W / "train.jsonl"))) if i not in planted]
    for n in (len(named), len(planted)):
        _train_without(f"random{n}", set(random.Random(7).sample(others, n)))


def truth(w: Path = W) -> None:
    """Counterfactual truth on refusals_s0's reference items (the base model's replies): the share of the summed
    regression each retrain (``w/run_drop_*``) brings back, and its median per regressed item."""
    items = read_jsonl(SRC / "eval_refs.jsonl")
    base, ft = item_nlls(None, items), item_nlls(w / "run", items)
    res: dict[str, Any] = {"base": base, "finetuned": ft}
    reg = [i for i in range(len(items)) if ft[i] - base[i] > REGRESSED]
    res["regressed"] = reg
    res["regression"] = sum(ft[i] - base[i] for i in reg)
    for drop in ("planted", "named", "random8", "random16"):
        if (w / f"run_drop_{drop}/adapter_model.safetensors").is_file():
            r = res[f"drop_{drop}"] = item_nlls(w / f"run_drop_{drop}", items)
            if reg:
                res[f"recovery_drop_{drop}"] = sum(ft[i] - r[i] for i in reg) / res["regression"]
                res[f"median_drop_{drop}"] = statistics.median((ft[i] - r[i]) / (ft[i] - base[i]) for i in reg)
    (w / "truth.json").write_text(json.dumps(res, indent=1))
    print({k: v for k, v in res.items() if not isinstance(v, list)}, len(reg), "regressed")


def lf_tokens() -> None:
    """LLaMA-Factory's own tokenized rows (get_dataset, stage sft) for the run's config: W/lf_tokens.json.
    Run with the LLaMA-Factory venv's python."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("DISABLE_VERSION_CHECK", "1")
    here = Path(__file__).resolve().parent  # this file is llamafactory.py: keep it from shadowing the package
    sys.path[:] = [str(ROOT / "bench/frameworks/stubs"), *(p for p in sys.path if Path(p or ".").resolve() != here)]
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    args = {**CONFIG, "output_dir": str(W / "lf_tokens_out")}
    model_args, data_args, training_args, _, _ = get_train_args(args)
    tok_module = load_tokenizer(model_args)
    template = get_template_and_fix_tokenizer(tok_module["tokenizer"], data_args)
    ds = get_dataset(template, model_args, data_args, training_args, stage="sft", **tok_module)["train_dataset"]
    rows = [{"input_ids": list(s["input_ids"]), "labels": list(s["labels"])} for s in ds]
    (W / "lf_tokens.json").write_text(json.dumps(rows))
    print(len(rows), "rows from LLaMA-Factory's get_dataset")


def _gradian(args: list[str], log: Path) -> dict[str, Any]:
    cmd = niced(str(GRADIAN), *args)
    t0 = time.time()
    got = subprocess.run(cmd, env=nice_env(), capture_output=True, text=True)
    log.write_text(f"$ {' '.join(cmd)}\n" + got.stdout + got.stderr)
    return {"seconds": time.time() - t0, "rc": got.returncode, "stdout": got.stdout}


def _compare(got: list[dict[str, Any]], lf: list[dict[str, Any]]) -> dict[str, Any]:
    """Gradian's rows against LLaMA-Factory's: equal ids, equal labels, equal loss tokens, and the first difference."""
    ids_eq = [g["input_ids"] == r["input_ids"] for g, r in zip(got, lf, strict=False)]
    lab_eq = [g["labels"] == r["labels"] for g, r in zip(got, lf, strict=False)]
    loss_eq = [[t for t in g["labels"] if t != -100] == [t for t in r["labels"] if t != -100]
               for g, r in zip(got, lf, strict=False)]  # fmt: skip
    out: dict[str, Any] = {
        "rows": len(got), "lf_rows": len(lf), "input_ids_equal": sum(ids_eq), "labels_equal": sum(lab_eq),
        "loss_tokens_equal": sum(loss_eq), "n_loss_gradian": sum(t != -100 for g in got for t in g["labels"]),
        "n_loss_llamafactory": sum(t != -100 for r in lf for t in r["labels"]),
        "decisions": got[0].get("decisions") if got else None,
    }  # fmt: skip
    one_off = 0  # rows equal once the first token where LLaMA-Factory's ids differ is taken out of them
    for g, r in zip(got, lf, strict=False):
        at = next((k for k, (a, b) in enumerate(zip(g["input_ids"], r["input_ids"], strict=False)) if a != b), None)
        if at is not None and len(r["input_ids"]) == len(g["input_ids"]) + 1:
            cut = {k: r[k][:at] + r[k][at + 1 :] for k in ("input_ids", "labels")}
            one_off += cut["input_ids"] == g["input_ids"] and cut["labels"] == g["labels"]
    out["equal_but_one_lf_token"] = one_off
    first = next((i for i, ok in enumerate(ids_eq) if not ok), None)
    if first is not None:
        g, r = got[first]["input_ids"], lf[first]["input_ids"]
        at = next((k for k, (a, b) in enumerate(zip(g, r, strict=False)) if a != b), min(len(g), len(r)))
        out["first_mismatch"] = {"row": first, "position": at, "gradian": g[max(0, at - 3) : at + 4],
                                 "llamafactory": r[max(0, at - 3) : at + 4]}  # fmt: skip
    return out


def tokens() -> None:
    """``gradian tokens --format json`` against LF's rows: Gradian's --train file (prompt/completion) and the same rows
    as messages, each with the run dir alone (what a user points it at) and with --config W/config.yaml."""
    lf = json.loads((W / "lf_tokens.json").read_text())
    out: dict[str, Any] = {}
    for name in ("train.jsonl", "train_messages.jsonl"):
        for with_config in (False, True):
            key = name + (" --config" if with_config else "")
            args = ["tokens", "--run", str(RUN), "--base", str(MODEL), "--train", str(W / name), "--format", "json"]
            if with_config:
                args += ["--config", str(W / "config.yaml")]
            res = _gradian(args, W / f"tokens_{key.replace(' --', '_')}.log")
            if res["rc"] != 0:
                out[key] = {"rc": res["rc"]}
                continue
            out[key] = _compare(json.loads(res["stdout"])["rows"], lf)
    (W / "tokens_compare.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1)[:6000])


def _commit() -> str:
    """The Gradian commit the step ran (src/ is installed editable: the checkout's HEAD is the code that ran)."""
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def run_diagnose(w: Path, args: list[str], tag: str = "") -> None:
    """``gradian diagnose ARGS`` (text and JSON): w/diagnose<tag>.{log,json} and its seconds and commit."""
    base = ["diagnose", *args]
    res = _gradian(base, w / f"diagnose{tag}.log")
    json_res = _gradian([*base, "--format", "json"], w / f"diagnose{tag}_json.log")
    if json_res["rc"] in (0, 1, 2):
        (w / f"diagnose{tag}.json").write_text(json_res["stdout"])
    (w / f"diagnose{tag}_time.json").write_text(
        json.dumps({"seconds": res["seconds"], "rc": res["rc"], "commit": _commit()})
    )
    print("diagnose rc", res["rc"], f"{res['seconds']:.0f}s")


def run_attribute(w: Path, args: list[str], tag: str = "") -> None:
    """``gradian attribute ARGS --out w/attr_prompts<tag>``, its seconds and the commit before and after."""
    out = w / f"attr_prompts{tag}"
    commit = _commit()
    res = _gradian(["attribute", *args, "--out", str(out)], w / f"attr_prompts{tag}.log")
    out.mkdir(exist_ok=True)
    (out / "bench_time.json").write_text(
        json.dumps({"seconds": res["seconds"], "rc": res["rc"], "commit": commit, "commit_after": _commit()})
    )
    print("attribute rc", res["rc"], f"{res['seconds']:.0f}s")


def diagnose(tag: str = "") -> None:
    """``gradian diagnose`` on the run: W/diagnose<tag>.{log,json}."""
    run_diagnose(W, ["--run", str(RUN), "--train", str(W / "train.jsonl"), "--base", str(MODEL)], tag)


def attribute(tag: str = "") -> None:
    """``gradian attribute`` from the eval prompts: W/attr_prompts<tag>."""
    run_attribute(W, ["--run", str(RUN), "--base", str(MODEL), "--train", str(W / "train.jsonl"),
                      "--eval", str(SRC / "eval_prompts.jsonl")], tag)  # fmt: skip


def _auc(scores: dict[int, float], planted: set[int]) -> float | None:
    pos = [s for r, s in scores.items() if r in planted]
    neg = [s for r, s in scores.items() if r not in planted]
    if not pos or not neg:
        return None
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


FIRST_COMMIT = "10c3357"  # the Gradian commit the first diagnose / attribute ran (07:31-07:41 UTC, before tags)


def _score_attr(tag: str, w: Path = W) -> dict[str, Any]:
    """One ``gradian attribute`` (and the diagnose beside it) against the planted rows and the retrains."""
    rep = json.loads((w / f"attr_prompts{tag}/report.json").read_text())
    timing = json.loads((w / f"attr_prompts{tag}/bench_time.json").read_text())
    planted = set(json.loads((w / "planted.json").read_text())["rows"])
    v = rep.get("verdict") or {}
    named = set(v.get("drop_rows") or [])
    scores = {int(e["index"]): float(e["score"] or 0.0) for e in rep.get("examples", [])}
    gen = [e for e in rep.get("eval", []) if e.get("generated")]
    diag = json.loads((w / f"diagnose{tag}.json").read_text()) if (w / f"diagnose{tag}.json").is_file() else []
    dfind = diag.get("findings", []) if isinstance(diag, dict) else diag
    pos = sum(max(0.0, x) for x in scores.values()) or 1.0
    return {
        "gradian_commit": timing.get("commit", FIRST_COMMIT)[:7],
        "attribute_seconds": timing["seconds"],
        "items": len(rep.get("eval", [])), "regressed": len(rep.get("regressed", [])),
        "median_item_tokens": statistics.median(e["n_tokens"] for e in rep["eval"]) if rep.get("eval") else None,
        "generated_open": sum(bool(e.get("open")) for e in gen),
        "auc": _auc(scores, planted),
        "planted_pos_share": sum(max(0.0, scores.get(i, 0.0)) for i in planted) / pos,
        "verdict": v.get("kind"), "cause": v.get("cause"), "headline": v.get("headline"),
        "groups": [{k: g.get(k) for k in ("cause", "size", "harm_share", "finding", "terms")}
                   for g in v.get("groups") or []],
        "next_steps": v.get("next_steps"),
        "named": len(named), "drop_rows": sorted(named),
        "precision": len(named & planted) / len(named) if named else None,
        "recall": len(named & planted) / len(planted) if planted else None,
        "expected_recovery": v.get("expected_recovery"), "forgetting": v.get("forgetting"),
        "attribute_findings": sorted(f"{f['code']}:{f['severity']}:{f.get('name', '')}" for f in rep.get("findings", [])
                                     if f.get("severity") in ("warning", "error")),
        "diagnose_findings": [{k: f.get(k) for k in ("code", "name", "severity", "message")}
                              for f in dfind if f.get("severity") in ("warning", "error")],
    }  # fmt: skip


def score() -> dict[str, Any]:
    """bench/results/realmodel_llamafactory.json: each attribution (the first one, and ``_head`` when run), the
    counterfactual retrains and the token check."""
    res: dict[str, Any] = {
        "run": "lf_refusals_s0", "trainer": "LLaMA-Factory 0.9.5 (llamafactory-cli train)", "template": TEMPLATE,
        "rows": 96, "planted": json.loads((W / "planted.json").read_text())["rows"],
        "train_seconds": json.loads((W / "train_time.json").read_text())["seconds"],
        "attributions": {tag or "first": _score_attr(tag) for tag in ("", "_head")
                         if (W / f"attr_prompts{tag}/report.json").is_file()},
    }  # fmt: skip
    if (W / "truth.json").is_file():
        t = json.loads((W / "truth.json").read_text())
        res["truth"] = {k: v for k, v in t.items() if not isinstance(v, list)} | {"regressed": len(t["regressed"])}
    res["retrain_seconds"] = {p.name[len("train_") : -len("_time.json")]: json.loads(p.read_text())["seconds"]
                              for p in sorted(W.glob("train_drop_*_time.json"))}  # fmt: skip
    if (W / "tokens_compare.json").is_file():
        res["tokens_vs_llamafactory"] = json.loads((W / "tokens_compare.json").read_text())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "realmodel_llamafactory.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1)[:4000])
    return res


STEPS = {"data": data, "train": train, "train-drop": train_drop,
         "train-drop-named": train_drop_named,
         "train-drop-random": train_drop_random, "lf-tokens": lf_tokens, "tokens": tokens,
         "diagnose": diagnose, "attribute": attribute, "truth": truth, "score": score}  # fmt: skip


def main(argv: list[str]) -> None:
    """Steps in order; ``diagnose:_head`` / ``attribute:_head`` write beside the first run (suffix ``_head``)."""
    for step in argv or list(STEPS):
        name, _, tag = step.partition(":")
        STEPS[name](tag) if tag else STEPS[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
