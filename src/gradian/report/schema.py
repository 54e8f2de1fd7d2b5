"""The report's typed schema: report.json as dataclasses, shared by build, render, verdict and verify.

:class:`Report` is report.json: attribute's result (``method``, ``settings``, ``options``, ``examples`` as
:class:`RankedRow`, ``regressed`` / ``eval`` as :class:`EvalItem`) joined with what the report layer derives
(``clusters`` as :class:`Cluster`, ``clustering``, ``findings`` as :class:`gradian.diagnose.types.Finding`,
``verdict`` as :class:`gradian.verdict.schema.Verdict`, ``logs``). In-process code reads attributes; the
one ``to_dict`` / ``from_dict`` pair writes and reads report.json.

A report is read, not trusted: a missing field takes the value an empty report has, and a key this version does not
type is kept as it was (``extra``). The objects whose keys are open (:class:`Record`) write them back in the order
they were read, new ones after, so a report.json read and written again is the same file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from gradian.diagnose.types import Finding, Fix
from gradian.options.attribute import AttributeOptions, report_options
from gradian.options.verdict import VerdictOptions
from gradian.record import Record
from gradian.verdict.schema import Verdict

__all__ = ["Cluster", "ClusterFinding", "ClusterMap", "ClusteringInfo", "Contribution", "EvalItem", "Finding", "Fix",
           "LogPoint", "RankedRow", "Record", "Report", "TrainerLog", "Verdict"]  # fmt: skip

SCHEMA = "gradian.report/1"
TOP_ROWS_SHOWN = 25  # the top rows whose text, contributions and token harm the report shows


@dataclass
class Contribution(Record):
    """One regressed item's part of a shown row's harm."""

    item: int
    score: float

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Contribution:
        return cls._read(data, item=data.get("item"), score=data.get("score"))


@dataclass
class RankedRow(Record):
    """A training row in the ranking (report.json ``examples``): attribute's score and rank, and what the report
    adds (cluster, finding codes; for the shown rows their text and per-item contributions)."""

    index: int
    id: Any = None
    score: float | None = None
    rank: int | None = None
    token_harm: list[Any] | None = None  # [[token text, harm or None], ...] (the top rows)
    cluster: int | None = None
    findings: list[str] | None = None
    text: str | None = None
    contributions: list[Contribution] | None = None
    label: str | None = None  # its completion (lowercase, spaces collapsed) when short enough to be a label

    DERIVED: ClassVar[tuple[str, ...]] = ("cluster", "findings", "text", "contributions")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RankedRow:
        contributions = data.get("contributions")
        return cls._read_as_is(
            data,
            index=int(data["index"]),
            contributions=None if contributions is None else [Contribution.from_dict(c) for c in contributions],
        )


@dataclass
class EvalItem(Record):
    """An eval item as attribute measured it (report.json ``regressed`` and ``eval``), with its text once built."""

    index: int
    id: Any = None
    base_nll: float | None = None
    finetuned_nll: float | None = None
    delta: float | None = None
    relative: float | None = None
    n_tokens: int | None = None
    regressed: bool | None = None
    generated: str | None = None  # how the base model wrote its completion, for a prompt-only row
    generations: dict[str, str] | None = None  # {"base", "finetuned"} continuations of its prompt
    score: str | None = None  # "preference": scored by the fine-tune's preference for its own reply (else NLL)
    reply: str | None = None  # scored by preference: the fine-tune's own greedy reply, cut to the same length
    text: str | None = None

    @property
    def change(self) -> float:
        """The NLL rise (fine-tuned minus base; a missing NLL counts as 0), or for an item scored by preference, how
        much more the fine-tune prefers its own reply than the base model does (``delta``)."""
        if self.score == "preference":
            return self.delta or 0.0
        return (self.finetuned_nll or 0) - (self.base_nll or 0)

    @property
    def label(self) -> str:
        """Its id, else ``#index``."""
        return str(self.id if self.id is not None else f"#{self.index}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalItem:
        gens = data.get("generations")
        return cls._read_as_is(
            data, index=int(data["index"]), generations=dict(gens) if isinstance(gens, Mapping) else gens
        )


@dataclass
class LogPoint(Record):
    """One logged trainer step."""

    step: int
    epoch: float | None = None
    loss: float | None = None
    eval_loss: float | None = None
    grad_norm: float | None = None
    learning_rate: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LogPoint:
        return cls._read_as_is(data)


@dataclass
class TrainerLog(Record):
    """The trainer's logged curve (report.json ``logs``)."""

    ALWAYS = frozenset({"source", "total_steps", "points"})

    source: str | None = None
    total_steps: int | None = None
    points: list[LogPoint] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainerLog:
        points = [LogPoint.from_dict(p) for p in data.get("points") or [] if p.get("step") is not None]
        return cls._read(data, source=data.get("source"), total_steps=data.get("total_steps"), points=points)


@dataclass
class ClusterMap(Record):
    """The 2-D map of the rows (report.json ``clustering.map``): row, coordinates and cluster of each point."""

    how: str | None = None
    index: list[int] | None = None
    x: list[float] | None = None
    y: list[float] | None = None
    cluster: list[int | None] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterMap:
        return cls._read_as_is(data)


@dataclass
class ClusteringInfo(Record):
    """How the rows were clustered (report.json ``clustering``)."""

    ALWAYS = frozenset({"how", "k"})
    FITTED: ClassVar[tuple[str, ...]] = ("how", "k", "silhouette", "silhouette_by_k", "map")

    how: str = ""
    k: int = 0
    silhouette: float | None = None
    silhouette_by_k: dict[str, float] | None = None
    map: ClusterMap | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusteringInfo:
        m = data.get("map")
        return cls._read_as_is(
            data, how=str(data.get("how") or ""), map=ClusterMap.from_dict(m) if isinstance(m, Mapping) else m
        )


@dataclass
class ClusterFinding:
    """A diagnose finding as it touches one cluster: how many of the cluster's rows it flags."""

    code: str | None
    name: str | None
    severity: str | None
    count: int
    percent: float  # of the cluster's rows, one decimal
    text: str  # "53% of this cluster is flagged: train eval overlap (D105 train_eval_overlap)"
    fix: Any = None  # the finding's fix as report.json holds it

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterFinding:
        return cls(
            code=data.get("code"),
            name=data.get("name"),
            severity=data.get("severity"),
            count=int(data.get("count") or 0),
            percent=float(data.get("percent") or 0.0),
            text=str(data.get("text") or ""),
            fix=data.get("fix"),
        )


@dataclass
class Cluster:
    """A group of training rows with similar gradients, ranked by the harm it carries (``id`` 1 carries the most)."""

    id: int
    size: int
    size_share: float  # of all clustered rows
    harm_share: float  # of the positive harm
    harm_total: float
    mean_harm: float
    n_harmful: int
    rows: list[int]
    top_rows: list[int]  # the most harmful first
    label: str  # its distinctive terms, joined; or a label saved with the report
    terms: list[str] = field(default_factory=list)
    findings: list[ClusterFinding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cluster:
        return cls(
            id=int(data["id"]),
            size=int(data.get("size") or 0),
            size_share=float(data.get("size_share") or 0.0),
            harm_share=float(data.get("harm_share") or 0.0),
            harm_total=float(data.get("harm_total") or 0.0),
            mean_harm=float(data.get("mean_harm") or 0.0),
            n_harmful=int(data.get("n_harmful") or 0),
            rows=[int(r) for r in data.get("rows") or []],
            top_rows=[int(r) for r in data.get("top_rows") or []],
            label=str(data.get("label") or ""),
            terms=[str(t) for t in data.get("terms") or []],
            findings=[ClusterFinding.from_dict(f) for f in data.get("findings") or []],
        )


@dataclass
class Report(Record):
    """report.json: attribute's result and, once built (:func:`gradian.report.build.build_report`), the clusters,
    findings, verdict and logs joined to it."""

    DERIVED: ClassVar[tuple[str, ...]] = ("clusters", "clustering", "findings", "verdict", "logs", "n_rows")

    schema: str | None = None
    method: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # attribute's settings and results (paths, rule, ...)
    options: AttributeOptions | None = None
    no_regression: bool | None = None
    examples: list[RankedRow] = field(default_factory=list)
    regressed: list[EvalItem] = field(default_factory=list)
    eval: list[EvalItem] | None = None
    n_rows: int | None = None
    clusters: list[Cluster] = field(default_factory=list)
    clustering: ClusteringInfo | None = None
    findings: list[Finding] = field(default_factory=list)
    verdict: Verdict | None = None
    logs: TrainerLog | None = None
    verdict_options: VerdictOptions | None = None  # report.json ``options.verdict``: the thresholds the verdict read

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.pop("verdict_options", None)
        if self.verdict_options is not None:  # beside the attribute options, else last
            saved = out.get("options") if self.options is not None else out.pop("options", None)
            out["options"] = {**(saved or {}), "verdict": self.verdict_options.to_dict()}
        return out

    def attribute_options(self) -> AttributeOptions:
        """The options the report was made with: ``options``, or for an older report.json without them, the option
        values its ``settings`` recorded (the rest at their defaults)."""
        return self.options if self.options is not None else report_options({"settings": self.settings})

    @property
    def row_count(self) -> int:
        """The training rows scored (``n_rows``, else the ranked rows)."""
        return self.n_rows if self.n_rows is not None else len(self.examples)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        """report.json read back (attribute's result, or a built report); older files load (missing keys empty)."""
        options = data.get("options")
        settings = data.get("settings")
        clustering, verdict, logs = data.get("clustering"), data.get("verdict"), data.get("logs")
        typed: dict[str, Any] = {
            "schema": data.get("schema"),
            "method": data.get("method"),
            "settings": dict(settings) if isinstance(settings, Mapping) else {},
            "no_regression": data.get("no_regression"),
            "examples": [RankedRow.from_dict(e) for e in data.get("examples") or []],
            "regressed": [EvalItem.from_dict(r) for r in data.get("regressed") or []],
            "eval": None if data.get("eval") is None else [EvalItem.from_dict(r) for r in data["eval"]],
            "n_rows": data.get("n_rows"),
            "clusters": [Cluster.from_dict(c) for c in data.get("clusters") or []],
            "clustering": ClusteringInfo.from_dict(clustering) if isinstance(clustering, Mapping) else None,
            "findings": [Finding.from_dict(f) for f in data.get("findings") or []],
            "verdict": Verdict.from_dict(verdict) if isinstance(verdict, Mapping) else None,
            "logs": TrainerLog.from_dict(logs) if isinstance(logs, Mapping) else None,
        }
        if isinstance(options, Mapping) and set(options) - {"verdict"}:
            typed["options"] = AttributeOptions.from_dict(options)
        if isinstance(options, Mapping) and isinstance(options.get("verdict"), Mapping):
            typed["verdict_options"] = VerdictOptions.from_dict(options["verdict"])
        return cls._read(data, **typed)
