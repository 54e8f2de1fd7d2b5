"""The suite's recipes: one typed entry per generated run (kind, seed, culprit fraction, rows)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

FRACTIONS = (0.01, 0.05, 0.10, 0.20)


@dataclass(frozen=True)
class Recipe:
    kind: str  # a key of scenarios.kinds.KINDS
    seed: int  # drives the pool split, the planted rows, the eval items and the training seed
    fraction: float  # share of the training rows planted (per culprit group); 0 for controls
    n_rows: int = 240
    n_target: int = 24  # eval items the defect should break
    n_control: int = 16  # eval items it should leave alone

    @property
    def name(self) -> str:
        """``<kind>_s<seed>_f<percent>``, with ``_n<rows>`` when the run is not the kind's usual size."""
        size = "" if self.n_rows == default_rows(self.kind) else f"_n{self.n_rows}"
        return f"{self.kind}_s{self.seed}_f{round(self.fraction * 100):02d}{size}"

    def as_dict(self) -> dict:
        return asdict(self)


FAULT_KINDS = ("entity", "pronoun", "mislabel", "early_stop", "no_eos", "repetition", "two_groups", "spread")
CONTROL_KINDS = ("clean", "control_lr", "control_epochs")


# Other sizes: half and twice the usual rows, each with an eval set scaled alike (the share of target items kept).
SIZES = ((120, 12, 8), (480, 36, 24))  # (n_rows, n_target, n_control)


def default_rows(kind: str) -> int:
    return 160 if kind == "control_epochs" else 240


def _control(kind: str, seed: int) -> Recipe:
    return Recipe(kind, seed, 0.0, default_rows(kind))


def sized() -> list[Recipe]:
    """Every fault kind and the clean control at the other sizes (seed 3, 10% planted): the runs that check that
    what was calibrated at 240 rows and 40 eval items holds on a smaller and a larger fine-tune."""
    return [Recipe(k, 3, 0.10 if k != "clean" else 0.0, n, t, c) for n, t, c in SIZES for k in (*FAULT_KINDS, "clean")]


# Held-out sets: (seed, culprit share, rows, target items, control items), none of them used before
HELDOUT = ((4, 0.15, 360, 36, 24), (5, 0.08, 300, 30, 20))


def heldout() -> list[Recipe]:
    """Runs made after session 13's verdict rule was fixed, to measure it on what it was not chosen on: new seeds,
    culprit shares the suite never plants (15% and 8%; two_groups doubles them), other sizes with the eval set scaled
    alike; the controls too (control_epochs at 240 rows, over its usual 160)."""
    out = []
    for seed, share, n, t, c in HELDOUT:
        out += [Recipe(k, seed, share, n, t, c) for k in FAULT_KINDS]
        out += [Recipe("clean", seed, 0.0, n, t, c), Recipe("control_lr", seed, 0.0, n, t, c),
                Recipe("control_epochs", seed, 0.0, 240, 24, 16)]  # fmt: skip
    return out


def suite() -> list[Recipe]:
    """Every run, in the order the driver builds them: a first pass over all kinds, then more seeds and fractions."""
    out: list[Recipe] = [Recipe(k, 0, 0.10) for k in FAULT_KINDS] + [_control(k, 0) for k in CONTROL_KINDS]
    out += [Recipe(k, 1, 0.10) for k in FAULT_KINDS] + [_control(k, 1) for k in CONTROL_KINDS]
    out += [Recipe(k, 0, 0.20) for k in FAULT_KINDS]
    out += [Recipe(k, 0, 0.05) for k in FAULT_KINDS]
    out += [Recipe(k, 0, 0.01) for k in FAULT_KINDS]
    out += [Recipe(k, 2, 0.10) for k in FAULT_KINDS] + [_control(k, 2) for k in CONTROL_KINDS]
    out += [Recipe(k, 1, 0.20) for k in FAULT_KINDS] + [Recipe(k, 1, 0.05) for k in FAULT_KINDS]
    return out + sized() + heldout()


def by_name(name: str) -> Recipe:
    for r in suite():
        if r.name == name:
            return r
    raise KeyError(name)
