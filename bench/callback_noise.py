"""GradianCallback under training-time noise: LoRA dropout and NEFTune change the forward the trainer backpropagates,
so the recorded rows are the gradients of a noisy forward, where the post-hoc pass takes them without noise (eval
mode). Each setting trains the same run (bench/callback_train.py, the real TRL ``SFTTrainer``) with the callback; its
record and the post-hoc pass on the same adapter (``--gradients pass``) are attributed with ``--query all`` (every
eval item: a noisy training can regress too little for the default query to attribute) and compared.

    OMP_NUM_THREADS=1 python bench/callback_noise.py --setup stories260k
    OMP_NUM_THREADS=1 python bench/callback_noise.py --setup smollm2 --epochs 1 --settings none dropout0.05

Finished trainings and attributions under ``--work`` are reused. Results: bench/results/callback_noise_<setup>.json
and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench_callback import ADAPTER, quality
from callback_covariance import _attribute
from callback_train import SETUPS, planted_rows, train

HERE = Path(__file__).resolve().parent
SETTINGS = {  # name -> (lora_dropout, SFTConfig fields)
    "none": (0.0, {}),
    "dropout0.05": (0.05, {}),
    "dropout0.1": (0.1, {}),
    "neftune5": (0.0, {"neftune_noise_alpha": 5.0}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", choices=sorted(SETUPS), default="stories260k")
    ap.add_argument("--epochs", type=float, default=4.0)
    ap.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    ap.add_argument("--work", type=Path, default=None)
    a = ap.parse_args()
    work = a.work or HERE / "work" / f"callback_noise_{a.setup}"
    planted = planted_rows(a.setup)
    rows = []
    for name in a.settings:
        dropout, sft = SETTINGS[name]
        run = work / f"run_{name}"
        if not (run / ADAPTER).exists():
            train(run, True, epochs=a.epochs, setup=a.setup, lora_dropout=dropout, sft=sft)
        rec = _attribute(run, work / f"attr_{name}", a.setup, "--query", "all")
        post_hoc = _attribute(run, work / f"pass_{name}", a.setup, "--query", "all", "--gradients", "pass")
        source = json.loads((rec / "report.json").read_text("utf-8"))["settings"]["gradient_source"]
        rows.append({"setting": name, "lora_dropout": dropout, "sft": sft, "gradient_source": source,
                     **quality(rec, post_hoc, planted)})  # fmt: skip
        print(rows[-1], flush=True)
    argv = " ".join(x for x in sys.argv[1:] if x not in (str(a.work), "--work"))
    res = {"command": "OMP_NUM_THREADS=1 python bench/callback_noise.py " + argv, "setup": a.setup,
           "epochs": a.epochs, "settings": rows}  # fmt: skip
    path = HERE / "results" / f"callback_noise_{a.setup}.json"
    path.write_text(json.dumps(res, indent=1))
    path.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))


def markdown(res: dict) -> str:
    lines = [f"# GradianCallback under LoRA dropout and NEFTune ({res['setup']}, {res['epochs']:g} epochs)", "",
             f"`{res['command']}`", "",
             "Each setting is its own training; recorded and post-hoc rankings are on that training's adapter.", "",
             "| setting | gradient source | Spearman recorded vs post hoc | top-k overlap | planted AUC recorded "
             "| planted AUC post hoc |", "|---|---|---|---|---|---|"]  # fmt: skip
    for r in res["settings"]:
        lines.append(f"| {r['setting']} | {r['gradient_source']} | {r['spearman']:.3f} | {r['top_k_overlap']:.2f} "
                     f"| {r['auc_callback']:.3f} | {r['auc_post_hoc']:.3f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
