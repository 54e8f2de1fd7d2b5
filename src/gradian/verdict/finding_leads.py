"""Where a spread harm leans: the rows a diagnose finding flags that carry more than their share of it, as a set.

A finding's rows join the culprits only when their share of the positive harm is ``enrichment`` x their share of the
rows (:mod:`gradian.verdict.culprits`, the finding test). Below that bar they can still carry more than their share,
clearly: on a real chat model fine-tuned on math rows with a safety set's refusals mixed in, the 16 refusals carry
1.6x their share and rank above the other rows (p = 0.005), and retraining without them brings back a fifth of the
regression while the model's forgetting of general chat from the math rows is the rest. A spread verdict that names
forgetting alone hides that fifth.

So when the verdict is spread, each finding that reports a problem (a warning or an error) and flags training rows is
tested as the finding test does (one-sided rank-sum under the verdict's one Bonferroni level, held in
``keep_frequency`` of the resamples of the regressed items) with the bar ``lead_enrichment`` x their share of the rows
in place of ``enrichment``. A finding that passes is a *lead*: its rows are listed to read, most harmful first, with
what dropping them should bring back (:func:`gradian.verdict.recovery.expected_recovery`); they stay out of
``drop_rows``, since they do not explain the regression.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from gradian.diagnose.types import Fix
from gradian.options.verdict import VerdictOptions
from gradian.verdict.culprits import harmful_findings
from gradian.verdict.recovery import expected_recovery


@dataclass
class FindingLead:
    """The rows of one finding that carry more than their share of a spread harm."""

    code: str
    name: str
    rows: list[int]  # the flagged scored rows, most harmful first
    harm_share: float  # their share of the positive harm
    row_share: float  # their share of the scored rows
    p: float  # one-sided rank-sum p of their harm against the other rows'
    frequency: float | None  # share of the resamples in which the test holds; None when not measurable
    expected_recovery: float  # the share of the summed regression dropping them should bring back
    fix: str = ""  # the finding's fix

    @property
    def title(self) -> str:
        return f"{self.name.replace('_', ' ')} ({self.code} {self.name})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "size": len(self.rows)}


def finding_leads(
    S: np.ndarray | None,
    s: np.ndarray,
    rows: Sequence[int],
    findings: Sequence[Mapping[str, Any]],
    policy: VerdictOptions,
    harm: Mapping[int, float],
    family: list[int] | None = None,
) -> list[FindingLead]:
    """The findings whose flagged rows carry more of the harm ``s`` than their share (row ``rows[j]`` has harm
    ``s[j]``; ``S`` the regressed items x rows, for the resamples), most harmful share first; ``harm``: every
    training row's harm, for the expected recovery (as the named rows')."""
    if policy.lead_enrichment <= 0:
        return []
    tests = harmful_findings(S, s, rows, findings, replace(policy, enrichment=policy.lead_enrichment), family)
    pos = np.clip(s, 0, None)
    total = float(pos.sum())
    order = np.argsort(-s, kind="stable")
    out = []
    for t in tests:
        picked = [int(rows[j]) for j in order if t.flagged[j]]
        out.append(
            FindingLead(
                str(t.finding.get("code") or "?"),
                str(t.finding.get("name") or ""),
                picked,
                float(pos[t.flagged].sum()) / total if total > 0 else 0.0,
                float(t.flagged.mean()),
                t.p,
                t.frequency,
                round(expected_recovery(harm, picked, policy.recovery_per_harm_share), 3),
                fix.text if (fix := Fix.from_dict(t.finding.get("fix"))) is not None else "",
            )
        )
    return sorted(out, key=lambda lead: -lead.harm_share)
