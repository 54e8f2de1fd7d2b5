"""The words of training rows: each row's terms, the terms that set a set of rows apart, and the rows a diagnose
finding flags. The verdict describes a content group by them; the report labels its clusters with them."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gradian.diagnose.types import Finding

_WORD = re.compile(r"[a-z][a-z0-9'_-]{1,30}")
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between both
    but by can could did do does doing down during each few for from further had has have having he her here hers
    herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves s t don didn doesn isn wasn weren won
    wouldn shouldn couldn ll re ve d m o y also one two get got go went said says let us may might must shall""".split()
)


def terms_of(text: str) -> Counter[str]:
    """Lower-case word counts of a text, without stopwords."""
    words = (w.strip("'_-") for w in _WORD.findall(text.lower()))
    return Counter(w for w in words if w and w not in STOPWORDS)


def distinctive_terms(
    member_terms: Sequence[Mapping[str, int]],
    other_terms: Sequence[Mapping[str, int]],
    *,
    top: int = 4,
    min_share: float = 0.2,
) -> list[str]:
    """Terms frequent in the cluster's rows and rare in the rest (a smoothed TF-IDF-like contrast of document
    frequencies): score = p_in * log(p_in / p_out), p_in / p_out the share of rows holding the term inside / outside
    (outside smoothed by +0.5 / +1); kept when p_in >= min_share (and >= 2 rows unless the cluster is one row) and
    p_in > p_out. Ties go to the term used more often in the cluster, then alphabetically."""
    n_in, n_out = len(member_terms), len(other_terms)
    if n_in == 0:
        return []
    df_in = Counter(t for terms in member_terms for t in terms)
    df_out = Counter(t for terms in other_terms for t in terms)
    tf_in: Counter[str] = Counter()
    for terms in member_terms:
        tf_in.update(terms)
    min_rows = 1 if n_in == 1 else 2
    scored = []
    for term, c in df_in.items():
        p_in = c / n_in
        p_out = (df_out.get(term, 0) + 0.5) / (n_out + 1.0)
        if c < min_rows or p_in < min_share or p_in <= p_out:
            continue
        scored.append((-round(p_in * math.log(p_in / p_out), 9), -tf_in[term], term))
    scored.sort()
    return [t for _, _, t in scored[:top]]


def finding_train_rows(finding: Mapping[str, Any]) -> list[int]:
    """Training-row indices a diagnose finding (a report.json dict) flags: :meth:`Finding.train_rows`."""
    return Finding.from_dict(finding).train_rows()


def finding_title(finding: Mapping[str, Any]) -> str:
    """A short human name for a finding (a report.json dict): :attr:`Finding.title`."""
    return Finding.from_dict(finding).title
