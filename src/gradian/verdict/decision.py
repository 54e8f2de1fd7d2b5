"""The decision as the steps make it (:mod:`gradian.verdict.steps`): each step reads the :class:`Evidence` and refines
one :class:`Decision`; :mod:`gradian.verdict.words` then writes it as the report's sentences."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gradian.diagnose.types import Finding
from gradian.verdict.culprits import Culprits, FindingTest, Head, Reading, UndrivenRead
from gradian.verdict.driven import DrivenItems
from gradian.verdict.finding_leads import FindingLead
from gradian.verdict.forgetting import Forgetting
from gradian.verdict.groups import Group
from gradian.verdict.label_leads import LabelLead
from gradian.verdict.term_hints import TermHint


@dataclass
class Decision:
    """What the verdict decided so far. ``kind``: no_regression | no_harm | concentrated | spread | setup; ``cause``:
    mechanical | content | mechanical+content | setup | forgetting | unknown; ``stopped``: nothing is left to decide
    (no regression, or no harm)."""

    rd: Reading  # the harm, rows, findings and thresholds every culprit test reads (one Bonferroni family)
    errors: list[Finding] = field(default_factory=list)  # setup errors: the run itself is broken
    kind: str = ""
    cause: str = "unknown"
    stopped: bool = False
    at: int = 0  # the steps run so far (gradian.verdict.steps.STEPS[:at])
    head: Head | None = None  # the rows whose harm stands out, and how well they survive resampling
    harmful: list[FindingTest] = field(default_factory=list)  # findings whose flagged rows carry the harm
    seeded: np.ndarray | None = None  # those findings' rows with harm above the median
    groups: list[Group] = field(default_factory=list)
    stability: float | None = None
    basis: str = "head"  # "head" | "finding": what stability measures
    undriven: list[UndrivenRead] = field(default_factory=list)
    set_aside: list[Group] = field(default_factory=list)
    culprit_rows: list[int] = field(default_factory=list)  # most harmful first (not concentrated: the candidate)
    head_share: float = 0.0
    concentrated: bool = False
    reason: str = ""
    hints: list[TermHint] = field(default_factory=list)
    leads: list[LabelLead] = field(default_factory=list)
    finding_leads: list[FindingLead] = field(default_factory=list)
    driven: DrivenItems | None = None
    expected_recovery: float | None = None
    recovery_calibrated: bool = True  # expected_recovery is calibrated for this regression (recovery.calibrated)
    recovers_little: bool = False  # dropping the named rows brings back under forgetting_leads_below
    forgetting: Forgetting | None = None
    forgetting_first: bool = False  # the forgetting fix leads the next steps

    @property
    def carriers(self) -> list:
        return [t.finding for t in self.harmful]

    @property
    def drop_rows(self) -> list[int]:
        return list(self.culprit_rows) if self.kind == "concentrated" else []

    @property
    def names_content_group(self) -> bool:
        """A concentrated decision without setup errors that names a content group: what token profiles are for."""
        return self.concentrated and not self.errors and any(g.cause == "content" for g in self.groups)

    def culprits(self) -> Culprits:
        head = self.head
        return Culprits(
            self.concentrated, self.culprit_rows, self.head_share, self.stability, self.groups, self.reason,
            self.harmful, self.basis, head.raw if head is not None else 0, self.rd.family[0], self.undriven,
            self.set_aside,
        )  # fmt: skip
