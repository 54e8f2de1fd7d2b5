"""GradianCallback's covariance sums from a share of the last epoch (``covariance_rows``) against every row: the same
training (bench/callback_train.py, the real TRL ``SFTTrainer``) recorded once per setting, each record attributed
(`gradian attribute --run`, defaults), and each ranking compared with the record that took every row and with the
post-hoc pass on the same adapter (``--gradients pass``; the callback does not change the training).

    OMP_NUM_THREADS=1 python bench/callback_covariance.py --setup stories260k --rows all 200 100 50
    OMP_NUM_THREADS=1 python bench/callback_covariance.py --setup smollm2 --epochs 1 --rows all 40

Finished trainings and attributions under ``--work`` are reused. Results: bench/results/callback_covariance_<setup>.json
and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench_callback import ADAPTER, attribute_cmd, quality, scores
from callback_train import SETUPS, planted_rows, train

HERE = Path(__file__).resolve().parent


def _attribute(run: Path, out: Path, setup: str, *extra: str) -> Path:
    if not (out / "report.json").exists():
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        subprocess.run(attribute_cmd(run, out, *extra, setup=setup), check=True, capture_output=True, env=env)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", choices=sorted(SETUPS), default="stories260k")
    ap.add_argument("--epochs", type=float, default=4.0)
    ap.add_argument("--rows", nargs="+", default=["all", "100"], help="covariance_rows settings; all: every row")
    ap.add_argument("--work", type=Path, default=None)
    a = ap.parse_args()
    work = a.work or HERE / "work" / f"callback_covariance_{a.setup}"
    settings = [None if r == "all" else int(r) for r in a.rows]
    planted = planted_rows(a.setup)
    outs: dict[int | None, Path] = {}
    for c in settings:
        run = work / f"run_{c}"
        if not (run / ADAPTER).exists():
            train(run, True, epochs=a.epochs, options={"covariance_rows": c}, setup=a.setup)
        outs[c] = _attribute(run, work / f"attr_{c}", a.setup)
    first = work / f"run_{settings[0]}"
    post_hoc = _attribute(first, work / "attr_pass", a.setup, "--gradients", "pass")
    ref = outs[settings[0]]
    rows = []
    for c, out in outs.items():
        rec = json.loads((out.parent / f"run_{c}" / "gradian-record" / "record.json").read_text("utf-8"))
        n = len(scores(out))
        every = rec.get("covariance_every", 1)
        rows.append({"covariance_rows": c, "every": every, "batches_taken_share": 1 / every, "rows": n,
                     "vs_post_hoc": quality(out, post_hoc, planted),
                     "vs_every_row": quality(out, ref, planted)})  # fmt: skip
    argv = " ".join(x for x in sys.argv[1:] if x not in (str(a.work), "--work"))  # a local --work is no part of it
    res = {"command": "OMP_NUM_THREADS=1 python bench/callback_covariance.py " + argv,
           "setup": a.setup, "epochs": a.epochs, "settings": rows}  # fmt: skip
    path = HERE / "results" / f"callback_covariance_{a.setup}.json"
    path.write_text(json.dumps(res, indent=1))
    path.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))


def markdown(res: dict) -> str:
    title = f"GradianCallback's covariance sums from a share of the epoch ({res['setup']}, {res['epochs']:g} epochs)"
    lines = [f"# {title}",
             "", f"`{res['command']}`", "",
             "| covariance_rows | micro-batches taken | Spearman vs every row | top-k overlap vs every row "
             "| Spearman vs post hoc | planted AUC recorded | planted AUC post hoc |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in res["settings"]:
        e, p = r["vs_every_row"], r["vs_post_hoc"]
        lines.append(f"| {r['covariance_rows'] or 'every row'} | 1 in {r['every']} | {e['spearman']:.4f} "
                     f"| {e['top_k_overlap']:.2f} | {p['spearman']:.3f} | {p['auc_callback']:.3f} "
                     f"| {p['auc_post_hoc']:.3f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
