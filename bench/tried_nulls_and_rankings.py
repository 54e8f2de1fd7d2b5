"""Alternatives measured on the planted-fault suite and not kept (CHANGELOG.md, "Where the misses are").

    python bench/tried_nulls_and_rankings.py null clip [--heldout]   # head's null refitted without the head
    python bench/tried_nulls_and_rankings.py null peak [--heldout]   # null fitted at the harm density's peak
    python bench/tried_nulls_and_rankings.py ranking                 # unit-norm gradients, per-item query weights
    python bench/tried_nulls_and_rankings.py tokens spread_s0_f10 …  # rows ranked by their most harmful token,
                                                                     # or by token harm x base NLL
    python bench/tried_nulls_and_rankings.py query-tokens spread_s0_f10 …  # query tokens weighted by their regression
    python bench/tried_nulls_and_rankings.py label-disagreement mislabel_s0_f20 …  # head rows the model relabels
    python bench/tried_nulls_and_rankings.py group-token spread_s0_f10 …  # rows ranked by harm on the group's token
    python bench/tried_nulls_and_rankings.py within-label                # flipped vs correct rows of one label
    python bench/tried_nulls_and_rankings.py coherent-items fixed --set suite  # regressed items weighted by coherence
    python bench/tried_nulls_and_rankings.py token-core 0.25 --set suite  # rows join by harm on the group's tokens

``null`` swaps :func:`gradian.verdict.culprits.head_mask` for the variant and scores the verdict as
``calibrate_verdict.py`` does (the same runs, rule and policy); compare its ``--json`` with
``bench/results/verdict_suite_91.json``. ``ranking`` and ``tokens`` report ROC-AUC and precision@K of the planted rows
per kind or run. ``tokens`` runs ``gradian attribute --token-harm 1000`` on a run's fine-tune (about 20 s each on two
CPU cores) into ``bench/work/tokens/RUN``. ``query-tokens`` re-runs the attribution in process (about 15 s a run)
with each regressed item's query weighted per completion token by how much that token regressed.
``label-disagreement`` keeps, of the verdict's rows whose completion is one of the file's labels (a completion five
rows or more share), those for which the base model (or the fine-tune) prefers another of the labels. ``group-token``
runs ``gradian attribute --token-profiles 1.0 --token-profiles-always`` (every row's harm split over its tokens; about
15 s a run) into ``bench/work/group_tokens/RUN`` and ranks every row by its harm on the first harm token of the
verdict's content group, against its whole harm; the best split of that ranking is chosen knowing the planted rows
(an upper bound for any cut). ``within-label`` ranks, on every mislabelled run, the rows labelled " sad." (flipped and
correct) by their harm, by their harm divided by their gradient norm, by their gradient norm, and by their help to
the negative eval items that did not regress. ``coherent-items`` weighs each regressed item's harm by how much it
agrees with the others' (its leave-one-out correlation over the rows, as a Fisher z; weight min(1, max(0, z / 3))) and
scores the verdict as ``calibrate_verdict.py`` does: ``fixed`` weighs once, ``resampled`` weighs each resample of the
stability check anew. ``token-core C`` replaces how rows join a content group by its tokens: a profiled row outside
the groups joins when its harm on the group's tokens is at least C x the median of the group's own rows' (instead of
half of its positive harm sitting there, for a row above the median harm). Every run dir is ``bench/work/scenarios``
(``bench/scenarios/generate.py``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate_verdict as cal  # noqa: E402

import gradian.verdict.culprits as cu  # noqa: E402
import gradian.verdict.stats as st  # noqa: E402
import gradian.verdict.steps as vs  # noqa: E402
from gradian.attribute.regression import RegressionRule  # noqa: E402

RUNS = cal.REPO / "bench" / "work" / "scenarios"


def clipped_head(s: np.ndarray, policy: cu.VerdictOptions, first=cu.head_mask, rounds: int = 10) -> np.ndarray:
    """The shipped head (``first``), its null (median, robust spread) refitted on the rows outside it until no row
    joins."""
    s = np.asarray(s, dtype=np.float64)
    mask = first(s, policy)
    for _ in range(rounds):
        if not mask.any():
            break
        med, spread = st.robust(s[~mask])
        new = cu.cap_head(s, mask | ((cu.local_fdr(s, med, spread) < policy.head_fdr) & (s > med) & (s > 0)), policy)
        if (new == mask).all():
            break
        mask = new
    return mask


def peak_null(s: np.ndarray, grid: int = 1024) -> tuple[float, float]:
    """A normal null at the harm density's mode, its spread from the half width at half maximum on the low side
    (the kernel's own width taken out): Efron's central matching at its simplest."""
    x = s[np.isfinite(s)]
    if len(x) < 3 or float(np.std(x)) <= 0:
        return st.robust(x)
    centers, dens, h = st.binned_density(x, grid)
    k = int(np.argmax(dens))
    left = k
    while left > 0 and dens[left] > dens[k] / 2:
        left -= 1
    sig = (centers[k] - centers[left]) / 1.1774
    return float(centers[k]), float(np.sqrt(max(sig**2 - h**2, (0.25 * sig) ** 2)))


def peak_head(s: np.ndarray, policy: cu.VerdictOptions) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    med, spread = peak_null(s)
    return cu.cap_head(s, (cu.local_fdr(s, med, spread) < policy.head_fdr) & (s > med) & (s > 0), policy)


def run_null(variant: str, heldout: bool, out: Path | None) -> None:
    cu.head_mask = clipped_head if variant == "clip" else peak_head  # what stable_head and find_culprits call
    argv = ["--runs", str(RUNS)] + (["--heldout"] if heldout else []) + (["--json", str(out)] if out else [])
    sys.argv = ["calibrate_verdict.py", *argv]
    cal.main()


def planted_runs():
    for d in sorted(RUNS.iterdir()):
        run = cal.load_run(d) if d.is_dir() and not d.name.startswith("_") else None
        S = None if run is None or not run.planted else cal.regressed_scores(run, RegressionRule())
        if S is not None and len(S) >= 2:
            yield d, run, S


def auc_pk(v: np.ndarray, pos: np.ndarray) -> tuple[float, float]:
    return cal.auc(v, pos), float(pos[np.argsort(-v, kind="stable")[: int(pos.sum())]].mean())


def grad_norms(d: Path) -> dict[int, float]:
    """Each training row's LoRA gradient norm, from the run's gradient store (safetensors, never unpickled)."""
    from safetensors.numpy import load_file

    out: dict[int, float] = {}
    for f in sorted((d / "attr" / "grads").glob("*/shard_*.safetensors")):
        lo, hi = json.loads(f.with_suffix(".json").read_text())["rows"]
        sq = sum((a.astype(np.float64).reshape(a.shape[0], -1) ** 2).sum(1)
                 for a in load_file(str(f)).values() if a.shape[0] == hi - lo)  # fmt: skip
        out.update({r: float(np.sqrt(sq[k])) for k, r in enumerate(range(lo, hi))})
    return out


def run_ranking() -> None:
    names = ["row sum", "unit-norm gradients", "items at unit norm", "items as robust z"]
    per: dict[str, list[list[float]]] = collections.defaultdict(list)
    for d, run, S in planted_runs():
        pos = np.array([c in run.planted for c in run.cols])
        norms = grad_norms(d)
        med = np.median(S, axis=1, keepdims=True)
        mad = 1.4826 * np.median(np.abs(S - med), axis=1, keepdims=True)
        s = S.sum(0)
        variants = [s, s / np.array([norms.get(c, np.nan) for c in run.cols]),
                    (S / np.linalg.norm(S, axis=1, keepdims=True)).sum(0), ((S - med) / mad).sum(0)]  # fmt: skip
        per[run.kind].append([x for v in variants for x in auc_pk(v, pos)])
    print("| kind | runs | " + " | ".join(f"{n} AUC / P@K" for n in names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for kind, rows in sorted(per.items()):
        m = np.nanmean(np.array(rows), axis=0)
        cells = " | ".join(f"{m[2 * i]:.2f} / {m[2 * i + 1]:.2f}" for i in range(len(names)))
        print(f"| {kind} | {len(rows)} | {cells} |")


def base_token_nll(base: str, tokens_dir: Path) -> dict[int, np.ndarray]:
    """Each row's per-label-token NLL under the base model, over the rows as attribution tokenized them (the order
    of ``token_harm``'s label tokens)."""
    import torch
    from transformers import AutoModelForCausalLM

    from gradian.data.tokenized import TokenizedRows

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    out: dict[int, np.ndarray] = {}
    with torch.no_grad():
        for fx in TokenizedRows(tokens_dir):
            ids = torch.tensor(np.asarray(fx.input_ids, dtype=np.int64))
            nll = torch.nn.functional.cross_entropy(model(ids[None]).logits[0, :-1].double(), ids[1:], reduction="none")
            out[int(fx.index)] = nll.numpy()[np.asarray(fx.loss_mask[1:], dtype=bool)]  # logits at t-1 predict t
    return out


def run_tokens(names: list[str]) -> None:
    """Rows ranked by their whole harm, their most harmful token, their three most harmful, and their positive token
    harm weighted by how surprising the base model found each token (a defect's token is one the base did not
    expect there)."""
    print("| run | row sum AUC / P@K | max token | top-3 tokens | harm x base NLL |\n|---|---:|---:|---:|---:|")
    for name in names:
        d, out = RUNS / name, cal.REPO / "bench" / "work" / "tokens" / name
        base = json.loads((d / "attr" / "report.json").read_text())["settings"]["base"]
        argv = [sys.executable, "-m", "gradian", "attribute", "--base", base, "--adapter", str(d / "run"),
                "--train", str(d / "train.jsonl"), "--eval", str(d / "eval.jsonl"), "--out", str(out),
                "--token-harm", "1000", "--no-progress"]  # fmt: skip
        subprocess.run(argv, check=True, capture_output=True, cwd=cal.REPO)
        planted = set(json.loads((d / "planted.json").read_text())["rows"])
        ex = [e for e in json.loads((out / "report.json").read_text())["examples"] if e.get("token_harm")]
        pos = np.array([e["index"] in planted for e in ex])
        tok = [np.array([h for _, h in e["token_harm"] if h is not None] or [0.0]) for e in ex]
        nll = base_token_nll(base, out / "tokens")
        surprise = [float((np.clip(t, 0, None) * nll[e["index"]]).sum()) for e, t in zip(ex, tok, strict=True)]
        cells = [auc_pk(np.array(v), pos) for v in ([e["score"] for e in ex], [t.max() for t in tok],
                                                    [np.sort(t)[-3:].sum() for t in tok], surprise)]  # fmt: skip
        print(f"| {name} | " + " | ".join(f"{a:.2f} / {p:.2f}" for a, p in cells) + " |", flush=True)


def run_group_token(names: list[str]) -> None:
    """Rows ranked by their harm on the content group's first harm token, against their whole harm."""
    print("| run | planted | group tokens | row harm: AUC / P@K | harm on the token: AUC / P@K | best split: P / R |")
    print("|---|---:|---|---:|---:|---:|")
    for name in names:
        d, out = RUNS / name, cal.REPO / "bench" / "work" / "group_tokens" / name
        meta = json.loads((d / "planted.json").read_text())
        if not (out / "token_profiles.json").is_file():
            argv = [sys.executable, "-m", "gradian", "attribute", "--base", str(cal.REPO / meta["base"]), "--adapter",
                    str(d / "run"), "--train", str(d / "train.jsonl"), "--eval", str(d / "eval.jsonl"), "--config",
                    str(d / "run" / "training_args.json"), "--logs", str(d / "run" / "trainer_state.json"), "--out",
                    str(out), "--token-profiles", "1.0", "--token-profiles-always", "--no-progress"]  # fmt: skip
            subprocess.run(argv, check=True, capture_output=True, cwd=cal.REPO)
        rep = json.loads((out / "report.json").read_text())
        prof = json.loads((out / "token_profiles.json").read_text())["rows"]
        groups = [g for g in rep["verdict"].get("groups") or [] if g["cause"] == "content"]
        tokens = [k for g in groups for k in g.get("tokens") or []]
        if not tokens:
            print(f"| {name} | {len(meta['rows'])} | verdict: {rep['verdict']['kind']}, no content group | | | |")
            continue
        score = {e["index"]: e["score"] for e in rep["examples"]}
        pos = np.array([r["index"] in set(meta["rows"]) for r in prof])
        on = np.array([sum(h for k, h in r["tokens"] if k == tokens[0]) for r in prof])
        best = max(((2 * p * q / (p + q), p, q) for c in set(on.tolist()) if (sel := on >= c).any()
                    for p, q in [((sel & pos).sum() / sel.sum(), (sel & pos).sum() / pos.sum())] if p + q),
                   default=(0.0, 0.0, 0.0))  # fmt: skip
        row, tok = auc_pk(np.array([score[r["index"]] for r in prof]), pos), auc_pk(on, pos)
        print(
            f"| {name} | {int(pos.sum())} | {', '.join(repr(t) for t in tokens)} | {row[0]:.2f} / {row[1]:.2f} | "
            f"{tok[0]:.2f} / {tok[1]:.2f} | {best[1]:.2f} / {best[2]:.2f} |",
            flush=True,
        )


def run_within_label() -> None:
    """ROC-AUC of the flipped rows among every row of their label, per signal."""
    print(
        "| run | rows labelled sad | flipped | harm | harm / gradient norm | gradient norm | help to negative items |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for d in sorted(RUNS.glob("mislabel_*")):
        run = cal.load_run(d)
        if run is None or not (d / "attr" / "grads").is_dir():
            continue
        ev = [json.loads(line) for line in (d / "eval.jsonl").read_text().splitlines()]
        tr = [json.loads(line) for line in (d / "train.jsonl").read_text().splitlines()]
        call = cal.call_regressions(run.base, run.ft, RegressionRule())
        at = {e: k for k, e in enumerate(run.items)}
        reg = [at[i] for i in run.items if call.regressed[i]]
        neg = [at[i] for i in run.items if ev[i]["completion"].strip() == "sad." and not call.regressed[i]]
        label = [k for k, c in enumerate(run.cols) if tr[c]["completion"].strip() == "sad."]
        pos = np.array([run.cols[k] in run.planted for k in label])
        if not neg or pos.all() or not pos.any():
            continue
        norms = grad_norms(d)
        g = np.array([norms[run.cols[k]] for k in label])
        harm = run.S[reg].sum(0)[label]
        cells = [cal.auc(v, pos) for v in (harm, harm / g, g, -run.S[neg].mean(0)[label])]
        print(f"| {d.name} | {len(label)} | {int(pos.sum())} | " + " | ".join(f"{a:.2f}" for a in cells) + " |")


def coherence_weights(S: np.ndarray, mult: np.ndarray) -> np.ndarray:
    """Per item (rows of ``S``, counted ``mult`` times): min(1, max(0, z / 3)) of the Fisher z of its correlation
    over the rows with the other items' summed harm."""
    total, n = mult @ S, S.shape[1]
    w = np.zeros(len(S))
    for i in np.flatnonzero(mult):
        other = total - mult[i] * S[i]
        r = np.corrcoef(S[i], other)[0, 1] if other.any() else np.nan
        if np.isfinite(r):
            w[i] = np.clip(np.arctanh(np.clip(r, -0.999, 0.999)) * np.sqrt(max(n - 3, 1)) / 3.0, 0.0, 1.0)
    return w


def run_coherent_items(mode: str, which: str) -> None:
    make, raw = cal.make_verdict, {}

    def weighted(*args, item_scores=None, **kw):
        if item_scores is None or len(item_scores) < 3:
            return make(*args, item_scores=item_scores, **kw)
        W = item_scores * coherence_weights(item_scores, np.ones(len(item_scores)))[:, None]
        raw.update(W=W, S=item_scores)
        ex = [{"index": e["index"], "id": None, "score": float(v)} for e, v in zip(args[2], W.sum(0), strict=True)]
        return make(*args[:2], ex, *args[3:], item_scores=W, **kw)

    def resampled(S: np.ndarray, policy: cu.VerdictOptions):
        rng = np.random.default_rng(policy.seed)
        mine = raw and S.shape == raw["W"].shape and np.array_equal(S, raw["W"])
        for _ in range(int(policy.bootstrap)):
            mult = np.bincount(rng.integers(0, len(S), size=len(S)), minlength=len(S)).astype(float)
            yield (mult * coherence_weights(raw["S"], mult)) @ raw["S"] if mine else mult @ S

    cal.make_verdict = weighted
    if mode == "resampled":
        cu.resampled_sums = resampled
    sys.argv = ["calibrate_verdict.py", "--runs", str(RUNS), "--set", which]
    cal.main()


def run_token_core(c: float, which: str) -> None:
    import gradian.verdict.harm_tokens as ht

    def on(profiles, r: int, keys: list[str]) -> float:
        return sum(profiles.rows.get(r, (0.0, {}))[1].get(k, 0.0) for k in keys)

    def extend(groups, profiles, s, rows, share, set_aside=()):
        if share <= 0 or not profiles.rows:
            return
        taken = {int(r) for g in groups for r in g.rows} | {int(r) for r in set_aside}
        free = [r for r in profiles.rows if r not in taken]
        best: dict[int, tuple[float, object]] = {}
        for g in groups:
            if g.cause != "content" or len(g.rows) < 2 or not (tokens := ht.harm_tokens(g.rows, profiles, share)):
                continue
            g.tokens = tokens
            g.off_tokens = [r for r in g.rows if r in profiles.rows and profiles.share_on(r, tokens) <= 0]
            g.rows[:] = [r for r in g.rows if r not in set(g.off_tokens)]
            holders = max(profiles.holders.get(k, 0) for k in tokens)
            g.token_hold = sum(profiles.share_on(r, tokens) >= share for r in profiles.rows) / holders if holders else 1
            core = [on(profiles, r, tokens) for r in g.rows if r in profiles.rows]
            if g.token_hold >= share or not core:
                continue
            cut = c * float(np.median(core))
            for r in free:
                if (h := on(profiles, r, tokens)) > 0 and h >= cut and h > best.get(r, (0.0, g))[0]:
                    best[r] = (h, g)
        for r, (_, g) in sorted(best.items()):
            g.rows.append(r)
            g.by_tokens += 1

    vs.extend_by_tokens = extend
    sys.argv = ["calibrate_verdict.py", "--runs", str(RUNS), "--set", which]
    cal.main()


def token_weighted(model, qfx: list, power: float) -> list:
    """Copies of the query rows whose loss mask weighs each label token by its regression, relu(fine-tune NLL - base
    NLL) ** ``power``, scaled to sum to the label count (so the mean-per-token query keeps its scale); uniform when
    no token regressed."""
    import copy

    import torch

    from gradian.attribute import engine

    out = []
    for f in qfx:
        ids, am, lm = engine.collate([f], 0)
        nll = []
        for ctx in (model.disable_adapter(), contextlib.nullcontext()):
            with torch.no_grad(), ctx:
                lg = model(input_ids=ids, attention_mask=am).logits[0, :-1].float()
            nll.append(torch.nn.functional.cross_entropy(lg, ids[0, 1:], reduction="none").numpy())
        m = lm[0, 1:].numpy().astype(float)
        w = (np.clip(nll[1] - nll[0], 0, None) * m) ** power
        g = copy.copy(f)
        g.token_weight = np.r_[0.0, w / w.sum() * m.sum() if w.sum() > 0 else m]
        out.append(g)
    return out


def run_query_tokens(names: list[str]) -> None:
    """AUC / P@K of the default query against the same query with its tokens weighted by their regression."""
    import bench_peers_suite as bp
    import common
    import torch

    from gradian.attribute import engine

    plain = engine.collate

    def collate(fxs, pad_id, device="cpu"):  # a float loss mask where the rows carry token weights
        ids, am, lm = plain(fxs, pad_id, device)
        if not all(hasattr(f, "token_weight") for f in fxs):
            return ids, am, lm
        w = torch.zeros(lm.shape, dtype=torch.float32)
        for b, f in enumerate(fxs):
            w[b, : len(f.token_weight)] = torch.tensor(f.token_weight, dtype=torch.float32)
        return ids, am, w.to(device)

    engine.collate = collate  # what gradient_pass calls for the query rows
    print("| run | regressed items | default query AUC / P@K | tokens by regression | by regression squared |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        d = RUNS / name
        planted = json.loads((d / "planted.json").read_text())
        rep = json.loads((d / "attr" / "report.json").read_text())
        items = bp.regressed_items(rep)
        model, fx, efx = bp.load_suite_run(d, bp.resolve_base(d, str(planted.get("base") or "")))
        pos = np.array([f.index in set(planted["rows"]) for f in fx])
        qfx = [efx[i] for i in items]
        cells = []
        for q in (qfx, token_weighted(model, qfx, 1.0), token_weighted(model, qfx, 2.0)):
            res = common.gradian_run(model, fx, q)
            cells.append(auc_pk(np.asarray(res.item_scores, dtype=np.float64).sum(0), pos))
        print(f"| {name} | {len(items)} | " + " | ".join(f"{a:.2f} / {p:.2f}" for a, p in cells) + " |", flush=True)


def run_label_disagreement(names: list[str]) -> None:
    """Precision / recall of the verdict's rows against the planted ones, before and after keeping only the label rows
    the base model (or the fine-tune) would label otherwise."""
    print("| run | verdict rows: P / R | base model prefers another label: rows, P / R | fine-tune does: rows, P / R |")
    print("|---|---:|---:|---:|")
    for name in names:
        print(f"| {name} | " + " | ".join(label_disagreement_cells(RUNS / name)) + " |", flush=True)


def label_disagreement_cells(d: Path) -> list[str]:
    import bench_peers_suite as bp
    import torch
    from transformers import AutoTokenizer

    meta = json.loads((d / "planted.json").read_text())
    planted = set(meta["rows"])
    model, _, _ = bp.load_suite_run(d, bp.resolve_base(d, str(meta.get("base") or "")))
    tok = AutoTokenizer.from_pretrained(d / "run")
    rows = [json.loads(line) for line in (d / "train.jsonl").read_text().splitlines()]
    labels = [c for c, n in collections.Counter(r["completion"] for r in rows).items() if n >= 5]
    run = cal.load_run(d)
    S = cal.regressed_scores(run, RegressionRule())
    found = vs.find_culprits(S, S.sum(0), run.cols, findings=run.findings, embeddings=run.emb)
    named = [r for g in found.groups for r in g.rows] if found.concentrated else []

    def logp(prompt: str, completion: str, adapter: bool) -> float:
        p = tok(prompt, return_tensors="pt").input_ids
        x = torch.cat([p, tok(completion, add_special_tokens=False, return_tensors="pt").input_ids], 1)
        with torch.no_grad(), contextlib.nullcontext() if adapter else model.disable_adapter():
            lp = model(input_ids=x).logits[0, :-1].float().log_softmax(-1)
        return float(lp[p.shape[1] - 1 :].gather(1, x[0, p.shape[1] :, None]).sum())

    def pr(keep: list[int]) -> tuple[int, str]:
        hit = len(set(keep) & planted)
        return len(keep), f"{hit / max(1, len(keep)):.2f} / {hit / len(planted):.2f}"

    cells = [pr(named)[1]]
    for adapter in (False, True):
        keep = [r for r in named if rows[r]["completion"] not in labels or max(
            logp(rows[r]["prompt"], c, adapter) for c in labels if c != rows[r]["completion"]
        ) > logp(rows[r]["prompt"], rows[r]["completion"], adapter)]  # fmt: skip
        n, text = pr(keep)
        cells.append(f"{n}, {text}")
    return cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    nl = sub.add_parser("null")
    nl.add_argument("variant", choices=["clip", "peak"])
    nl.add_argument("--heldout", action="store_true")
    nl.add_argument("--json", type=Path)
    sub.add_parser("ranking")
    tk = sub.add_parser("tokens")
    tk.add_argument("runs", nargs="+")
    qt = sub.add_parser("query-tokens")
    qt.add_argument("runs", nargs="+")
    ld = sub.add_parser("label-disagreement")
    ld.add_argument("runs", nargs="+")
    gt = sub.add_parser("group-token")
    gt.add_argument("runs", nargs="+")
    sub.add_parser("within-label")
    ci = sub.add_parser("coherent-items")
    ci.add_argument("mode", choices=["fixed", "resampled"])
    ci.add_argument("--set", default="suite", choices=sorted(cal.SETS))
    tc = sub.add_parser("token-core")
    tc.add_argument("c", type=float)
    tc.add_argument("--set", default="suite", choices=sorted(cal.SETS))
    args = ap.parse_args()
    if args.what == "null":
        run_null(args.variant, args.heldout, args.json)
    elif args.what == "ranking":
        run_ranking()
    elif args.what == "query-tokens":
        run_query_tokens(args.runs)
    elif args.what == "label-disagreement":
        run_label_disagreement(args.runs)
    elif args.what == "group-token":
        run_group_token(args.runs)
    elif args.what == "within-label":
        run_within_label()
    elif args.what == "coherent-items":
        run_coherent_items(args.mode, args.set)
    elif args.what == "token-core":
        run_token_core(args.c, args.set)
    else:
        run_tokens(args.runs)


if __name__ == "__main__":
    main()
