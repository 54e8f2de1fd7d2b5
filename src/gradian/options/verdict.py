"""The verdict's thresholds (:mod:`gradian.verdict`): every number the decision reads, with its help text. report.json
saves them (``options.verdict``, and ``verdict.policy`` beside the verdict they made); `gradian attribute` and
`gradian report` take them as flags. The defaults are calibrated on the planted-fault suite (``bench/scenarios``;
docs/benchmarks.md), never on one run."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from gradian.options.base import OptionError, Options, option

# The decision's named steps, in the order they run (gradian.verdict.steps); ``skip`` switches any of them off.
STEP_NAMES = (
    "regression",
    "head",
    "findings",
    "groups",
    "extension",
    "explain_away",
    "share",
    "tokens",
    "describe",
    "setup_first",
    "effect",
    "forgetting",
)


@dataclass(frozen=True)
class VerdictOptions(Options):
    """The thresholds of the verdict's culprit decision and of what it adds (driven items, expected recovery,
    forgetting); see docs/concepts.md, the verdict."""

    name: ClassVar[str] = "verdict"
    panel: ClassVar[str | None] = "Verdict thresholds"

    head_z: float = option(
        2.0,
        "Head: harm above median + this many robust spreads.",
        min=0,
    )
    max_head_fraction: float = option(
        0.3,
        "Head: at most this share of the rows.",
        min=0,
    )
    min_head_share: float = option(
        0.2,
        "A culprit head carries at least this share of the positive harm, unless every group is a "
        "finding's rows that the finding test found carrying the harm; beside a mechanical group, so does each "
        "content group (a lighter one is set aside: listed to read, not named).",
        min=0,
    )
    bootstrap: int = option(
        200,
        "Resamples of the regressed items for the stability check.",
        min=0,
    )
    resample_items: int = option(
        40,
        "Each resample draws this many of the regressed items (with replacement; as many as there are "
        "when fewer), so that agreement means the same on a large eval set as on the eval sets the thresholds "
        "were calibrated on: a resample of all of 200 items repeats most of them, and any head agrees with it "
        "(0: as many as there are).",
        min=0,
    )
    min_stability: float = option(
        0.6,
        "A culprit head's mean Jaccard agreement with the rows that lead each resample of the regressed "
        "items (its len(head) most harmful rows).",
        min=0,
    )
    high_stability: float = option(
        0.8,
        "Confidence: high at this agreement (or share of resamples, for a verdict that rests on findings), "
        "medium from min_stability, low under it. On the suite, 92% of the high verdicts that name rows and 81% "
        "of the medium ones reach precision 0.8 (CHANGELOG.md, the planted-fault suite).",
        min=0,
    )
    keep_frequency: float = option(
        0.5,
        "A head row is kept when it is among the rows that lead this share of the resamples.",
        min=0,
    )
    min_items_for_stability: int = option(
        3,
        "Fewer regressed items than this: stability cannot be measured.",
        min=0,
    )
    flag_share: float = option(
        0.5,
        "A finding describes a group when it flags this share of the group's rows.",
        min=0,
    )
    min_group_share: float = option(
        0.2,
        "A mechanical group holds at least this share of the head rows; beside one, a content group holds "
        "this share of the groups' rows once rows pointing its way have moved there, or is set aside.",
        min=0,
    )
    enrichment: float = option(
        1.75,
        "Effect size: a mechanical finding describes the head when its share of the head rows is this "
        "multiple of its share of the file, and a finding's rows carry the harm when their share of the positive "
        "harm is this multiple of their share of the rows.",
        min=0,
    )
    lead_enrichment: float = option(
        1.0,
        "On a spread harm, a warning's flagged rows are listed as a lead (rows to read, with what dropping them "
        "should bring back; not named) when their share of the positive harm is this multiple of their share of the "
        "rows and their harm ranks above the other rows' (the finding test at finding_alpha; 0: off).",
        min=0,
    )
    extend_mechanical: bool = option(
        True,
        "A mechanical group also takes the finding's other rows, those whose harm helps too: the defect is "
        "in every row the finding flags, and its fix is the finding's.",
    )
    extend_content: bool = option(
        True,
        "A content group that a carrying finding describes (its flagged rows carry the harm, and it flags at least "
        "flag_share of the group) also takes that finding's other rows: the fix the finding gives is for them all.",
    )
    extend_z: float = option(
        3.0,
        "A content group also takes rows with harm above the median whose gradient direction is this many "
        "robust spreads closer to the group's mean direction than the low-harm rows are; content rows this close "
        "to a mechanical group move to it (0: off).",
        min=0,
    )
    head_fdr: float = option(
        0.2,
        "When > 0, the head is the rows whose local false discovery rate against the bulk's empirical "
        "null is below this, instead of the head_z cut.",
        min=0,
    )
    finding_alpha: float = option(
        0.05,
        "A finding whose flagged rows carry >= enrichment x their row share of the positive harm and "
        "whose harm ranks above the other rows' (one-sided rank-sum test at this level over the findings tested, "
        "in the full set and in keep_frequency of the resamples) adds its rows with harm above the median to the "
        "head, even when no head stands out (0: off).",
        min=0,
    )
    driven_z: float = option(
        2.0,
        "Explain away: a regressed item is driven by the groups when their harm on it is this many "
        "standard deviations above that of random rows of the same size (gradian.verdict.driven, as gradian "
        "verify reads it); the rest is also read on the items no group drives (0: off).",
        min=0,
    )
    driven_alpha: float = option(
        0.05,
        "The groups drive items only when they drive more than random rows would at this level.",
        min=0,
    )
    token_share: float = option(
        0.5,
        "A named content group's harm tokens carry this share of its rows' positive harm; a row with harm "
        "above the median whose positive harm sits on them at this share joins it, unless this share of the "
        "rows that hold the tokens do too (the tokens are then what the rows are, such as a label) (0: off).",
        min=0,
    )
    seed: int = option(
        0,
        "Seed of the resamples.",
        min=0,
        flag="--verdict-seed",
    )
    setup_row_share: float = option(
        0.5,
        "An ERROR finding whose rows cover at least this share of the training rows (or one without rows) is a setup "
        "error: the verdict says to fix the setup first and names no rows.",
        min=0,
    )
    label_words: int = option(
        5,
        "A completion of at most this many words is a label (as diagnose reads a label set): a group whose rows share "
        "one is told to check its labels, and a spread harm that leans on one label's rows says so.",
        min=0,
    )
    recovery_per_harm_share: float = option(
        1.05,
        "Expected recovery: the share of the summed regression that dropping the named rows brings back, per unit of "
        "their share of the positive harm (capped at 1; the retrains' least-squares slope, "
        "bench/results/expected_recovery.md).",
        min=0,
    )
    forgetting_bulk_share: float = option(
        0.5,
        "Forgetting: the rows the verdict does not name carry at least this share of the positive harm.",
        min=0,
    )
    forgetting_far_quantile: float = option(
        0.05,
        "Forgetting: a regressed item is far from the training data when its nearest training row (word-set Jaccard) "
        "is less similar to it than this quantile of the training rows' similarities to their nearest other row.",
        min=0,
    )
    forgetting_far_share: float = option(
        0.5, "Forgetting: at least this share of the regressed items are far from the training data.", min=0
    )
    forgetting_leads_below: float = option(
        0.5,
        "Beside named rows, the forgetting fix comes first when dropping the rows should bring back less than this "
        "share of the regression (expected recovery).",
        min=0,
    )
    skip: tuple[str, ...] = option(
        (),
        "Decision steps to switch off (" + ", ".join(STEP_NAMES) + "): for ablations, not for use.",
        cli=False,
    )

    def _check(self) -> None:
        for key, v in self.to_dict().items():
            if isinstance(v, float) and not math.isfinite(v):
                raise OptionError(f"verdict option {key} must be a finite number, got {v!r}")
        if self.driven_alpha > 1 or self.finding_alpha > 1:
            raise OptionError("the verdict's test levels (driven_alpha, finding_alpha) are at most 1")
        unknown = sorted(set(self.skip) - set(STEP_NAMES))
        if unknown:
            raise OptionError(f"unknown verdict step {unknown[0]!r}", fix="use one of " + ", ".join(STEP_NAMES))

    def runs(self, step: str) -> bool:
        """Whether the decision step ``step`` is on."""
        return step not in self.skip

    def policy(self) -> dict[str, Any]:
        """The thresholds as report.json's ``verdict.policy`` records them (``skip`` only when set)."""
        out = self.to_dict()
        if not self.skip:
            out.pop("skip")
        return out
