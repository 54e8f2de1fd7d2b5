"""kronfluence EK-FAC on the real-model suite's runs, beside gradian's ranking (the same runs, rows and items).

    OMP_NUM_THREADS=1 nice -n 19 python bench/realmodel/kronfluence.py                # every run dir that is ready
    OMP_NUM_THREADS=1 nice -n 19 python bench/realmodel/kronfluence.py refusals_s0    # named runs only
    python bench/realmodel/kronfluence.py --table                                      # the cached runs, no compute

A run dir of bench/work/realmodel (made by bench/realmodel/suite.py) is ready when it has ``attr_prompts/report.json``
(``gradian attribute`` from the eval prompts) and ``planted.json``. For each:

* **gradian**: report.json ``examples[].score`` (higher = more harmful), the summed harm over the items it calls
  regressed (report.json ``regressed``). Checked: ``attr_prompts/item_scores.npy`` summed over those items gives the
  same scores (so the items are the ones gradian summed over).
* **kronfluence** 1.0.1: EK-FAC (empirical Fisher, its default dtypes, damping 0.1 x mean eigenvalue, gradian's
  defaults) on the same LoRA modules and loss conventions (``bench/common.py: kronfluence_scores``), on the same
  training rows as gradian tokenized and masked them (``gradian.run.loaded``, checked token for token against
  ``attr_prompts/tokens``) and the same regressed eval items: each prompt with the completion gradian generated for it
  (report.json ``settings.eval_generation``), formatted as gradian formats eval rows (no EOS after a cut), checked by
  re-scoring every item's base and fine-tune NLL against report.json ``eval``. Pairwise scores summed over the items
  and negated (kronfluence's sign means helpful). An attribution scored by preference (report.json
  ``settings.regression.score``) has a pair per item: the base model's reply ``b`` and the fine-tune's ``r``
  (``eval[].reply``, formatted as gradian formats it, its NLLs checked against ``reply_base_nll`` /
  ``reply_finetuned_nll``); kronfluence scores both as queries and an item's score is ``score(b) - score(r)``, the
  same pair gradian's query gradient ``grad nll(b) - grad nll(r)`` stands for (the measurement is linear in it).
  Rows run longest first, padded per batch (same scores, less padding); ``--bs`` rows and queries per batch (a batch
  size changes no score, only the time).

Metrics: ROC-AUC and precision@K (K = planted rows) of ``planted.json``'s rows for both (runs with no planted row:
Spearman only), Spearman between the two rankings, kronfluence's wall and CPU seconds (factors + scores, one thread
unless ``--threads``) beside gradian's (its attribution stages: training pass, queries, scores; and the whole
command, eval generation included). Each run's kronfluence scores are cached in ``<run>/kronfluence/`` (reused while
the rows and items are the same). Results: bench/results/realmodel_kronfluence.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
# this file is named kronfluence.py: its folder must not shadow the kronfluence package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))
import common  # noqa: E402
from bench_peers_suite import ranking, spearman, versions  # noqa: E402

WORK = common.ROOT / "bench" / "work" / "realmodel"
RESULT = common.ROOT / "bench" / "results" / "realmodel_kronfluence.json"
ATTR = "attr_prompts"


def ready(d: Path) -> bool:
    return (d / ATTR / "report.json").is_file() and (d / "planted.json").is_file()


def gradian_side(d: Path) -> dict:
    """gradian's ranking of the run's rows and the items it summed over, from its saved output."""
    rep = json.loads((d / ATTR / "report.json").read_text())
    items = [int(r["index"]) for r in rep["regressed"]]
    query_items = [int(i) for i in rep["settings"]["query_items"]]
    cols = np.load(d / ATTR / "embeddings_index.npy").astype(int).tolist()
    by_row = {int(e["index"]): float(e["score"]) for e in rep["examples"]}
    reported = np.array([by_row[c] for c in cols])
    S = np.load(d / ATTR / "item_scores.npy").astype(np.float64)
    summed = S[[query_items.index(i) for i in items]].sum(0)
    t = rep.get("timings") or {}
    whole = d / ATTR / "bench_time.json"
    return {
        "rep": rep, "items": items, "cols": cols, "scores": reported,
        "preference": (rep["settings"].get("regression") or {}).get("score") == "preference",
        "query_items_equal_regressed": sorted(query_items) == sorted(items),
        "sum_check": {
            "max_abs_diff": float(np.abs(summed - reported).max()),
            "max_abs_score": float(np.abs(reported).max()),
            "pearson": float(np.corrcoef(summed, reported)[0, 1]),
        },
        # an attribution that reused stored training gradients timed no training pass: no seconds to compare
        "seconds": sum(float(t.get(k) or 0.0) for k in ("train_pass_s", "query_s", "scores_s"))
        if rep["settings"].get("train_rows_computed", len(cols)) == len(cols) else None,
        "command_seconds": json.loads(whole.read_text()).get("seconds") if whole.is_file() else None,
    }  # fmt: skip


def completions_key(rep: dict, items: list[int]) -> str:
    """A hash of the regressed items' completions (and replies): the cache is reused only for the same query texts."""
    comp = {int(e["index"]): [e.get("completion"), e.get("reply")] for e in rep.get("eval") or []}
    return hashlib.sha256(json.dumps([comp.get(i) for i in items]).encode()).hexdigest()[:16]


def load_inputs(d: Path, g: dict):
    """(model, training rows, query rows, checks): gradian's loader, the rows as the trainer saw them and the regressed
    items as gradian scored them (prompt + its generated completion, eval formatting), then, for a preference run,
    each item's other side (the fine-tune's reply)."""
    from gradian.attribute.generate import with_completions, with_reply
    from gradian.attribute.loading import load
    from gradian.data import TokenizedRows, format_examples, load_examples
    from gradian.run.loaded import load_run

    s = g["rep"]["settings"]
    lr = load_run(d / "run", train=s["train"], eval=s["eval"], base=s["base"])
    fs = lr.format_settings
    mine = {k: v for k, v in dataclasses.asdict(fs).items() if k != "sources"}
    if json.loads(json.dumps(mine)) != s["format"]:
        raise SystemExit(f"{d.name}: format settings differ from report.json settings.format: {mine}")
    fx = [f for f in lr.require_formatted() if not f.dropped]
    if [f.index for f in fx] != g["cols"]:
        raise SystemExit(f"{d.name}: the formatted rows differ from {ATTR}/embeddings_index.npy")
    tokens_equal = None
    if (d / ATTR / "tokens" / "meta.json").is_file():
        saved = TokenizedRows(d / ATTR / "tokens")
        tokens_equal = len(saved) == len(fx) and all(
            list(a.input_ids) == list(b.input_ids) and list(a.loss_mask) == list(b.loss_mask)
            for a, b in zip(saved, fx, strict=True)
        )
        if not tokens_equal:
            raise SystemExit(f"{d.name}: the formatted rows differ from gradian's own ({ATTR}/tokens)")

    ex = load_examples(s["eval"], prompt_only=True, text_field=fs.text_field)
    gen = s.get("eval_generation")
    if gen:
        ex, _ = with_completions(ex, gen["completions"], gen["how"], gen.get("open"))
    lm = load(s["base"], d / "run", device=common.DEVICE, dtype="fp32")
    eval_fs = dataclasses.replace(fs, add_eos=bool(s.get("eval_eos")))
    efx = format_examples(ex, lm.tokenizer, eval_fs)
    at = {int(f.index): f for f in efx}
    qfx = [at[i] for i in g["items"]]
    checks = {"tokens_equal_gradian_store": tokens_equal} | nll_check(lm.model, qfx, g)
    if g["preference"]:
        ev, by_index = {int(e["index"]): e for e in g["rep"]["eval"]}, {int(e.index): e for e in ex}
        pairs = [with_reply(by_index[i], ev[i]["reply"], bool(ev[i]["reply_open"])) for i in g["items"]]
        rfx = format_examples(pairs, lm.tokenizer, eval_fs)
        checks["replies"] = nll_check(lm.model, rfx, g, keys=("reply_base_nll", "reply_finetuned_nll"))
        qfx = qfx + rfx
    return lm.model.eval(), fx, qfx, checks


@torch.no_grad()
def nll_check(model, qfx, g: dict, keys: tuple[str, str] = ("base_nll", "finetuned_nll")) -> dict:
    """Each query's mean NLL per completion token under the base and the fine-tune, against report.json ``eval``'s
    ``keys``: the items are the texts and masks gradian scored."""
    from gradian.attribute.collector import token_losses
    from gradian.attribute.engine import collate

    ev = {int(e["index"]): e for e in g["rep"]["eval"]}
    worst = {"base": 0.0, "finetuned": 0.0}
    n_tok = []
    for f in qfx:
        ids, am, lm = collate([f], 0, common.DEVICE)
        n = max(int(lm[:, 1:].sum()), 1)
        n_tok.append(n == ev[int(f.index)].get("n_tokens"))  # a reply is cut to the base reply's words, not tokens
        with model.disable_adapter():
            base = float(token_losses(model(input_ids=ids, attention_mask=am).logits, ids, lm)[0]) / n
        ft = float(token_losses(model(input_ids=ids, attention_mask=am).logits, ids, lm)[0]) / n
        worst["base"] = max(worst["base"], abs(base - ev[int(f.index)][keys[0]]))
        worst["finetuned"] = max(worst["finetuned"], abs(ft - ev[int(f.index)][keys[1]]))
    return {"nll_max_abs_diff": worst, "n_tokens_equal": sum(n_tok), "n_items": len(qfx)}


def kronfluence_side(d: Path, g: dict, bs: int, threads: int, redo: bool) -> dict:
    """kronfluence's (items, rows) scores with their seconds and checks, cached in ``<run>/kronfluence``."""
    cache = d / "kronfluence"
    key = {"items": g["items"], "rows": g["cols"], "completions": completions_key(g["rep"], g["items"])}
    meta_path, npy = cache / "meta.json", cache / "scores.npy"
    if not redo and meta_path.is_file() and npy.is_file():
        meta = json.loads(meta_path.read_text())
        if all(meta.get(k) == v for k, v in key.items()):
            return meta | {"scores": np.load(npy), "cached": True}
    model, fx, qfx, checks = load_inputs(d, g)
    print(f"{d.name}: {len(fx)} rows, {len(qfx)} items; checks {checks}", flush=True)
    wd = Path(tempfile.mkdtemp(prefix=f"kf_{d.name}_"))
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        kf, f_s, s_s = common.kronfluence_scores(model, fx, qfx, bs=bs, workdir=wd, by_length=True)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        shutil.rmtree(wd, ignore_errors=True)
    cache.mkdir(exist_ok=True)
    scores = kf.numpy()
    np.save(npy, scores)
    meta = key | checks | {
        "seconds": wall, "cpu_seconds": cpu, "factor_s": f_s, "score_s": s_s, "factor_cpu_s": common.KF_CPU[0],
        "score_cpu_s": common.KF_CPU[1], "bs": bs, "threads": threads, "device": common.DEVICE,
        "versions": versions(), "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }  # fmt: skip
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta | {"scores": scores, "cached": False}


def score_run(d: Path, bs: int, threads: int, redo: bool, table_only: bool) -> dict | None:
    planted = json.loads((d / "planted.json").read_text())
    rows = {int(i) for i in planted.get("rows") or []}
    g = gradian_side(d)
    if not g["items"]:
        return {"run": d.name, "kind": planted.get("kind"), "note": "no regressed item: gradian ranks nothing"}
    meta_ok = (d / "kronfluence" / "meta.json").is_file()
    if table_only and not meta_ok:
        return None
    k = kronfluence_side(d, g, bs, threads, redo and not table_only)
    S, n = k["scores"], len(g["items"])
    harm = -(S[:n].sum(0) - S[n:].sum(0))  # kronfluence: positive = helpful; a preference pair is b minus r
    gr, kr = ranking(g["scores"], g["cols"], rows), ranking(harm, g["cols"], rows)
    planted_ok = bool(rows)
    return {
        "run": d.name, "kind": planted.get("kind"), "n_rows": len(g["cols"]), "planted": len(rows),
        "regressed_items": len(g["items"]),
        "gradian_auc": gr["auc"] if planted_ok else None, "kronfluence_auc": kr["auc"] if planted_ok else None,
        "gradian_p_at_k": gr["p_at_k"] if planted_ok else None,
        "kronfluence_p_at_k": kr["p_at_k"] if planted_ok else None,
        "spearman": spearman(harm, g["scores"]),
        "kronfluence_seconds": k["seconds"], "kronfluence_cpu_seconds": k["cpu_seconds"],
        "kronfluence_factor_s": k["factor_s"], "kronfluence_score_s": k["score_s"],
        "gradian_seconds": g["seconds"], "gradian_command_seconds": g["command_seconds"],
        "checks": {
            "gradian_item_sum_vs_report": g["sum_check"],
            "query_items_equal_regressed": g["query_items_equal_regressed"],
            "tokens_equal_gradian_store": k.get("tokens_equal_gradian_store"),
            "nll_max_abs_diff": k.get("nll_max_abs_diff"), "n_tokens_equal": k.get("n_tokens_equal"),
            "replies_nll_max_abs_diff": (k.get("replies") or {}).get("nll_max_abs_diff"),
        },
        "kronfluence_bs": k.get("bs"), "threads": k.get("threads"), "cached": k["cached"],
    }  # fmt: skip


def fmt(x, spec: str = ".3f") -> str:
    return "–" if x is None or x != x else format(x, spec)


def table(results: list[dict]) -> str:
    lines = [
        "| run | rows | planted | regressed items | gradian AUC | kronfluence AUC | gradian P@K | kronfluence P@K "
        "| Spearman | kronfluence s (CPU s) | gradian s (command s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "spearman" not in r:
            lines.append(f"| {r['run']} | {r.get('note', '')} |" + " |" * 9)
            continue
        cells = [
            r["run"], r["n_rows"], r["planted"], r["regressed_items"], fmt(r["gradian_auc"]), fmt(r["kronfluence_auc"]),
            fmt(r["gradian_p_at_k"], ".2f"), fmt(r["kronfluence_p_at_k"], ".2f"), fmt(r["spearman"]),
            f"{fmt(r['kronfluence_seconds'], '.0f')} ({fmt(r['kronfluence_cpu_seconds'], '.0f')})",
            f"{fmt(r['gradian_seconds'], '.0f')} ({fmt(r['gradian_command_seconds'], '.0f')})",
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def checks_md(results: list[dict]) -> str:
    out = ["| run | gradian's item scores summed vs report.json score: max abs diff (max score) | tokens = gradian's "
           "| NLL max abs diff base / fine-tune | n_tokens equal |", "|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        c = r.get("checks")
        if not c:
            continue
        s, n, rn = c["gradian_item_sum_vs_report"], c.get("nll_max_abs_diff") or {}, c.get("replies_nll_max_abs_diff")
        cells = [
            r["run"], f"{s['max_abs_diff']:.3g} ({s['max_abs_score']:.3g})", c.get("tokens_equal_gradian_store"),
            f"{fmt(n.get('base'), '.2g')} / {fmt(n.get('finetuned'), '.2g')}"
            + (f"; replies {fmt(rn.get('base'), '.2g')} / {fmt(rn.get('finetuned'), '.2g')}" if rn else ""),
            f"{c.get('n_tokens_equal')} of {r['regressed_items']}",
        ]  # fmt: skip
        out.append("| " + " | ".join(str(x) for x in cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="*", help="run names under bench/work/realmodel (default: every ready run dir)")
    ap.add_argument("--bs", type=int, default=20, help="kronfluence rows and queries per batch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--redo", action="store_true", help="recompute cached runs")
    ap.add_argument("--table", action="store_true", help="only the cached runs, no compute")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    names = args.runs or sorted(p.name for p in WORK.iterdir() if p.is_dir())
    todo = [WORK / n for n in names if ready(WORK / n)]
    for n in sorted(set(names) - {d.name for d in todo}):
        print(f"{n}: not ready (no {ATTR}/report.json or planted.json)")
    results = []
    for d in todo:
        r = score_run(d, args.bs, args.threads, args.redo, args.table)
        if r is None:
            continue
        print(f"{d.name}: " + json.dumps({k: v for k, v in r.items() if k != "checks"}), flush=True)
        results.append(r)
    if args.runs and RESULT.is_file():  # keep the other runs' rows
        done = {r["run"] for r in results}
        results = [r for r in json.loads(RESULT.read_text())["runs"] if r["run"] not in done] + results
    results.sort(key=lambda r: r["run"])
    summary = {"runs": results, "versions": versions(), "command": " ".join(["python", *sys.argv])}
    common.write_json(RESULT, summary)
    md = [
        "# kronfluence EK-FAC on the real-model suite's runs, beside gradian",
        "",
        f"`{summary['command']}` (bench/realmodel/kronfluence.py). Both rank the same training rows (as the trainer"
        " saw them) by their summed effect on the same regressed eval items (gradian's `attribute` from prompts:"
        " each prompt with the completion gradian generated); AUC / P@K of the planted rows (– where a run has none),"
        " Spearman between the two rankings. kronfluence: EK-FAC, empirical Fisher, damping 0.1 x mean eigenvalue,"
        " CPU, one thread; gradian's seconds are its attribution stages (training pass + queries + scores) and, in"
        " brackets, the whole `gradian attribute` command (eval generation included); – where the attribution reused"
        " stored training gradients (no training pass timed).",
        "",
        table(results),
        "",
        "Checks (the same rows and items):",
        "",
        checks_md(results),
        "",
        "versions: " + ", ".join(f"{k} {v}" for k, v in summary["versions"].items()),
        "",
    ]
    RESULT.with_suffix(".md").write_text("\n".join(md))
    print(table(results))


if __name__ == "__main__":
    main()
