"""The verdict in one call, from report.json's shapes: the evidence built, the steps run, the decision written."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gradian.attribute.token_profiles import TokenProfiles
from gradian.diagnose.types import Finding
from gradian.options.verdict import VerdictOptions
from gradian.verdict.evidence import ClusterLike, evidence
from gradian.verdict.schema import Verdict
from gradian.verdict.steps import decide
from gradian.verdict.words import culprit_clusters, write


def make_verdict(
    clusters: Sequence[ClusterLike],
    findings: Sequence[Finding | Mapping[str, Any]],
    examples: Sequence[Any],
    regressed: Sequence[Any],
    *,
    n_rows: int | None = None,
    item_scores: np.ndarray | None = None,
    item_rows: Sequence[int] | None = None,
    texts: Mapping[int, str] | None = None,
    regression: Mapping[str, Any] | None = None,
    policy: VerdictOptions | None = None,
    embeddings: np.ndarray | None = None,
    token_profiles: TokenProfiles | None = None,
) -> Verdict:
    """Decide what the report says. ``examples`` are the ranked rows (report.json's ``{"index", "id", "score",
    "label"}`` or objects with those attributes); ``clusters`` the report's clusters (only named, for the cluster
    table); ``regressed`` the regressed items (counted; their ``text`` is what forgetting compares); ``item_scores``
    is the per-item harm of the regressed items (items x rows, columns in ``item_rows`` order) for the stability
    check; ``regression`` is attribute's ``settings.regression`` (the drift and cut-off the regressed items passed);
    ``embeddings`` are the rows' gradient directions (row j is training row ``item_rows[j]``, the one order attribute
    saves both in; default j), which culprit groups extend along, as they do along ``token_profiles``.

    Returns the :class:`Verdict`; its ``kind`` is one of ``no_regression``, ``no_harm``, ``concentrated``,
    ``spread``, ``setup`` (rows stood out, but a setup error makes the run unreliable: none named); ``cause`` one of
    ``mechanical``, ``content``, ``mechanical+content``, ``setup``, ``forgetting``, ``unknown``.
    """
    o = policy or VerdictOptions()
    item_texts = [str(t) for r in regressed if (t := _get(r, "text"))]
    ev = evidence(examples, findings, len(regressed), n_rows=n_rows, item_scores=item_scores, item_rows=item_rows,
                  texts=texts, regression=regression, embeddings=embeddings, token_profiles=token_profiles,
                  item_texts=item_texts)  # fmt: skip
    v = write(ev, decide(ev, o), o)
    v.culprit_clusters = culprit_clusters(clusters, v.drop_rows)
    return v


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)
