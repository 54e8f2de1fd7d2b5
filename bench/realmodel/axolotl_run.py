r"""One real Axolotl run analysed by Gradian as a user would: the refusal case of the real-model suite
(bench/realmodel/suite.py, ``refusals_s0``) trained by Axolotl 0.19.0's own ``axolotl train``, on the 96-row subset
the LLaMA-Factory run uses (bench/realmodel/llamafactory.py: the 16 planted refusals and the first 80 math rows).

Axolotl reads the rows as OpenAI ``messages`` (``type: chat_template``, ``chat_template: tokenizer_default``: the
model's own template, the loss on the assistant turns); Gradian gets the same file and the same YAML. Eval:
refusals_s0's 40 benign prompts (prompts only). Truth: the same config retrained without the 16 planted rows and
without as many random math rows, scored as the suite scores it (``llamafactory.truth``).

Commands (from the repo root; the Axolotl venv is built by the Axolotl section of bench/frameworks/make_venvs.sh at
/work/venv-axo; training and Gradian run under ``nice -n $BENCH_NICE``, 19 unless set, ``OMP_NUM_THREADS=1``)::

    python bench/realmodel/axolotl_run.py data              # W/train.jsonl, W/planted.json, W/config.yaml
    python bench/realmodel/axolotl_run.py train             # axolotl train W/config.yaml -> W/run
    /work/venv-axo/bin/python bench/realmodel/axolotl_run.py axo-tokens   # Axolotl's own rows -> W/axo_tokens.json
    .venv/bin/python bench/realmodel/axolotl_run.py tokens diagnose attribute
    python bench/realmodel/axolotl_run.py train-drop        # retrains without the planted / 16 random rows
    .venv/bin/python bench/realmodel/axolotl_run.py truth score   # bench/results/realmodel_axolotl.json

where W = bench/work/realmodel/axo_refusals_s0; Gradian runs as a user types it, the YAML and the train file read
from the model card Axolotl wrote into W/run::

    gradian attribute --run W/run --base examples/smollm2/model \
        --eval bench/work/realmodel/refusals_s0/eval_prompts.jsonl --out W/attr_prompts
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
W = ROOT / "bench/work/realmodel/axo_refusals_s0"
RUN = W / "run"
VENV_AXO = Path(os.environ.get("VENV_AXO", "/work/venv-axo"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import llamafactory as lf  # noqa: E402  (the LLaMA-Factory run's subset, truth and scoring)
from llamafactory import MODEL, RESULTS, SRC, _auc, _gradian, nice_env, read_jsonl  # noqa: E402

CONFIG = {
    "base_model": str(ROOT / "examples/smollm2/model"),
    "adapter": "lora",
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.0,
    "lora_target_linear": True,
    # Axolotl turns its Triton LoRA kernels on when a config leaves them unset; they need CUDA
    "lora_mlp_kernel": False,
    "lora_qkv_kernel": False,
    "lora_o_kernel": False,
    "lora_embedding_kernel": False,
    "chat_template": "tokenizer_default",
    "datasets": [{"path": str(W / "train.jsonl"), "ds_type": "json", "type": "chat_template"}],
    "dataset_prepared_path": str(W / "prepared"),
    "val_set_size": 0,
    "sequence_len": 256,
    "train_on_inputs": False,
    "micro_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "num_epochs": 2,
    "learning_rate": 5.0e-4,
    "lr_scheduler": "cosine",
    "optimizer": "adamw_torch",
    "warmup_steps": 0,
    "logging_steps": 2,
    "seed": 0,
    "bf16": False,
    "fp16": False,
    "tf32": False,
    "output_dir": str(RUN),
    "save_strategy": "no",
    "dataset_num_proc": 1,
}


def data() -> None:
    """The 96-row subset as messages (Axolotl's and Gradian's file), the config, and the retrains' files."""
    import yaml

    sub, keep, planted = lf.subset()
    W.mkdir(parents=True, exist_ok=True)
    msgs = [{"messages": r["prompt"] + r["completion"]} for r in sub]
    with (W / "train.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in msgs)
    (W / "planted.json").write_text(lf.planted_doc(keep, planted))
    (W / "config.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    rows = json.loads((W / "planted.json").read_text())["rows"]
    others = [i for i in range(len(msgs)) if i not in set(rows)]
    for tag, gone in (("planted", set(rows)), ("random16", set(random.Random(7).sample(others, len(rows))))):
        path = W / f"train_drop_{tag}.jsonl"
        with path.open("w") as f:
            f.writelines(json.dumps(r) + "\n" for i, r in enumerate(msgs) if i not in gone)
        cfg = {
            **CONFIG,
            "datasets": [{**CONFIG["datasets"][0], "path": str(path)}],
            "dataset_prepared_path": str(W / f"prepared_drop_{tag}"),
            "output_dir": str(W / f"run_drop_{tag}"),
        }
        (W / f"config_drop_{tag}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))  # fmt: skip
        (W / f"drop_{tag}.json").write_text(json.dumps(sorted(gone)))
    print(len(msgs), "rows, planted at", rows)


def train(config: str = "config.yaml", tag: str = "train") -> None:
    """``axolotl train config.yaml`` in its own venv, timed (CPU: no GPU visible)."""
    env = {**nice_env(), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "AXOLOTL_DO_NOT_TRACK": "1",
           "PATH": f"{VENV_AXO / 'bin'}:{os.environ['PATH']}"}  # fmt: skip
    lf.run_trainer(lf.niced(str(VENV_AXO / "bin/axolotl"), "train", str(W / config)), env, W, tag, cwd=W)


def train_drop() -> None:
    """The retrains without the 16 planted rows and without 16 random math rows (same config and seed)."""
    for tag in ("planted", "random16"):
        train(f"config_drop_{tag}.yaml", f"train_drop_{tag}")


def axo_tokens() -> None:
    """Axolotl's own tokenized rows for the run's config (``load_cfg`` + ``load_datasets``, as ``axolotl preprocess``
    runs them): W/axo_tokens.json. Run with the Axolotl venv's python."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")
    from axolotl.cli.config import load_cfg
    from axolotl.common.datasets import load_datasets

    cfg = load_cfg(str(W / "config.yaml"), dataset_prepared_path=str(W / "prepared_tokens"))
    ds = load_datasets(cfg=cfg).train_dataset
    rows = [{"input_ids": list(s["input_ids"]), "labels": list(s["labels"])} for s in ds]
    (W / "axo_tokens.json").write_text(json.dumps(rows))
    print(len(rows), "rows from Axolotl's load_datasets")


def tokens() -> None:
    """``gradian tokens --format json`` against Axolotl's rows (W/tokens_compare.json): with the run dir alone (the
    YAML Axolotl wrote into its model card) and with ``--config``. Each of Axolotl's rows is matched to Gradian's by
    its token ids (Axolotl may reorder rows)."""
    axo = json.loads((W / "axo_tokens.json").read_text())
    out: dict[str, Any] = {}
    for key, extra in (("run dir", []), ("--config", ["--config", str(W / "config.yaml")])):
        res = _gradian(["tokens", "--run", str(RUN), *extra, "--base", str(MODEL), "--train", str(W / "train.jsonl"),
                        "--format", "json"], W / f"tokens_{key.strip('-').replace(' ', '_')}.log")  # fmt: skip
        got = json.loads(res["stdout"])["rows"] if res["rc"] == 0 else []
        by_ids = {tuple(g["input_ids"]): g for g in got}
        matched = [(by_ids.get(tuple(r["input_ids"])), r) for r in axo]
        out[key] = {
            "rc": res["rc"], "gradian_rows": len(got), "axolotl_rows": len(axo),
            "input_ids_equal": sum(g is not None for g, _ in matched),
            "labels_equal": sum(g is not None and g["labels"] == r["labels"] for g, r in matched),
            "n_loss_gradian": sum(t != -100 for g in got for t in g["labels"]),
            "n_loss_axolotl": sum(t != -100 for r in axo for t in r["labels"]),
            "decisions": got[0].get("decisions") if got else None,
        }  # fmt: skip
    (W / "tokens_compare.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1)[:3000])


def diagnose() -> None:
    """``gradian diagnose --run`` (the YAML and the train file from the model card): W/diagnose.{log,json}."""
    lf.run_diagnose(W, ["--run", str(RUN), "--base", str(MODEL)])


def attribute() -> None:
    """``gradian attribute --run`` from the eval prompts (the config and the train file from the model card):
    W/attr_prompts."""
    lf.run_attribute(W, ["--run", str(RUN), "--base", str(MODEL), "--eval", str(SRC / "eval_prompts.jsonl")])


def truth() -> None:
    """W/truth.json: what each retrain brings back on refusals_s0's reference items (``llamafactory.truth``)."""
    lf.truth(W)


def score() -> dict[str, Any]:
    """bench/results/realmodel_axolotl.json: the attribution against the planted rows and the retrains, the token
    check and the seconds."""
    res: dict[str, Any] = {
        "run": "axo_refusals_s0", "trainer": "Axolotl 0.19.0 (axolotl train)",
        "rows": len(read_jsonl(W / "train.jsonl")),
        "planted": json.loads((W / "planted.json").read_text())["rows"],
        "train_seconds": json.loads((W / "train_time.json").read_text())["seconds"],
        "attribution": lf._score_attr("", W),
        "retrain_seconds": {p.name[len("train_") : -len("_time.json")]: json.loads(p.read_text())["seconds"]
                            for p in sorted(W.glob("train_drop_*_time.json"))},
    }  # fmt: skip
    if (W / "truth.json").is_file():
        t = json.loads((W / "truth.json").read_text())
        res["truth"] = {k: v for k, v in t.items() if not isinstance(v, list)} | {"regressed": len(t["regressed"])}
    if (W / "tokens_compare.json").is_file():
        res["tokens_vs_axolotl"] = json.loads((W / "tokens_compare.json").read_text())
    rep = json.loads((W / "attr_prompts/report.json").read_text())
    scores = {int(e["index"]): float(e["score"] or 0.0) for e in rep.get("examples", [])}
    assert _auc(scores, set(res["planted"])) == res["attribution"]["auc"]
    (RESULTS / "realmodel_axolotl.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1)[:4000])
    return res


STEPS = {"data": data, "train": train, "train-drop": train_drop, "axo-tokens": axo_tokens, "tokens": tokens,
         "diagnose": diagnose, "attribute": attribute, "truth": truth, "score": score}  # fmt: skip


if __name__ == "__main__":
    for step in sys.argv[1:] or list(STEPS):
        STEPS[step]()
