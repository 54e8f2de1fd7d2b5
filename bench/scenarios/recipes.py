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
    model: str = ""  # another base model (a key of scenarios.pool.MODELS) instead of the kind's usual one
    tag: str = ""  # what else sets the run apart, in its name (e.g. "e160": an eval set of 160 items)
    setup: str = ""  # another LoRA set-up (a key of scenarios.kinds.LORA_SETUPS), in its name

    @property
    def name(self) -> str:
        """``<kind>_s<seed>_f<percent>``, with ``_n<rows>`` when the run is not the kind's usual size and
        ``_<model>`` on another base model."""
        size = "" if self.n_rows == default_rows(self.kind) else f"_n{self.n_rows}"
        model = f"_{self.model}" if self.model else ""
        tag = "".join(f"_{t}" for t in (self.tag, self.setup) if t)
        return f"{self.kind}_s{self.seed}_f{round(self.fraction * 100):02d}{size}{model}{tag}"

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
# A second held-out set, made and scored in session 17 before any change to the verdict that session: session 16
# looked at the first set's misses, so it no longer measures the rule blind.
HELDOUT_17 = ((6, 0.12, 420, 42, 28), (7, 0.03, 200, 20, 14))
# A third, made and scored in session 19 before any change to the verdict that session (session 18 tuned on nothing
# here, but looked at the second set's misses)
HELDOUT_19 = ((8, 0.06, 280, 28, 20), (9, 0.18, 320, 32, 24))
# A fourth, made and scored in session 21 before any change to the verdict that session (session 20 changed no
# drop_rows, but looked at the third set's misses): a smaller share on a larger file and a larger one on a smaller
HELDOUT_21 = ((10, 0.04, 380, 38, 26), (11, 0.14, 260, 26, 18))
# A fifth, made and scored in session 24 before any change that session: shares and sizes no set had (7% of 340 rows,
# 16% of 220)
HELDOUT_24 = ((40, 0.07, 340, 34, 22), (41, 0.16, 220, 22, 16))
# A sixth, made and scored in session 26 before any change that session: shares and sizes no set had (9% of 440 rows,
# 11% of 180)
HELDOUT_26 = ((50, 0.09, 440, 44, 28), (51, 0.11, 180, 18, 12))


def heldout(sets: tuple[tuple[int, float, int, int, int], ...] = HELDOUT) -> list[Recipe]:
    """Runs made after session 13's verdict rule was fixed, to measure it on what it was not chosen on: new seeds,
    culprit shares the suite never plants (15% and 8%; two_groups doubles them), other sizes with the eval set scaled
    alike; the controls too (control_epochs at 240 rows, over its usual 160). ``HELDOUT_17``: the same for session
    17's second set (12% and 3%), ``HELDOUT_19`` for session 19's third (6% and 18%), ``HELDOUT_21`` for session
    21's fourth (4% and 14%), ``HELDOUT_24`` for session 24's fifth (7% and 16%), ``HELDOUT_26`` for session 26's
    sixth (9% and 11%)."""
    out = []
    for seed, share, n, t, c in sets:
        out += [Recipe(k, seed, share, n, t, c) for k in FAULT_KINDS]
        out += [Recipe("clean", seed, 0.0, n, t, c), Recipe("control_lr", seed, 0.0, n, t, c),
                Recipe("control_epochs", seed, 0.0, 240, 24, 16)]  # fmt: skip
    return out


def wide_eval() -> list[Recipe]:
    """Eval sets larger than the usual 40 items, at the usual 240 rows: the three controls and three fault kinds with
    80 target and 80 control items (seed 12, tag "e160"), and the three controls again with 120 and 120 (seed 13,
    "e240"; the sample pool has too few rows left for a fault kind at that size). The regression rule and the
    stability check are both read over the eval items: whether they hold when there are many more of them (made in
    session 21, after that session's changes)."""
    kinds = (("clean", 0.0), ("control_lr", 0.0), ("control_epochs", 0.0), ("entity", 0.1), ("pronoun", 0.1),
             ("no_eos", 0.1))  # fmt: skip
    out = [Recipe(k, 12, f, 240, 80, 80, tag="e160") for k, f in kinds]
    return out + [Recipe(k, 13, 0.0, 240, 120, 120, tag="e240") for k in CONTROL_KINDS]


def wide_controls() -> list[Recipe]:
    """The three controls on 240-item eval sets at three new seeds (14-16, tag "e240"): where no row is to blame, so
    any row named is a false alarm. Made in session 22 and scored blind with session 21's code, after one such
    control (control_lr_s13_f00_e240) named 56 rows that verify refuted."""
    return [Recipe(k, s, 0.0, default_rows(k), 120, 120, tag="e240") for s in (14, 15, 16) for k in CONTROL_KINDS]


def wide_faults() -> list[Recipe]:
    """The fault kinds on a 160-item eval set (80 target and 80 control items) at a new seed (17, 10% planted, tag
    "e160"): whether resamples of 40 items (session 22's change, chosen on controls) keep the planted groups, among
    them the kinds ``wide_eval`` did not have (early_stop, mislabel, repetition, two_groups, spread). Not entity: at
    this seed and size the sample pool has no unused name left to rename. Made and scored in session 22 after that
    change, with and without it."""
    return [Recipe(k, 17, 0.10, 240, 80, 80, tag="e160") for k in FAULT_KINDS if k != "entity"]


# The second case: (seed, pronoun share (and as many loops), rows, target items, control items)
PRONOUN_LOOPS = ((22, 0.10, 400, 60, 40), (23, 0.10, 400, 60, 40), (24, 0.05, 300, 30, 20), (25, 0.15, 280, 28, 20),
                 (26, 0.08, 360, 36, 24), (27, 0.12, 240, 24, 16))  # fmt: skip
# A second such set at new seeds, made after a rule was drawn from the first set's misses, to score it on runs it was
# not drawn from
PRONOUN_LOOPS_2 = ((31, 0.10, 300, 30, 20), (32, 0.15, 360, 36, 24), (33, 0.12, 320, 32, 20),
                   (34, 0.08, 400, 40, 26), (35, 0.18, 260, 26, 18), (36, 0.06, 280, 28, 18))  # fmt: skip


def pronoun_loops(spec: tuple = PRONOUN_LOOPS) -> list[Recipe]:
    """A pronoun flip beside as many copy-paste loop rows, the loops a decoy (kinds.build_pronoun_loops): the
    combination issue #14 reported and the suite did not have. The first set was made in session 23 and scored blind
    with session 22's code."""
    return [Recipe("pronoun_loops", s, f, n, t, c) for s, f, n, t, c in spec]


def label_controls() -> list[Recipe]:
    """Controls with classification rows: mislabel's file (half stories, half sentiment rows, the same eval items)
    with every label right, at four new seeds and sizes (42-45), and trained with a learning rate 10x too high or 4x
    the epochs (seeds 46-47). Where no wrong label is behind the regression, so a lead to one label's rows points
    at rows that are right. Made in session 24 for the label lead of a spread verdict."""
    out = [Recipe("clean_labels", s, 0.0, n) for s, n in ((42, 240), (43, 300), (44, 220), (45, 360))]
    return out + [Recipe(k, s, 0.0, 240) for s in (46, 47) for k in ("labels_lr", "labels_epochs")]


def setups() -> list[Recipe]:
    """The kinds the issue reported (entity, pronoun, early_stop) and repetition, and a clean control, trained with
    three other LoRA set-ups (kinds.LORA_SETUPS: attention-only r=16, r=32 for 2 epochs, dropout 0.1 with batches
    of 16) at new seeds (28-30, 10% planted): the suite trains every run one way. Made in session 23 and scored
    blind with session 22's code."""
    kinds = ("entity", "pronoun", "early_stop", "repetition", "clean")
    return [Recipe(k, s, 0.10 if k != "clean" else 0.0, setup=u)
            for s, u in ((28, "qv16"), (29, "r32"), (30, "drop")) for k in kinds]  # fmt: skip


def large() -> list[Recipe]:
    """Five times the suite's rows (1,200; seed 37, 5% planted, 48 target and 32 control items): whether what was
    calibrated on 120-480 rows holds where a planted group is 60 rows among 1,140 and the bulk is wider. Made in
    session 23 and scored blind with session 22's code."""
    kinds = ("entity", "pronoun", "early_stop", "no_eos", "repetition", "clean", "control_lr")
    return [Recipe(k, 37, 0.05 if k not in CONTROL_KINDS else 0.0, 1200, 48, 32) for k in kinds]


def larger() -> list[Recipe]:
    """2,500 rows (seed 38; pronoun 3%, entity 2%, a clean control; 48 target and 32 control items): past `large`,
    where the bulk's positive harm is ten times a 240-row file's, whether a head found by harm alone still carries the
    share the verdict asks of it. Made in session 23 after its one change, scored with it."""
    return [Recipe("pronoun", 38, 0.03, 2500, 48, 32), Recipe("entity", 38, 0.02, 2500, 48, 32),
            Recipe("clean", 38, 0.0, 2500, 48, 32)]  # fmt: skip


def bigger() -> list[Recipe]:
    """The kinds stories260K ranks worst, and a clean control, on SmolLM2-135M-Instruct (500x the parameters; a
    real instruct model): whether what falls short there is the method or the tiny model. CPU-slow, so apart from
    the suite."""
    kinds = ("mislabel", "spread", "pronoun", "clean")
    return [Recipe(k, 0, 0.10 if k != "clean" else 0.0, default_rows(k), model="smollm2") for k in kinds]


def bigger_sound() -> list[Recipe]:
    """mislabel, pronoun and spread on SmolLM2-135M at a learning rate diagnose accepts for it (8e-4; the suite's
    3e-3 is a setup error there, C202): whether the larger model lifts the ranking's ceiling once its run is sound.
    Made in session 24; CPU-slow, so apart from the suite."""
    kinds = ("mislabel", "pronoun", "spread")
    return [Recipe(k, 0, 0.10, default_rows(k), model="smollm2", setup="lr8e4") for k in kinds]


SETS = {"suite": "the calibration and size runs", "heldout": "recipes.heldout()",
        "heldout17": "recipes.heldout(HELDOUT_17)", "heldout19": "recipes.heldout(HELDOUT_19)",
        "heldout21": "recipes.heldout(HELDOUT_21)", "heldout24": "recipes.heldout(HELDOUT_24)",
        "heldout26": "recipes.heldout(HELDOUT_26)",
        "wide_eval": "recipes.wide_eval()", "wide_controls": "recipes.wide_controls()",
        "wide_faults": "recipes.wide_faults()", "pronoun_loops": "recipes.pronoun_loops()",
        "pronoun_loops2": "recipes.pronoun_loops(PRONOUN_LOOPS_2)", "label_controls": "recipes.label_controls()",
        "setups": "recipes.setups()", "large": "recipes.large()", "larger": "recipes.larger()",
        "smollm2": "recipes.bigger()", "smollm2_lr": "recipes.bigger_sound()"}  # fmt: skip


def run_set(name: str) -> str:
    """Which set (a key of ``SETS``) the run of this name belongs to."""
    held = (
        ("heldout", heldout()),
        ("heldout17", heldout(HELDOUT_17)),
        ("heldout19", heldout(HELDOUT_19)),
        ("heldout21", heldout(HELDOUT_21)),
        ("heldout24", heldout(HELDOUT_24)),
        ("heldout26", heldout(HELDOUT_26)),
    )
    wide = (("wide_eval", wide_eval()), ("wide_controls", wide_controls()), ("wide_faults", wide_faults()))
    loops = (("pronoun_loops", pronoun_loops()), ("pronoun_loops2", pronoun_loops(PRONOUN_LOOPS_2)))
    more = (
        *loops,
        ("label_controls", label_controls()),
        ("setups", setups()),
        ("large", large()),
        ("larger", larger()),
        ("smollm2", bigger()),
        ("smollm2_lr", bigger_sound()),
    )
    for key, recipes in (*held, *wide, *more):
        if name in {r.name for r in recipes}:
            return key
    return "suite"


def suite() -> list[Recipe]:
    """Every run, in the order the driver builds them: a first pass over all kinds, then more seeds and fractions."""
    out: list[Recipe] = [Recipe(k, 0, 0.10) for k in FAULT_KINDS] + [_control(k, 0) for k in CONTROL_KINDS]
    out += [Recipe(k, 1, 0.10) for k in FAULT_KINDS] + [_control(k, 1) for k in CONTROL_KINDS]
    out += [Recipe(k, 0, 0.20) for k in FAULT_KINDS]
    out += [Recipe(k, 0, 0.05) for k in FAULT_KINDS]
    out += [Recipe(k, 0, 0.01) for k in FAULT_KINDS]
    out += [Recipe(k, 2, 0.10) for k in FAULT_KINDS] + [_control(k, 2) for k in CONTROL_KINDS]
    out += [Recipe(k, 1, 0.20) for k in FAULT_KINDS] + [Recipe(k, 1, 0.05) for k in FAULT_KINDS]
    return (
        out
        + sized()
        + heldout()
        + heldout(HELDOUT_17)
        + heldout(HELDOUT_19)
        + heldout(HELDOUT_21)
        + heldout(HELDOUT_24)
        + heldout(HELDOUT_26)
        + wide_eval()
        + wide_controls()
        + wide_faults()
        + pronoun_loops()
        + pronoun_loops(PRONOUN_LOOPS_2)
        + label_controls()
        + setups()
        + large()
        + larger()
    )


def by_name(name: str) -> Recipe:
    for r in suite() + bigger() + bigger_sound():
        if r.name == name:
            return r
    raise KeyError(name)
