"""The options of `gradian attribute` (and of ``gradian.attribute(...)``): every default, help text and check."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gradian.options.base import OptionError, Options, option

METHODS = ("ekfac", "kfac", "datainf", "exact", "identity", "cosine")  # gradian.attribute.scores implements them
FACTOR_METHODS = ("ekfac", "kfac")  # the Kronecker-factored methods (the only ones --fisher true changes)
FISHERS = ("empirical", "true")
QUERIES = ("regressed", "all")
WEIGHTINGS = ("uniform", "regression")
STORE_DTYPES = ("auto", "fp32", "bf16")
# The option values report.json's settings record (the other settings keys are results, some with an option's name)
SETTINGS_KEYS = ("method", "damping", "damping_factor", "proj_dim", "proj_seed", "query", "weighting", "threshold",
                 "noise_multiple", "batch_size", "fisher", "store_dtype", "eval_eos")  # fmt: skip


@dataclass(frozen=True)
class AttributeOptions(Options):
    """How `gradian attribute` scores the training rows. Saved as ``options`` in report.json."""

    name: ClassVar[str] = "attribute"

    method: str = option("ekfac", "Preconditioning: " + " | ".join(METHODS) + ".", choices=METHODS)
    damping: float | None = option(None, "Absolute damping (default: damping-factor x mean eigenvalue).")
    damping_factor: float = option(0.1, "Damping as a share of the mean eigenvalue (when --damping is not given).")
    fisher: str = option(
        "empirical",
        "Curvature of ekfac/kfac: empirical (the data's labels; free with the training pass) or true (labels sampled "
        "from the fine-tuned model, seeded; one more forward+backward).",
        choices=FISHERS,
    )
    fisher_seed: int = option(0, "Seed of the labels --fisher true samples.")
    proj_dim: int | None = option(
        None, "Random projection of each block's wide side (0 = exact; default: auto by size).", min=0
    )
    proj_seed: int = option(0, "Seed of the random projection.")
    query: str = option("regressed", "regressed (default) or all eval items.", choices=QUERIES)
    weighting: str = option("uniform", "uniform or regression (weight items by NLL rise).", choices=WEIGHTINGS)
    threshold: float = option(
        0.02,  # gradian.attribute.regression.RegressionRule reads it from here
        "Floor of the regression rule: an item's NLL must rise by more (nats/token) and beyond the drift.",
    )
    noise_multiple: float = option(
        2.0,  # gradian.attribute.regression.RegressionRule reads it from here
        "Gate of the regression rule: some item must rise by more than this multiple of the fine-tune's drift (the "
        "spread of the items that improved), or the items as a set must rise (sign test); 0 counts every rise past "
        "--threshold, e.g. when the items that improved are the fine-tune's purpose, not noise.",
        min=0,
    )
    device: str | None = option(None, "cpu, cuda, cuda:N (default: auto).")
    dtype: str | None = option(None, "auto | fp32 | bf16 | fp64 (default: bf16 on GPU).")
    batch_size: int = option(8, "Rows per forward/backward pass.", min=1)
    checkpoints: str = option(
        "last",
        "last (the adapter), all (every checkpoint-* of the run) or e.g. 200,400: combined with learning-rate weights.",
    )
    store_dtype: str = option(
        "auto",
        "Stored per-row gradients: auto (bf16 for a bf16 model, else fp32), fp32 or bf16 (half the disk; factors "
        "stay fp64).",
        choices=STORE_DTYPES,
    )
    max_length: int | None = option(None, "Override the trainer's max length.", min=1)
    eval_eos: bool = option(False, "Append EOS to eval completions before scoring.")
    eval_samples: int = option(
        0,
        "Eval rows with only a prompt get the base model's completion: 0 = one greedy completion, N = N sampled ones "
        "(each an eval item).",
        min=0,
    )
    eval_seed: int = option(0, "Seed of the sampled eval completions.")
    eval_cut: bool = option(
        True,
        "Cut each generated eval completion after the first token where the fine-tune departs: its most likely "
        "next token differs from the base model's, or its NLL of that token is more than --eval-cut-rise nats "
        "higher (--no-eval-cut: keep it whole).",
        flag="--eval-cut/--no-eval-cut",
    )
    eval_cut_rise: float = option(
        0.1,
        "With --eval-cut, a generated token whose NLL under the fine-tune is more than this many nats above the base "
        "model's is a departure too (the argmax may not move).",
        min=0,
    )
    eval_min_tokens: int = option(
        16,
        "With --eval-cut, a generated eval completion keeps at least this many tokens of the base model's reply (all "
        "of it when shorter): one token holds the reply's first word, not the behaviour that changed.",
        min=1,
    )
    eval_preference: bool = option(
        True,
        "When no eval item regressed by NLL, score each greedy generated item by preference instead: how much more the "
        "fine-tune prefers its own greedy reply over the base model's (same length) than the base model does "
        "(--no-eval-preference: NLL only).",
        flag="--eval-preference/--no-eval-preference",
    )
    max_new_tokens: int = option(32, "Tokens generated per eval completion and per continuation.", min=1)
    generations: int = option(
        20, "The N most regressed items are shown as the base model's and the fine-tune's greedy continuations.", min=0
    )
    token_harm: int = option(
        25, "The N top rows get their harm split over their tokens (the report shows the top 25).", min=0
    )
    token_profiles: float = option(
        0.3,
        "When the verdict names a content group, the rows of this share, most harmful first, that can move a group "
        "(its rows, then the rows that hold its harm tokens) get their harm split over their tokens, and the group "
        "also takes the rows whose harm sits on its tokens. Costs a forward-mode pass over those rows (each about "
        "a row of the training pass on SmolLM2, 1.6x on the tiny stories260K), only on runs whose verdict names a "
        "content group (0 = never).",
        min=0,
    )
    token_profiles_always: bool = option(
        False, "Split every --token-profiles row's harm over its tokens, whatever the verdict (to calibrate it)."
    )
    trust_remote_code: bool = option(False, "Allow the base model's own code.")
    top: int = option(20, "Rows shown and explained per item.", min=0)
    extra_methods: tuple[str, ...] = option((), "Other methods scored from the same stored gradients.", cli=False)
    shard_rows: int | None = option(None, "Rows per gradient-store shard (default: about 256 MiB).", cli=False, min=1)
    gradients: str = option(
        "auto",
        "Training gradients: auto (those a GradianCallback recorded in the run's folder, when they match the rows and "
        "the projection; else one pass) or pass (always one pass at the final adapter).",
        choices=("auto", "pass"),
    )

    def _check(self) -> None:
        if self.fisher == "true" and self.method not in FACTOR_METHODS:
            uses = "the training gradients themselves as its curvature" if self.method in ("datainf", "exact") else (
                "no curvature")  # fmt: skip
            raise OptionError(
                f"--fisher true is for the Kronecker-factored methods; --method {self.method} uses {uses}",
                fix="use --method ekfac or kfac with --fisher true, or --fisher empirical",
            )
        if self.token_profiles > 1:
            raise OptionError(f"--token-profiles {self.token_profiles} is a share of the rows, above 1",
                              fix="pass a share from 0 to 1, e.g. --token-profiles 0.3")  # fmt: skip
        for m in self.extra_methods:
            if m not in METHODS:
                raise OptionError(f"unknown extra method {m!r}", fix="use one of " + ", ".join(METHODS))

    @property
    def methods(self) -> tuple[str, ...]:
        """The main method, then the other methods scored from the same gradients."""
        return (self.method, *[m for m in self.extra_methods if m != self.method])

    @property
    def samples_true_fisher(self) -> bool:
        return self.fisher == "true" and self.method in FACTOR_METHODS


DEFAULTS = AttributeOptions()


def report_options(report: Mapping[str, Any]) -> AttributeOptions:
    """The options a report.json was made with: its ``options``, or for an older report.json without that key, the
    option values its ``settings`` recorded (the rest at their defaults)."""
    saved = report.get("options")
    if isinstance(saved, Mapping):
        return AttributeOptions.from_dict(saved)
    settings = report.get("settings")
    settings = settings if isinstance(settings, Mapping) else {}
    return AttributeOptions.from_dict({k: settings[k] for k in SETTINGS_KEYS if k in settings})
