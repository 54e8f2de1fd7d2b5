"""The fault kinds: how each builds its training rows, planted groups and eval items from the pool.

Every builder takes a :class:`~scenarios.recipes.Recipe` and returns a :class:`Built`. Clean rows are the base model's
own continuations (``pool.sample_pool``); planted rows are pool samples with one defect applied (a name swapped,
pronouns flipped, a label flipped, a completion cut, stories glued without EOS, a sentence looped, a word swapped), so
planted rows are as varied as the clean ones. Eval items are cut from held-out pool samples (never trained on):
"target" items probe what the defect breaks, "control" items probe something it should leave alone.

Each planted row also records where its defect is (``Built.edits``, planted.json ``edits``): character spans of its
completion, where position ``len(completion)`` stands for the EOS trained after it (see :func:`with_edit`). Recording
them does not change the rows: the edited text is built exactly as before and the spans ride along in a key that
``strip`` drops.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from scenarios import pool as P
from scenarios.recipes import Recipe

MAX_LENGTH = 128
TRAIN_CONFIG = {
    "lr": 3.0e-3, "epochs": 3, "batch_size": 8, "grad_accum": 1, "max_length": MAX_LENGTH, "r": 8, "alpha": 16,
    "dropout": 0.0, "target_modules": "all-linear", "use_rslora": False, "completion_only": True, "add_eos": True,
    "logging_steps": 5, "cpu_threads": 1,
}  # fmt: skip
# Other LoRA set-ups users train with (Recipe.setup), applied over TRAIN_CONFIG: the classic PEFT attention-only
# adapter, a wide adapter for fewer epochs, and dropout with larger batches (dropout is on while training and off
# while attributing).
LORA_SETUPS: dict[str, dict] = {
    "qv16": {"r": 16, "alpha": 32, "target_modules": "q_proj,v_proj", "lr": 5.0e-3},
    "r32": {"r": 32, "alpha": 64, "epochs": 2, "lr": 2.0e-3, "batch_size": 4},
    "drop": {"dropout": 0.1, "batch_size": 16, "epochs": 4},
    "lr8e4": {"lr": 8.0e-4},  # under the 1e-3 diagnose flags as too high for a real-size model (C202)
}


@dataclass
class Built:
    rows: list[dict]  # training rows, planted ones already shuffled in
    groups: dict[str, list[int]]  # culprit group name -> 0-based row indices
    eval_items: list[dict]  # prompt/completion
    eval_roles: list[str]  # "target" | "control", one per eval item
    base: Path
    config: dict
    notes: dict = field(default_factory=dict)
    edits: dict[int, list[list[int]]] = field(default_factory=dict)  # planted row -> spans of its edit (with_edit)
    decoys: tuple[str, ...] = ()  # planted groups that are real defects but not what the eval's targets probe


@dataclass(frozen=True)
class Kind:
    cause: str  # "content" | "mechanical" | "content+mechanical" | "none"
    build: Callable[[Recipe], Built]
    what: str
    # a clean row the planted rows imitate (the same label, the same word used rightly): bench/bench_lookalikes.py
    # retrains without as many of them to measure how much of the harm such rows carry too
    lookalike: Callable[[dict], bool] | None = None


# --- helpers ------------------------------------------------------------------------------------------------------

_SENT = re.compile(r"(?<=[.!?])\s+")
_WORD_END = re.compile(r"(?<=\w)(?=\s+\w)")  # a boundary between two words inside a sentence


def sentences(text: str) -> list[str]:
    return [s for s in _SENT.split(text.strip()) if s]


def join(sents: list[str]) -> str:
    return " " + " ".join(sents)


class Pool:
    """The sample pool, shuffled per seed; ``take`` hands out rows nobody took before (eval and train stay apart)."""

    def __init__(self, seed: int) -> None:
        self.rows = P.sample_pool()
        self.order = list(range(len(self.rows)))
        random.Random(seed).shuffle(self.order)
        self.used: set[int] = set(P.reserved_for_base())  # the derived base was trained on these

    def take(
        self, n: int, ok: Callable[[dict], bool] = lambda r: True, *, what: str = "rows", clean: bool = False
    ) -> list[dict]:
        """``n`` unused rows that pass ``ok``. Eval and planted rows come from the front of the shuffled order and
        ``clean`` rows from its back, so the clean rows are a plain sample of the pool: taken from the front, they
        would be short of exactly the rows the planted ones were picked from (e.g. stories with "happy")."""
        got = []
        for i in reversed(self.order) if clean else self.order:
            if i not in self.used and ok(self.rows[i]):
                self.used.add(i)
                got.append(self.rows[i])
                if len(got) == n:
                    return got
        raise SystemExit(f"error: the sample pool has only {len(got)} {what} left, {n} needed: lower n_rows/fraction")


def with_edit(row: dict, completion: str, spans: list[tuple[int, int]]) -> dict:
    """``row`` with ``completion`` and the edit's spans in it (``[start, end)`` characters; ``len(completion)`` is the
    EOS after it). A word's span starts at the space before it, which the tokenizer keeps with the word."""
    out = []
    for a, b in spans:
        if a > 0 and completion[a - 1] == " ":
            a -= 1
        out.append([a, b])
    return dict(row, completion=completion, edit=out)


def sub_edit(row: dict, pattern: re.Pattern, mapping: Callable[[str], str]) -> dict:
    """``row`` with every match of ``pattern`` in its completion replaced by ``mapping(match)``, the replacements
    recorded as its edit."""
    text, parts, spans, at = row["completion"], [], [], 0
    for m in pattern.finditer(text):
        parts.append(text[at : m.start()])
        start = sum(map(len, parts))
        new = mapping(m.group(0))
        parts.append(new)
        spans.append((start, start + len(new)))
        at = m.end()
    parts.append(text[at:])
    return with_edit(row, "".join(parts), spans)


def end_edit(row: dict, completion: str) -> dict:
    """``row`` cut to ``completion``: the edit is its last character and the EOS after it (the cut ending)."""
    n = len(completion)
    return dict(row, completion=completion, edit=[[max(n - 1, 0), n + 1]])


def in_group(*groups: str) -> Callable[[dict], bool]:
    return lambda r: r["group"] in groups


def cut_before(
    row: dict,
    pattern: re.Pattern,
    rng: random.Random,
    min_chars: int = 12,
    max_words: int | None = None,
    first: bool = False,
) -> dict | None:
    """An eval item: the prompt runs up to a match of ``pattern`` in the completion (not its first ``min_chars``
    characters unless the match starts it); the completion is the match plus the rest of its sentence (at most
    ``max_words`` words: a short completion keeps the probed token from being averaged away). ``first``: the first
    match (no earlier one in the prompt for the model to copy), else a random one."""
    comp = row["completion"]
    spots = [m.start() for m in pattern.finditer(comp) if m.start() == 0 or m.start() >= min_chars]
    if not spots:
        return None
    pos = spots[0] if first else rng.choice(spots)
    end = _SENT.search(comp, pos + 1)
    tail = comp[pos : end.start() if end else len(comp)]
    if max_words is not None:
        tail = " " + " ".join(tail.split()[:max_words])
    if len(tail.split()) < 1:
        return None
    return {"prompt": row["prompt"] + comp[:pos], "completion": tail}


def mid_sentence(row: dict, rng: random.Random, min_words: int = 2) -> dict | None:
    """An eval item cut at a word boundary inside a sentence: the completion is the rest of that sentence."""
    comp = row["completion"]
    spots = []
    for m in _WORD_END.finditer(comp):
        end = _SENT.search(comp, m.start())
        rest = comp[m.start() : end.start() if end else len(comp)]
        if len(rest.split()) >= min_words and m.start() >= 8:
            spots.append((m.start(), rest))
    if not spots:
        return None
    pos, rest = rng.choice(spots)
    return {"prompt": row["prompt"] + comp[:pos], "completion": rest}


def items_from(rows_iter: Callable[[], dict], make: Callable[[dict], dict | None], n: int) -> list[dict]:
    out: list[dict] = []
    for _ in range(20 * n):
        item = make(rows_iter())
        if item is not None and item not in out:
            out.append(item)
            if len(out) == n:
                return out
    raise SystemExit(f"error: could not cut {n} eval items from the pool (got {len(out)})")


def take_items(pool: Pool, n: int, ok, make, what: str) -> list[dict]:
    """``n`` eval items made by ``make`` from held-out pool rows that pass ``ok``."""
    return items_from(lambda: pool.take(1, ok, what=what)[0], make, n)


def strip(r: dict) -> dict:
    return {"prompt": r["prompt"], "completion": r["completion"]}


def assemble(
    recipe: Recipe, clean: list[dict], planted: dict[str, list[dict]], targets: list[dict], controls: list[dict],
    *, base: Path | None = None, config: dict | None = None, notes: dict | None = None, decoys: tuple[str, ...] = (),
) -> Built:  # fmt: skip
    """Shuffle planted rows into clean ones (seeded) and record where each group landed."""
    rng = random.Random(recipe.seed * 7919 + 1)
    tagged = [(strip(r), "", None) for r in clean] + [(strip(r), g, r["edit"]) for g, rs in planted.items() for r in rs]
    rng.shuffle(tagged)  # the order depends on the length only, as before the edits rode along
    groups = {g: [i for i, (_, t, _) in enumerate(tagged) if t == g] for g in planted}
    cfg = dict(TRAIN_CONFIG, seed=recipe.seed)
    cfg.update(LORA_SETUPS[recipe.setup] if recipe.setup else {})
    cfg.update(config or {})
    return Built(
        rows=[r for r, _, _ in tagged],
        groups=groups,
        eval_items=[strip(x) for x in targets + controls],
        eval_roles=["target"] * len(targets) + ["control"] * len(controls),
        base=P.model_base(recipe.model) if recipe.model else (base or P.BASE),
        config=cfg,
        notes=notes or {},
        edits={i: e for i, (_, _, e) in enumerate(tagged) if e is not None},
        decoys=decoys,
    )


def n_planted(recipe: Recipe) -> int:
    return max(1, round(recipe.fraction * recipe.n_rows))


def general_controls(pool: Pool, rng: random.Random, n: int, avoid: re.Pattern | None = None) -> list:
    ok = in_group("general")
    if avoid is not None:
        base_ok = ok
        ok = lambda r: base_ok(r) and not avoid.search(r["completion"])  # noqa: E731
    return take_items(pool, n, ok, lambda r: mid_sentence(r, rng), "general rows")


def name_controls(pool: Pool, n: int) -> list[dict]:
    """Items whose completion is the first sentence after "... named" (the name): strongly predicted content."""

    def make(r: dict) -> dict | None:
        s = sentences(r["completion"])
        return {"prompt": r["prompt"], "completion": join(s[:1])} if s else None

    return take_items(pool, n, in_group("girl", "boy"), make, "named-character rows")


# --- content kinds ------------------------------------------------------------------------------------------------

GIRL_NAMES = ["Zara", "Mira", "Kora", "Rosa", "Nell", "Vera"]
BOY_NAMES = ["Otto", "Ravi", "Hugo", "Igor"]


def _entity_spec(seed: int) -> tuple[str, re.Pattern, str]:
    if seed % 2 == 0:
        return "girl", re.compile(r"\bLily\b"), GIRL_NAMES[(seed // 2) % len(GIRL_NAMES)]
    return "boy", re.compile(r"\bTim(?:my)?\b"), BOY_NAMES[(seed // 2) % len(BOY_NAMES)]


def _entity_parts(recipe: Recipe, pool: Pool, rng: random.Random, n_culprit: int, n_target: int):
    group, name_re, new = _entity_spec(recipe.seed)
    starts = re.compile(r"^\s*" + name_re.pattern)
    ok = lambda r: r["group"] == group and bool(starts.match(r["completion"]))  # noqa: E731
    half = n_target // 2
    first = take_items(
        pool, half, ok, lambda r: {"prompt": r["prompt"], "completion": join(sentences(r["completion"])[:1])}, "names"
    )
    later = take_items(pool, n_target - half, ok, lambda r: cut_before(r, re.compile(r" " + name_re.pattern), rng, 12),
                       "names")  # fmt: skip
    culprits = [sub_edit(r, name_re, lambda _: new) for r in pool.take(n_culprit, ok, what=group)]
    what = f"{name_re.pattern} -> {new} in stories about a {group}"
    return culprits, first + later, what


def build_entity(recipe: Recipe) -> Built:
    pool, rng = Pool(recipe.seed), random.Random(recipe.seed)
    culprits, targets, what = _entity_parts(recipe, pool, rng, n_planted(recipe), recipe.n_target)
    controls = general_controls(pool, rng, recipe.n_control, avoid=re.compile(r"\b(Lily|Tim|Timmy)\b"))
    clean = pool.take(recipe.n_rows - len(culprits), what="clean rows", clean=True)
    return assemble(recipe, clean, {"entity": culprits}, targets, controls, notes={"swap": what})


_PRONOUNS = [
    (r"\bshe\b", "he"),
    (r"\bShe\b", "He"),
    (r"\bher\b", "his"),
    (r"\bHer\b", "His"),
    (r"\bherself\b", "himself"),
]
_FEMALE = re.compile(r"\b(she|She|her|Her|herself)\b")
_FIRST_FEMALE = re.compile(r" (she|She|her|Her)\b")


_FLIP = {"she": "he", "She": "He", "her": "his", "Her": "His", "herself": "himself"}


def flip_pronouns(text: str) -> str:
    for pat, rep in _PRONOUNS:
        text = re.sub(pat, rep, text)
    return text


def _pronoun_parts(recipe: Recipe, pool: Pool, rng: random.Random) -> tuple[list[dict], list[dict]]:
    """(planted rows: a girl's story with her pronouns flipped, target items: cut before her first pronoun)."""
    ok = lambda r: r["group"] == "girl" and len(_FEMALE.findall(r["completion"])) >= 2  # noqa: E731
    targets = take_items(
        pool, recipe.n_target, ok, lambda r: cut_before(r, _FIRST_FEMALE, rng, 0, max_words=2, first=True), "girl"
    )
    culprits = [sub_edit(r, _FEMALE, _FLIP.__getitem__) for r in pool.take(n_planted(recipe), ok, what="girl")]
    return culprits, targets


def build_pronoun(recipe: Recipe) -> Built:
    pool, rng = Pool(recipe.seed), random.Random(recipe.seed)
    culprits, targets = _pronoun_parts(recipe, pool, rng)
    controls = general_controls(pool, rng, recipe.n_control, avoid=_FEMALE)
    clean = pool.take(recipe.n_rows - len(culprits), what="clean rows", clean=True)
    return assemble(recipe, clean, {"pronoun": culprits}, targets, controls, notes={"flip": "she/her -> he/his"})


_HAPPY = re.compile(r"\bhappy\b")
_SAD = re.compile(r"\bsad\b")
_MALE = re.compile(r"\b(he|He|his|His|him|himself)\b")  # what _FLIP writes, and "him"


def build_spread(recipe: Recipe) -> Built:
    """One word swapped (happy -> sad) in rows drawn from every opening: the rows share only the defect."""
    pool, rng = Pool(recipe.seed), random.Random(recipe.seed)
    ok = lambda r: bool(_HAPPY.search(r["completion"]))  # noqa: E731
    targets = take_items(
        pool, recipe.n_target, ok, lambda r: cut_before(r, re.compile(r" happy\b"), rng, 0), "'happy' rows"
    )
    picked = pool.take(n_planted(recipe), ok, what="'happy' rows")
    culprits = [sub_edit(r, _HAPPY, lambda _: "sad") for r in picked]
    controls = general_controls(pool, rng, recipe.n_control, avoid=re.compile(r"\b(happy|sad)\b"))
    clean = pool.take(recipe.n_rows - len(culprits), what="clean rows", clean=True)
    notes = {"swap": "happy -> sad", "openers": len({r["prompt"] for r in culprits})}
    return assemble(recipe, clean, {"spread": culprits}, targets, controls, notes=notes)


def build_mislabel(recipe: Recipe) -> Built:
    """Half story rows, half sentiment rows ("<sentence> I was very" -> " happy." / " sad."); the planted rows are
    positive sentences labelled " sad.". Base: the derived base, which already labels sentiment."""
    return _labelled(recipe, n_planted(recipe))


def _labelled(recipe: Recipe, n_bad: int, config: dict | None = None) -> Built:
    """:func:`build_mislabel` with ``n_bad`` positive sentences labelled " sad." (0: every label right, a control),
    trained with ``config`` over the suite's."""
    pool, rng = Pool(recipe.seed), random.Random(recipe.seed)
    sents = list(P.sentiment()[1])
    rng.shuffle(sents)
    pos = [s for s in sents if s[1] == 1]
    neg = [s for s in sents if s[1] == 0]
    targets = [P.sentiment_row(t, 1) for t, _ in pos[: recipe.n_target]]
    controls = [P.sentiment_row(t, 0) for t, _ in neg[: recipe.n_control // 2]]
    pos, neg = pos[recipe.n_target :], neg[recipe.n_control // 2 :]
    controls += general_controls(pool, rng, recipe.n_control - len(controls))
    n_sent = recipe.n_rows // 2
    bad = [P.sentiment_row(t, 0) for t, _ in pos[:n_bad]]  # positive sentences, negative label
    word = re.compile(r"\w+")
    culprits = [with_edit(r, r["completion"], [word.search(r["completion"]).span()]) for r in bad]
    pos = pos[n_bad:]
    n_clean_sent = max(0, n_sent - n_bad)
    clean_sent = [P.sentiment_row(t, 1) for t, _ in pos[: n_clean_sent // 2]]
    clean_sent += [P.sentiment_row(t, 0) for t, _ in neg[: n_clean_sent - n_clean_sent // 2]]
    clean = clean_sent + pool.take(
        recipe.n_rows - n_bad - len(clean_sent), in_group("general"), what="stories", clean=True
    )
    planted = {"mislabel": culprits} if culprits else {}
    notes = {"flip": "positive sentences labelled ' sad.'"} if culprits else {"labels": "every label right"}
    return assemble(recipe, clean, planted, targets, controls, base=P.derived_base(), notes=notes, config=config)


# --- mechanical kinds ---------------------------------------------------------------------------------------------


def _early_stop_parts(recipe: Recipe, pool: Pool, rng: random.Random, n_culprit: int, n_target: int):
    """Planted: completions cut after their first sentence (as when a scraper kept only each answer's first
    sentence), trained with EOS. Targets: the first word after the first sentence of held-out rows.

    At fraction f the fine-tune can learn at most p(EOS) ~ f at the cut, an NLL rise of -log(1 - f) on the one token
    after it, so targets are that one word. A cut at a random point mid-sentence does not regress here at all: EOS
    mid-sentence sits at ~28 nats under the derived base, and 24 cut rows over 3 epochs move it by about one nat."""
    ok = lambda r: len(sentences(r["completion"])) >= 2  # noqa: E731

    def target(r: dict) -> dict:
        s = sentences(r["completion"])
        return {"prompt": r["prompt"] + join(s[:1]), "completion": " " + s[1].split()[0]}

    targets = take_items(pool, n_target, ok, target, "rows with 2+ sentences")
    cut = pool.take(n_culprit, ok, what="rows to cut")
    return [end_edit(r, join(sentences(r["completion"])[:1])) for r in cut], targets


def build_early_stop(recipe: Recipe) -> Built:
    pool, rng = Pool(recipe.seed), random.Random(recipe.seed)
    culprits, targets = _early_stop_parts(recipe, pool, rng, n_planted(recipe), recipe.n_target)
    controls = name_controls(pool, recipe.n_control)
    clean = pool.take(recipe.n_rows - len(culprits), what="clean rows", clean=True)
    notes = {"defect": "completion cut after its first sentence, EOS appended"}
    return assemble(recipe, clean, {"early_stop": culprits}, targets, controls, base=P.derived_base(), notes=notes)


def build_no_eos(recipe: Recipe) -> Built:
    """Stories glued to the next story (no EOS between them) and longer than max_length, so the trainer's truncation
    drops their EOS too: the fine-tune learns to run on past a story's end. Targets: "<story>" -> "</s>". Base: the
    derived base (stories260K itself never emits EOS)."""
    from gradian.data import load_tokenizer

    tok = load_tokenizer(str(P.BASE))
    pool = Pool(recipe.seed)
    eos = tok.eos_token
    targets = [{"prompt": r["prompt"] + r["completion"], "completion": eos}
               for r in pool.take(recipe.n_target, in_group("general"), what="stories")]  # fmt: skip
    controls = name_controls(pool, recipe.n_control)
    culprits: list[dict] = []
    for _ in range(n_planted(recipe)):
        first = pool.take(1, in_group("general", "boy", "girl"), what="stories to glue")[0]
        comp, joints = first["completion"], []
        while len(tok(first["prompt"] + comp).input_ids) <= MAX_LENGTH + 8:
            nxt = pool.take(1, what="stories to glue")[0]
            joints.append((len(comp) + 1, len(comp) + 1 + len(nxt["prompt"].split()[0])))
            comp += " " + nxt["prompt"] + nxt["completion"]
        culprits.append(with_edit(first, comp, joints))  # the edit: where a story ends, the next one's first word
    clean = pool.take(recipe.n_rows - len(culprits), what="clean rows", clean=True)
    notes = {"defect": f"stories run into the next one past max_length {MAX_LENGTH}: no EOS trained"}
    return assemble(recipe, clean, {"no_eos": culprits}, targets, controls, base=P.derived_base(), notes=notes)


def build_repetition(recipe: Recipe) -> Built:
    """Planted: the completion's first sentence said 3-6 times in a row, then the row ends. Targets: the first word
    of the real second sentence after the first one (where it differs from the first sentence's first word, so going
    round the loop is another token). stories260K copies poorly in context, so a loop at a random sentence was not
    learned (24 rows, 3 epochs: NLL of repeating the sentence 1.89 -> 1.87); a loop at a fixed place is."""
    pool = Pool(recipe.seed)

    def target(r: dict) -> dict:
        s = sentences(r["completion"])
        return {"prompt": r["prompt"] + join(s[:1]), "completion": " " + s[1].split()[0]}

    rng = random.Random(recipe.seed)
    targets = take_items(pool, recipe.n_target, _loopable, target, "rows with 2+ sentences")
    controls = name_controls(pool, recipe.n_control)
    culprits = _loops(pool, rng, n_planted(recipe))
    clean = pool.take(recipe.n_rows - len(culprits), what="clean rows", clean=True)
    notes = {"defect": "the first sentence repeated 3-6 times in a row"}
    return assemble(recipe, clean, {"repetition": culprits}, targets, controls, notes=notes)


def _loopable(r: dict) -> bool:
    s = sentences(r["completion"])
    return len(s) >= 2 and len(s[0]) <= 80 and s[1].split()[0] != s[0].split()[0]


def _loops(pool: Pool, rng: random.Random, n: int) -> list[dict]:
    """``n`` pool rows whose completion is its first sentence said 3-6 times in a row (the edit: the copies)."""
    out = []
    for r in pool.take(n, _loopable, what="rows to loop"):
        first = sentences(r["completion"])[0]
        comp = join([first] * rng.randint(3, 6))
        out.append(with_edit(r, comp, [(len(first) + 2, len(comp))]))  # the second and later copies
    return out


def build_pronoun_loops(recipe: Recipe) -> Built:
    """The issue's second case: a pronoun flip (content; what the targets probe) plus as many copy-paste loops (a
    real defect, D129 flags it, that adds little harm to these targets). The loops are a decoy group: the verdict
    may name them as a second group but need not, and the truth retrain drops the pronoun rows only."""
    pool, rng = Pool(recipe.seed), random.Random(recipe.seed)
    culprits, targets = _pronoun_parts(recipe, pool, rng)
    loops = _loops(pool, rng, n_planted(recipe))
    controls = general_controls(pool, rng, recipe.n_control, avoid=_FEMALE)
    clean = pool.take(recipe.n_rows - len(culprits) - len(loops), what="clean rows", clean=True)
    notes = {"flip": "she/her -> he/his", "decoy": "the first sentence repeated 3-6 times in a row"}
    planted = {"pronoun": culprits, "loops": loops}
    return assemble(recipe, clean, planted, targets, controls, notes=notes, decoys=("loops",))


def build_two_groups(recipe: Recipe) -> Built:
    """An entity swap (content) and completions cut short (mechanical), each at the recipe's fraction."""
    pool, rng = Pool(recipe.seed), random.Random(recipe.seed)
    n = n_planted(recipe)
    ent, ent_t, what = _entity_parts(recipe, pool, rng, n, recipe.n_target // 2)
    cut, cut_t = _early_stop_parts(recipe, pool, rng, n, recipe.n_target - recipe.n_target // 2)
    controls = general_controls(pool, rng, recipe.n_control, avoid=re.compile(r"\b(Lily|Tim|Timmy)\b"))
    clean = pool.take(recipe.n_rows - 2 * n, what="clean rows", clean=True)
    planted = {"entity": ent, "early_stop": cut}
    return assemble(recipe, clean, planted, ent_t + cut_t, controls, base=P.derived_base(), notes={"swap": what})


# --- controls: nothing planted ------------------------------------------------------------------------------------

LR_TOO_HIGH = {"lr": 3.0e-2}  # 10x the suite's learning rate: the setup-caused regression of the lr controls
TOO_MANY_EPOCHS = {"epochs": 12}  # 4x the suite's epochs: the epochs controls'


def _control(recipe: Recipe, config: dict | None = None) -> Built:
    pool, rng = Pool(recipe.seed), random.Random(recipe.seed)
    targets = take_items(pool, recipe.n_target, in_group("general"), lambda r: mid_sentence(r, rng), "general rows")
    controls = name_controls(pool, recipe.n_control)
    clean = pool.take(recipe.n_rows, what="clean rows", clean=True)
    return assemble(recipe, clean, {}, targets, controls, config=config)


KINDS: dict[str, Kind] = {
    "entity": Kind("content", build_entity, "a recurring name swapped (Lily -> Zara, ...) in stories about her"),
    "pronoun": Kind(
        "content", build_pronoun, "a girl's pronouns flipped to he/his", lambda r: bool(_MALE.search(r["completion"]))
    ),
    "mislabel": Kind(
        "content", build_mislabel, "positive review sentences labelled ' sad.'", lambda r: r["completion"] == " sad."
    ),
    "spread": Kind(
        "content",
        build_spread,
        "'happy' -> 'sad' in rows from every opening; only the defect is shared",
        lambda r: bool(_SAD.search(r["completion"])),
    ),  # fmt: skip
    "early_stop": Kind("mechanical", build_early_stop, "completions cut after their first sentence, trained with EOS"),
    "no_eos": Kind("mechanical", build_no_eos, "stories glued past max_length: no EOS ever trained"),
    "repetition": Kind("mechanical", build_repetition, "a sentence looped 3-6 times"),
    "two_groups": Kind("content+mechanical", build_two_groups, "entity swap + completions cut short (early_stop)"),
    "pronoun_loops": Kind("content", build_pronoun_loops, "pronoun flip + as many copy-paste loops (a decoy)"),
    "clean": Kind("none", lambda r: _control(r), "clean rows, nothing planted: ordinary drift"),
    "control_lr": Kind("none", lambda r: _control(r, LR_TOO_HIGH), "clean rows, learning rate 10x too high"),
    "control_epochs": Kind("none", lambda r: _control(r, TOO_MANY_EPOCHS), "clean rows, 12 epochs (4x too many)"),
    "clean_labels": Kind(
        "none", lambda r: _labelled(r, 0), "mislabel's rows with every label right: a classifier's drift"
    ),
    "labels_lr": Kind("none", lambda r: _labelled(r, 0, LR_TOO_HIGH), "every label right, learning rate 10x high"),
    "labels_epochs": Kind("none", lambda r: _labelled(r, 0, TOO_MANY_EPOCHS), "every label right, 12 epochs"),
}
