"""Join attribute's ranking, diagnose's findings, the clusters and the verdict into the final report.json content.

``build_report`` is idempotent: given a report it built before (and no embeddings), it keeps the saved cluster
assignment, labels and 2-D map and recomputes everything else, so ``gradian report OUT_DIR`` can re-render.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradian.attribute.token_profiles import TokenProfiles
from gradian.diagnose.types import Finding
from gradian.errors import GradianError
from gradian.numbers import finite_float
from gradian.options.verdict import VerdictOptions
from gradian.report.clusters import MAP_POINTS, fit_clusters, summarize_clusters
from gradian.report.schema import (
    SCHEMA,
    TOP_ROWS_SHOWN,
    Cluster,
    ClusteringInfo,
    ClusterMap,
    Contribution,
    EvalItem,
    LogPoint,
    RankedRow,
    Report,
    TrainerLog,
)
from gradian.verdict.evidence import Evidence, evidence, label_of, matched_item_harm
from gradian.verdict.schema import Verdict
from gradian.verdict.steps import decide
from gradian.verdict.words import culprit_clusters, write

DERIVED_KEYS = Report.DERIVED
DERIVED_EXAMPLE_KEYS = RankedRow.DERIVED
TEXT_CHARS = 4000  # dataset text kept per shown row in report.json


def texts_of(examples: Sequence[Any] | Mapping[int, str] | None) -> tuple[dict[int, str], dict[int, Any]]:
    """(index -> text, index -> id) from Example objects, ``{"index", "id", "text"}`` dicts or an index -> text map."""
    if not examples:
        return {}, {}
    if isinstance(examples, Mapping):
        return {int(k): str(v) for k, v in examples.items()}, {}
    texts, ids = {}, {}
    for e in examples:
        if isinstance(e, Mapping):
            idx, text, rid = e.get("index"), e.get("text"), e.get("id")
        else:
            idx, text, rid = e.index, e.plain_text(), e.id
        if idx is None:
            continue
        texts[int(idx)] = "" if text is None else str(text)
        if rid is not None:
            ids[int(idx)] = rid
    return texts, ids


def trainer_log(logs: Any) -> TrainerLog | None:
    """TrainerLogs (or its report.json form) as the report's :class:`TrainerLog`: finite values only."""
    if logs is None:
        return None
    if isinstance(logs, Mapping):
        points = logs.get("points") or []
        source, total = logs.get("source"), logs.get("total_steps")
    else:
        points, source, total = logs.points, logs.source, logs.total_steps
    out = []
    for p in points:
        get = p.get if isinstance(p, Mapping) else lambda k, _p=p: getattr(_p, k, None)
        step = get("step")
        if step is None:
            continue
        f = [finite_float(get(k)) for k in ("epoch", "loss", "eval_loss", "grad_norm", "learning_rate")]
        out.append(LogPoint(int(step), f[0], f[1], f[2], f[3], f[4]))
    return TrainerLog(source, total, out)


def logs_to_dict(logs: Any) -> dict[str, Any] | None:
    """TrainerLogs (or its dict form) -> ``{"source", "total_steps", "points": [{"step", "loss", ...}]}``."""
    log = trainer_log(logs)
    return None if log is None else log.to_dict()


def per_item_contributions(attribution: Report | Mapping[str, Any]) -> dict[int, dict[int, float]]:
    """Row index -> {regressed item index -> score}, from any of the accepted ``per_item`` shapes:

    - on an example: ``"per_item": [score per regressed item, in report["regressed"] order]`` or
      ``{"<item index>": score}``;
    - top level: ``"per_item": {"rows": [row indices], "items": [item indices], "scores": [[...] per row]}`` or
      ``{"<row index>": [scores in regressed order] | {"<item index>": score}}``;
    - attribute's own ``"contributions": [{"index", "per_item": [{"eval_index", "score"}, ...]}, ...]``.
    """
    rep = attribution if isinstance(attribution, Report) else Report.from_dict(attribution)
    items = [r.index for r in rep.regressed]

    def parse(v: Any) -> dict[int, float]:
        if isinstance(v, Mapping):
            return {int(k): float(s) for k, s in v.items() if finite_float(s) is not None}
        if isinstance(v, Sequence) and not isinstance(v, str):
            return {items[i]: float(s) for i, s in enumerate(v) if i < len(items) and finite_float(s) is not None}
        return {}

    out: dict[int, dict[int, float]] = {}
    top = rep.extra.get("per_item")  # third-party shapes: free-form by design
    if isinstance(top, Mapping):
        if "rows" in top and "scores" in top:
            cols = [int(i) for i in (top.get("items") or items)]
            for r, row_scores in zip(top["rows"], top["scores"], strict=False):
                out[int(r)] = {
                    c: float(s) for c, s in zip(cols, row_scores, strict=False) if finite_float(s) is not None
                }
        else:
            for r, v in top.items():
                try:
                    out[int(r)] = parse(v)
                except (TypeError, ValueError):
                    continue
    for c in rep.extra.get("contributions") or []:
        if c.get("index") is not None and isinstance(c.get("per_item"), Sequence):
            out[int(c["index"])] = {
                int(p["eval_index"]): float(p["score"])
                for p in c["per_item"]
                if isinstance(p, Mapping) and finite_float(p.get("score")) is not None
            }
    for e in rep.examples:
        if "per_item" in e.extra:
            out[e.index] = parse(e.extra["per_item"])
    return out


def _check(attribution: Mapping[str, Any]) -> None:
    if not isinstance(attribution, Mapping) or not isinstance(attribution.get("examples"), list):
        raise GradianError(
            "not an attribute report (no 'examples' list)",
            where="report.json",
            fix="pass the report.json that `gradian attribute` wrote",
        )
    for i, e in enumerate(attribution["examples"]):
        if not isinstance(e, Mapping) or e.get("index") is None:
            raise GradianError(f"example {i} has no 'index'", where="report.json: examples")


def build_report(
    attribution: Report | Mapping[str, Any],
    *,
    findings: Sequence[Finding | Mapping[str, Any]] | None = None,
    embeddings: np.ndarray | None = None,
    embedding_index: Sequence[int] | None = None,
    train_examples: Sequence[Any] | Mapping[int, str] | None = None,
    eval_examples: Sequence[Any] | Mapping[int, str] | None = None,
    logs: Any = None,
    k: int | None = None,
    seed: int = 0,
    item_scores: np.ndarray | None = None,
    token_profiles: TokenProfiles | None = None,
    verdict: VerdictOptions | Verdict | None = None,
) -> Report:
    """The final report (report.json is its ``to_dict()``).

    ``attribution``: attribute's report.json (``examples`` with ``index``/``id``/``score``/``rank``, ``regressed``,
    ``method``, ``settings``, optional ``per_item``), or a report this function built before (a dict or a
    :class:`Report`; not changed). ``findings``: diagnose's findings (default: the ones already in ``attribution``).
    ``embeddings``: ``(n_rows, k)`` gradient embeddings; row j belongs to training row ``embedding_index[j]``
    (default: training row j). Without embeddings a previous assignment is reused, else there are no clusters.
    ``train_examples`` / ``eval_examples``: Example lists (or ``{"index","id","text"}`` dicts, or index -> text) for
    labels and the text shown. ``logs``: TrainerLogs or its dict form. ``item_scores``: the per-item harm
    (``settings.query_items`` x rows, columns in ``embedding_index`` order) for the verdict's stability check;
    ``token_profiles``: where the top rows' harm sits by token, which content groups extend along; ``verdict``: the
    thresholds to decide the verdict with (default: the ones the report saved, else :class:`VerdictOptions`), or the
    verdict when it was decided already (the pipeline decides it once, while attributing: :func:`verdict_evidence`;
    its ``policy`` holds its thresholds).

    Sets ``clusters``, ``clustering``, ``findings``, ``verdict``, ``logs``, ``n_rows``; every example gains
    ``cluster`` (id or None) and ``findings`` (codes); shown rows gain ``text`` and ``contributions``.
    """
    if isinstance(attribution, Report):
        attribution = attribution.to_dict()
    _check(attribution)
    report = Report.from_dict(attribution)
    previous = Saved.of(report, built="clusters" in attribution)  # read before the derived keys are dropped
    report.forget(DERIVED_KEYS)
    if report.schema is None:
        report.set(schema=SCHEMA)
    typed = [f if isinstance(f, Finding) else Finding.from_dict(f) for f in findings] if findings is not None else None
    found = list(previous.findings) if typed is None else typed
    decided = verdict if isinstance(verdict, Verdict) else None
    if decided is not None:
        policy = VerdictOptions.from_dict(decided.policy)
    else:
        policy = verdict if isinstance(verdict, VerdictOptions) else report.verdict_options or VerdictOptions()

    examples = _ranked_examples(report.examples)
    scores = {e.index: float(finite_float(e.score) or 0.0) for e in examples}
    texts = _train_texts(train_examples, previous.texts, examples, policy.label_words)
    eval_texts, eval_ids = texts_of(eval_examples)

    if embeddings is not None:
        clusters, clustering, row_cluster = _fitted_clusters(embeddings, embedding_index, scores, texts, found, k, seed)
    elif previous.clusters:
        clusters, clustering, row_cluster = _saved_clusters(previous, scores, texts, found)
    else:
        clusters, row_cluster = [], {}
        clustering = ClusteringInfo("no gradient embeddings were given, so rows were not clustered", 0)

    _annotate_examples(examples, found, row_cluster, texts, previous.contributions, TOP_ROWS_SHOWN)
    regressed = _regressed_with_text(report.regressed, eval_texts, eval_ids)

    n_rows = max(len(examples), len(row_cluster))
    report.set(examples=examples, regressed=regressed, n_rows=n_rows, clusters=clusters, clustering=clustering,
               findings=found, verdict_options=policy)  # fmt: skip
    if decided is None:
        ev = _evidence(report, examples, found, regressed, n_rows, texts, embeddings, embedding_index, item_scores,
                       token_profiles)  # fmt: skip
        decided = write(ev, decide(ev, policy), policy)
    decided.culprit_clusters = culprit_clusters(clusters, decided.drop_rows)
    report.set(verdict=decided)
    log = trainer_log(logs) if logs is not None else previous.logs
    if log is not None and log.to_dict():
        report.set(logs=log)
    return report


def verdict_evidence(
    attribution: Mapping[str, Any],
    *,
    findings: Sequence[Finding | Mapping[str, Any]],
    embeddings: np.ndarray | None = None,
    embedding_index: Sequence[int] | None = None,
    train_examples: Sequence[Any] | Mapping[int, str] | None = None,
    eval_examples: Sequence[Any] | Mapping[int, str] | None = None,
    item_scores: np.ndarray | None = None,
    verdict_options: VerdictOptions | None = None,
) -> Evidence:
    """The verdict's :class:`Evidence` as :func:`build_report` reads it from the same inputs, without clustering the
    rows or building the rest of the report: the pipeline builds it once, while the model is still loaded, asks the
    verdict whether it wants token profiles, and hands the finished verdict to :func:`build_report`."""
    report = Report.from_dict(attribution)
    examples = _ranked_examples(report.examples)
    texts = _train_texts(train_examples, {}, examples, (verdict_options or VerdictOptions()).label_words)
    regressed = _regressed_with_text(report.regressed, *texts_of(eval_examples))
    found = [f if isinstance(f, Finding) else Finding.from_dict(f) for f in findings]
    n_rows = len(examples)
    if embeddings is not None:  # build_report counts every clustered row
        n_rows = max(n_rows, len(set(embedding_index if embedding_index is not None else range(len(embeddings)))))
    return _evidence(report, examples, found, regressed, n_rows, texts, embeddings, embedding_index, item_scores, None)


def regressed_texts(
    attribution: Mapping[str, Any], eval_examples: Sequence[Any] | Mapping[int, str] | None
) -> list[str]:
    """The regressed items' texts as :func:`build_report` holds them (what the forgetting step compares)."""
    regressed = _regressed_with_text(Report.from_dict(attribution).regressed, *texts_of(eval_examples))
    return [str(r.text) for r in regressed if r.text]


def _evidence(report: Report, examples: list[RankedRow], found: list[Finding], regressed: list[EvalItem],
              n_rows: int, texts: dict[int, str], embeddings: np.ndarray | None,
              embedding_index: Sequence[int] | None, item_scores: np.ndarray | None,
              token_profiles: TokenProfiles | None) -> Evidence:  # fmt: skip
    """The verdict's evidence from the report's rows, findings and regressed items, and the saved per-item harm
    (``settings.query_items`` x rows, columns in ``embedding_index`` order)."""
    query = report.settings.get("query_items") or []
    matched = matched_item_harm(item_scores, query, [r.index for r in regressed], embedding_index)
    regression = report.settings.get("regression")
    return evidence(
        examples,
        found,
        len(regressed),
        n_rows=n_rows,
        item_scores=matched.S if matched else None,
        item_rows=matched.rows if matched else embedding_index,
        texts=texts or None,
        regression=regression if isinstance(regression, Mapping) else None,
        embeddings=embeddings,
        token_profiles=token_profiles,
        item_harm=matched,
        item_texts=[str(r.text) for r in regressed if r.text],
    )


def _ranked_examples(rows: Sequence[RankedRow]) -> list[RankedRow]:
    """The examples without derived keys, in rank order (by score where no rank is saved), each with its rank."""
    for e in rows:
        e.forget(DERIVED_EXAMPLE_KEYS)
    examples = sorted(rows, key=lambda e: (e.rank if e.rank is not None else math.inf, -(e.score or 0)))
    for r, e in enumerate(examples, start=1):
        if e.rank is None:
            e.set(rank=r)
    return examples


def _train_texts(
    train_examples: Sequence[Any] | Mapping[int, str] | None,
    saved: Mapping[int, str],
    examples: Sequence[RankedRow],
    label_words: int,
) -> dict[int, str]:
    """Training row index -> text (given rows first, then text saved by an earlier build); fills in missing ids, and
    each row's label (:func:`label_of`) where the given rows are Examples."""
    texts, ids = texts_of(train_examples)
    for i, text in saved.items():
        texts.setdefault(i, text)
    labels = {}
    if train_examples and not isinstance(train_examples, Mapping):
        labels = {int(x.index): lab for x in train_examples if (lab := label_of(x, label_words)) is not None}
    for e in examples:
        if e.id is None and e.index in ids:
            e.set(id=ids[e.index])
        if e.label is None and e.index in labels:
            e.set(label=labels[e.index])
    return texts


ClusterResult = tuple[list[Cluster], ClusteringInfo, dict[int, int]]  # clusters, clustering, row -> cluster


@dataclass
class Saved:
    """What a report built before keeps for the next build: the shown rows' text, the cluster assignment, labels and
    map, the findings and logs; and the per-item contributions of the attribution."""

    texts: dict[int, str]
    assignment: dict[int, int]  # row -> cluster id
    clusters: list[Cluster]  # empty unless the report was built before
    clustering: ClusteringInfo | None
    findings: list[Finding]
    logs: TrainerLog | None
    contributions: dict[int, dict[int, float]]

    @classmethod
    def of(cls, report: Report, *, built: bool) -> Saved:
        rows = report.examples
        return cls(
            texts={e.index: str(e.text) for e in rows if e.text is not None},
            assignment={e.index: int(e.cluster) for e in rows if e.cluster is not None},
            clusters=list(report.clusters) if built else [],
            clustering=report.clustering,
            findings=list(report.findings),
            logs=report.logs,
            contributions=per_item_contributions(report),
        )


def _fitted_clusters(
    embeddings: np.ndarray,
    embedding_index: Sequence[int] | None,
    scores: Mapping[int, float],
    texts: dict[int, str],
    findings: Sequence[Finding],
    k: int | None,
    seed: int,
) -> ClusterResult:
    """Clusters fitted to the gradient embeddings, with the 2-D map."""
    emb = np.asarray(embeddings, dtype=np.float64)
    if emb.ndim != 2:
        raise GradianError(f"embeddings must be 2-D (n_rows, k), got shape {emb.shape}", where="embeddings")
    index = [int(i) for i in (embedding_index if embedding_index is not None else range(emb.shape[0]))]
    if len(index) != emb.shape[0]:
        raise GradianError(
            f"{len(index)} embedding row indices for {emb.shape[0]} embedding rows", where="embeddings index"
        )
    fit = fit_clusters(emb, k=k, seed=seed)
    clusters, row_cluster = summarize_clusters(
        fit.assignment, index, scores, texts=texts or None, findings=findings, top_rows=10
    )
    clustering = ClusteringInfo(
        fit.how,
        fit.k,
        fit.silhouette,
        {str(kk): round(v, 4) for kk, v in fit.scores_by_k.items()},
        _map(index, fit.coords, row_cluster, scores, seed),
        order=ClusteringInfo.FITTED,  # a silhouette not measured (k given) is written as null
    )
    return clusters, clustering, row_cluster


def _saved_clusters(
    previous: Saved, scores: Mapping[int, float], texts: dict[int, str], findings: Sequence[Finding]
) -> ClusterResult:
    """The cluster assignment, labels and map of a report built before, summarised again."""
    saved = previous.assignment
    index = sorted(saved)
    labels = {c.id: c.label for c in previous.clusters}
    clusters, row_cluster = summarize_clusters(
        [saved[i] for i in index],
        index,
        scores,
        texts=texts if len(texts) >= len(index) else None,
        findings=findings,
        top_rows=10,
        labels=labels,
    )
    old = previous.clustering or ClusteringInfo()
    clustering = dataclasses.replace(old, how=old.how or "saved cluster assignment")
    if old.map is not None and old.map.to_dict():
        m = dataclasses.replace(old.map)
        m.set(cluster=[row_cluster.get(int(i)) for i in m.index or []])
        clustering.map = m
    return clusters, clustering, row_cluster


def _annotate_examples(
    examples: Sequence[RankedRow],
    findings: Sequence[Finding],
    row_cluster: Mapping[int, int],
    texts: Mapping[int, str],
    contributions: Mapping[int, Mapping[int, float]],
    top_n: int,
) -> None:
    """Every example gains its cluster and finding codes; the ``top_n`` shown rows their text and contributions."""
    row_codes: dict[int, list[str]] = {}
    for f in findings:
        for r in f.train_rows():
            codes = row_codes.setdefault(r, [])
            if f.code not in codes:
                codes.append(f.code)
    for e in examples:
        i = e.index
        e.set(cluster=row_cluster.get(i), findings=row_codes.get(i, []))
        if e.rank is not None and e.rank <= top_n:
            if i in texts:
                e.set(text=texts[i][:TEXT_CHARS])
            if i in contributions:
                ranked = sorted(contributions[i].items(), key=lambda t: -t[1])
                e.set(contributions=[Contribution(item, s) for item, s in ranked])


def _regressed_with_text(
    regressed: Sequence[EvalItem], eval_texts: Mapping[int, str], eval_ids: Mapping[int, Any]
) -> list[EvalItem]:
    """The regressed eval items, each with its text and id from the eval rows when given."""
    for r in regressed:
        if r.index in eval_texts:
            r.set(text=eval_texts[r.index][:TEXT_CHARS])
        if r.id is None and r.index in eval_ids:
            r.set(id=eval_ids[r.index])
    return list(regressed)


def _map(
    index: Sequence[int],
    coords: np.ndarray | None,
    row_cluster: Mapping[int, int],
    scores: Mapping[int, float],
    seed: int,
) -> ClusterMap:
    """The 2-D map points, at most MAP_POINTS (the most harmful rows always kept, the rest a seeded sample)."""
    if coords is None or len(index) == 0:
        return ClusterMap()
    n = len(index)
    keep = np.arange(n)
    if n > MAP_POINTS:
        by_harm = np.argsort([-scores.get(int(i), 0.0) for i in index], kind="stable")
        top = set(by_harm[: MAP_POINTS // 10].tolist())
        rest = np.array([j for j in range(n) if j not in top])
        rng = np.random.default_rng(seed)
        pick = rng.choice(rest, size=MAP_POINTS - len(top), replace=False)
        keep = np.sort(np.concatenate([np.array(sorted(top)), pick]))
    return ClusterMap(
        how="first two principal components (SVD) of the L2-normalised embeddings",
        index=[int(index[j]) for j in keep.tolist()],
        x=[round(float(coords[j, 0]), 5) for j in keep.tolist()],
        y=[round(float(coords[j, 1]), 5) for j in keep.tolist()],
        cluster=[row_cluster.get(int(index[j])) for j in keep.tolist()],
    )
