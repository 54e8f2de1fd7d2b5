"""Speed of `gradian attribute` against its floor and against kronfluence EK-FAC, in one run on one machine.

    python bench/bench_speed.py --model stories --rows 1000 --repeats 3 [--kronfluence]
    python bench/bench_speed.py --model wide --rows 256 --repeats 3 --kronfluence
    python bench/bench_speed.py --model wide --rows 256 --queries 1 16 256     # cost versus the number of queries

(a) floor: one training-style forward+backward per batch over the rows (summed loss, parameter .grad);
(b) gradian: `run_attribution` end to end (eval NLLs, training pass with per-example gradients + covariance,
    query gradients, EK-FAC, scores), no store;
(c) kronfluence 1.0.1 EK-FAC (factors + pairwise scores) on the same LoRA modules, rows and queries.
(a) and (b) are timed interleaved (alternating order) for --repeats rounds and reported as medians; (c) runs once
(it costs several floors) on a deep copy of the model. Prints a markdown row and writes bench/results/*.json.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["stories", "wide"], default="stories")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--queries", type=int, nargs="+", default=[16])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--kronfluence", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    bs = args.batch_size
    qmax = max(args.queries)
    if args.model == "stories":
        model, fx, efx = common.stories_setup(args.rows)
        qfx_all = (efx * (qmax // len(efx) + 1))[:qmax]
    else:
        model, fx, qfx_all = common.wide_setup(args.rows, qmax)
    n_params = sum(p.numel() for p in model.parameters())
    n_tok = sum(len(f.input_ids) for f in fx)
    print(f"# {args.model}: {n_params / 1e6:.2f}M params, {len(fx)} rows, {n_tok} tokens, batch {bs}, "
          f"{torch.get_num_threads()} threads", flush=True)  # fmt: skip
    common.floor_pass(model, fx[: 4 * bs])  # warm-up
    out = {
        "model": args.model,
        "params": n_params,
        "rows": len(fx),
        "tokens": n_tok,
        "threads": torch.get_num_threads(),
    }
    rows = []
    for q in args.queries:
        qfx = qfx_all[:q]
        fns = {
            "floor": lambda: common.floor_pass(model, fx, bs),
            "gradian": lambda qfx=qfx: common.gradian_run(model, fx, qfx, bs),
        }
        T = common.interleaved(fns, args.repeats)
        a, b = common.med(T["floor"]), common.med(T["gradian"])
        a_cpu, b_cpu = common.med(T["floor_cpu"]), common.med(T["gradian_cpu"])
        res = common.gradian_run(model, fx, qfx, bs)
        row = {"queries": q, "floor_s": T["floor"], "gradian_s": T["gradian"], "a": a, "b": b, "b_over_a": b / a,
               "floor_cpu_s": T["floor_cpu"], "gradian_cpu_s": T["gradian_cpu"], "a_cpu": a_cpu, "b_cpu": b_cpu,
               "b_over_a_cpu": b_cpu / a_cpu,
               "gradian_timings": res.timings, "stored_floats_per_row": res.settings["stored_floats_per_row"],
               "proj_dim": res.settings["proj_dim"]}  # fmt: skip
        print(f"queries {q}: floor {a:.2f} s, gradian {b:.2f} s (b/a {b / a:.2f}; CPU time b/a {b_cpu / a_cpu:.2f}); "
              "gradian parts (wall) "
              + ", ".join(f"{k} {v:.2f}" for k, v in res.timings.items()), flush=True)  # fmt: skip
        if args.kronfluence:
            _, f_s, s_s = common.kronfluence_scores(copy.deepcopy(model), fx, qfx, bs=bs)
            c = f_s + s_s
            row |= {"kf_factors_s": f_s, "kf_scores_s": s_s, "c": c, "c_over_b": c / b, "c_over_a": c / a}
            c_cpu = sum(common.KF_CPU)
            row |= {"kf_cpu_s": list(common.KF_CPU), "c_cpu": c_cpu, "c_over_b_cpu": c_cpu / b_cpu}
            print(f"  kronfluence: factors {f_s:.1f} s + scores {s_s:.1f} s = {c:.1f} s (c/b {c / b:.2f}, "
                  f"c/a {c / a:.2f})", flush=True)  # fmt: skip
        rows.append(row)
    out["runs"] = rows
    out["peak_rss_mb"] = common.peak_rss_mb()
    tag = f"speed_{args.model}_{args.rows}_q{'-'.join(map(str, args.queries))}"
    common.write_json(Path(__file__).resolve().parent / "results" / f"{tag}.json", out)
    print("| model | rows | queries | (a) floor s | (b) gradian s | b/a | (c) kronfluence s | c/b | "
          "CPU s: a / b / c | b/a CPU | c/b CPU |")  # fmt: skip
    for r in rows:
        c = f"{r['c']:.1f} ({r['kf_factors_s']:.1f} + {r['kf_scores_s']:.1f})" if "c" in r else "-"
        cb = f"{r['c_over_b']:.1f}" if "c" in r else "-"
        cc = f"{r['c_cpu']:.1f}" if "c" in r else "-"
        cbc = f"{r['c_over_b_cpu']:.1f}" if "c" in r else "-"
        cpu = f"{r['a_cpu']:.2f} / {r['b_cpu']:.2f} / {cc} | {r['b_over_a_cpu']:.2f} | {cbc}"
        print(f"| {args.model} | {len(fx)} | {r['queries']} | {r['a']:.2f} | {r['b']:.2f} | {r['b_over_a']:.2f} | "
              f"{c} | {cb} | {cpu} |")  # fmt: skip


if __name__ == "__main__":
    main()
