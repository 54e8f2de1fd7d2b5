"""Dataset rules (D1xx): the rows themselves, character-level and token-level."""

from __future__ import annotations

import itertools
import os
import random
import re
import statistics
from collections import Counter
from collections.abc import Iterator

from gradian.data.types import Example
from gradian.diagnose import textstats as ts
from gradian.diagnose.context import DiagnoseContext
from gradian.diagnose.minhash import near_duplicate_pairs, normalize, set_jaccard
from gradian.diagnose.registry import Hit, Params, rule
from gradian.diagnose.rules._util import drop_fix, pct, rows_ev
from gradian.diagnose.types import Fix

_WORDS = re.compile(r"\w+")

# Chat-template families, by the markers their rendered text contains.
FAMILY_MARKERS = {
    "chatml": ("<|im_start|>", "<|im_end|>"),
    "llama3": ("<|start_header_id|>", "<|eot_id|>"),
    "llama2/mistral": ("[INST]", "[/INST]"),
    "gemma": ("<start_of_turn>", "<end_of_turn>"),
    "phi3": ("<|user|>", "<|assistant|>", "<|end|>"),
    "alpaca": ("### Instruction:", "### Response:"),
}
CONTROL_STRINGS = sorted({m for ms in FAMILY_MARKERS.values() for m in ms if m.startswith("<")} | {"<|endoftext|>"})
VALID_ROLES = {"system", "user", "assistant", "tool", "function", "ipython", "developer"}


# every marker contains one of these: a text without them has no family (a cheap screen before 19 searches)
_MARKER_PARTS = ("<", "[", "###")


def _family_of(text: str) -> str | None:
    if not any(p in text for p in _MARKER_PARTS):
        return None
    for fam, markers in FAMILY_MARKERS.items():
        if any(m in text for m in markers):
            return fam
    return None


def _tfile(ctx: DiagnoseContext) -> str | None:
    return ctx.train_file


@rule(
    "D101", "schema", "error", cause="mechanical", needs=(),
    summary="Rows mix formats (prompt/completion, messages, text), have extra or missing keys, or are not valid "
    "JSON/UTF-8.",
    why="Trainers pick one format per dataset from the first rows; rows in another format or with other keys are "
    "silently dropped, mis-rendered, or crash the run hours in.",
    example='{"prompt": "Hi", "completion": " there"} next to {"text": "Hi there"} in one file.',
    fix="Use one format per file; repair or drop the listed rows.",
    seen_in="Together check_file",
)  # fmt: skip
def schema(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    for split, problems, n_ok, path in (
        ("train", ctx.problems, len(ctx.train), _tfile(ctx)),
        ("eval", ctx.eval_problems, len(ctx.eval or []), ctx.eval_file),
    ):
        if not problems:
            continue
        rows: list[int] = []
        reasons: Counter[str] = Counter()
        for p in problems:
            idx = getattr(p, "index", getattr(p, "row", getattr(p, "line", None)))
            if isinstance(idx, int):
                rows.append(idx)
            reasons[str(getattr(p, "message", getattr(p, "reason", getattr(p, "problem", p))))[:160]] += 1
        evidence = rows_ev(rows, n_ok + len(problems), path, reasons=dict(reasons.most_common(5)))
        if split == "eval":
            evidence["split"] = "eval"
        yield Hit(
            f"{len(problems)} {split} row(s) could not be read (bad JSON, UTF-8 or unknown format)",
            evidence=evidence,
            fix=drop_fix("Repair or drop the unreadable rows", rows, path, "D101"),
        )
    if not ctx.train:
        return
    total = len(ctx.train) + len(ctx.problems)
    fmts = Counter(e.format for e in ctx.train)
    if len(fmts) > 1:
        main = fmts.most_common(1)[0][0]
        rows = [e.index for e in ctx.train if e.format != main]
        yield Hit(
            f"rows mix formats {dict(fmts)}; the trainer formats all rows as {main!r}",
            evidence=rows_ev(rows, total, _tfile(ctx), formats=dict(fmts)),
            fix=drop_fix(f"Convert the listed rows to {main!r} or drop them", rows, _tfile(ctx), "D101"),
        )
    keysets = Counter(frozenset(e.raw) for e in ctx.train if e.raw)
    if len(keysets) > 1:
        main_keys = keysets.most_common(1)[0][0]
        rows = [e.index for e in ctx.train if e.raw and frozenset(e.raw) != main_keys]
        extra = sorted({k for e in ctx.train if e.raw for k in set(e.raw) ^ main_keys})
        yield Hit(
            f"{len(rows)} row(s) have other keys than the rest ({', '.join(sorted(main_keys))}); differing: "
            f"{', '.join(extra[:8])}",
            evidence=rows_ev(rows, total, _tfile(ctx), expected_keys=sorted(main_keys), differing_keys=extra),
            fix=drop_fix("Give every row the same keys, or drop the listed rows", rows, _tfile(ctx), "D101"),
        )
    yield from _message_keys(ctx, total)


_MESSAGE_KEYS = {"role", "content", "name", "tool_calls", "tool_call_id", "weight", "function_call", "thinking",
                 "reasoning_content", "from", "value"}  # fmt: skip


def _message_keys(ctx: DiagnoseContext, total: int) -> Iterator[Hit]:
    """Keys inside a message that chat templates and trainers ignore (the OpenAI cookbook flags them too), unless
    most of the file's messages carry them."""
    per_row: dict[int, set[str]] = {}
    counts: Counter[str] = Counter()
    n_msgs = 0
    for e in ctx.train:
        msgs = e.raw.get("messages") or e.raw.get("conversations") if e.messages is not None else None
        if not isinstance(msgs, list):
            continue
        for m in msgs:
            if isinstance(m, dict):
                n_msgs += 1
                odd = set(m) - _MESSAGE_KEYS
                counts.update(odd)
                if odd:
                    per_row.setdefault(e.index, set()).update(odd)
    common = {k for k, c in counts.items() if c >= 0.5 * n_msgs}
    rows = sorted(i for i, ks in per_row.items() if ks - common)
    if rows:
        keys = sorted({k for i in rows for k in per_row[i] - common})
        yield Hit(
            f"{len(rows)} conversation row(s) have messages with keys the chat template ignores: {', '.join(keys[:8])}",
            evidence=rows_ev(rows, total, _tfile(ctx), message_keys=keys),
            fix=drop_fix("Remove the extra message keys (or drop the rows)", rows, _tfile(ctx), "D101"),
        )


@rule(
    "D102", "roles", "error", cause="mechanical", needs=("train",),
    summary="Conversation rows with an unknown role, two consecutive turns of one role, no assistant turn, or a last "
    "turn that is not the assistant's; a file most of whose rows hold chosen / rejected replies, or a reply with a "
    "true/false `label` (KTO), is named a preference set (on chosen / rejected pairs the other row checks are "
    "skipped: the rows hold no SFT target).",
    why="Chat templates raise or silently render such rows wrong; with assistant-only loss a row without an "
    "assistant turn trains on nothing, and a trailing user turn teaches the model to stop mid-dialogue.",
    example='[{"role": "user", ...}, {"role": "user", ...}] or a row ending with a user turn.',
    fix="Fix the turn order (system?, then user/assistant alternating, ending with assistant) or drop the rows.",
    seen_in="OpenAI cookbook; transformers#34494",
)  # fmt: skip
def roles(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    bad: dict[str, list[int]] = {
        "unknown role": [],
        "repeated role": [],
        "no assistant turn": [],
        "last not assistant": [],
    }
    n_chat = 0
    for e in ctx.train:
        if not e.messages:
            continue
        n_chat += 1
        rs = [str(m.get("role", "")) for m in e.messages]
        if any(r not in VALID_ROLES for r in rs):
            bad["unknown role"].append(e.index)
        if any(a == b and a in ("user", "assistant") for a, b in zip(rs, rs[1:], strict=False)):
            bad["repeated role"].append(e.index)
        if "assistant" not in rs:
            bad["no assistant turn"].append(e.index)
        elif rs[-1] != "assistant":
            bad["last not assistant"].append(e.index)
    rows = sorted({i for v in bad.values() for i in v})
    if rows:
        counts = {k: len(v) for k, v in bad.items() if v}
        msg = f"{len(rows)} conversation row(s) have bad turn structure: {counts}"
        ev = rows_ev(rows, n_chat, _tfile(ctx), problems=counts)
        fix = drop_fix("Fix the turn order or drop the listed rows", rows, _tfile(ctx), "D102")
        kind, pairs = ctx.preference_rows()
        if kind == "pairs":  # the replies live in chosen / rejected: a preference set
            msg += (
                f"; the file holds preference pairs (chosen / rejected in {len(pairs)} rows), not supervised "
                "fine-tuning rows"
            )
            ev["preference_rows"] = len(pairs)
            fix = Fix(text="Pass the supervised fine-tuning file the adapter was trained on (Gradian attributes SFT, "
                      "not DPO/KTO)")  # fmt: skip
        yield Hit(msg, evidence=ev, fix=fix)
    kind, kto = ctx.preference_rows()
    if kind == "kto":  # TRL's and LLaMA-Factory's KTO rows: a reply and whether it is desirable
        bad_replies = [e.index for e in kto if e.raw["label"] is False]
        yield Hit(
            f"the file holds KTO rows (a reply labelled desirable or not in {len(kto)} rows), not supervised "
            f"fine-tuning rows: as SFT data its {len(bad_replies)} undesirable replies are targets too",
            evidence=rows_ev(bad_replies, len(ctx.train), _tfile(ctx), kto_rows=len(kto)),
            fix=Fix(text="Pass the supervised fine-tuning file the adapter was trained on (Gradian attributes SFT, "
                    "not DPO/KTO)"),
        )  # fmt: skip


@rule(
    "D103", "empty_target", "warning", cause="mechanical", needs=("train",),
    thresholds={"max_percent": (1.0, "percent of rows with an empty target above which the rule fires")},
    summary="Completions or assistant turns that are empty or whitespace only.",
    why="Rows with nothing to learn waste steps and, with completion-only loss, produce all -100 labels (NaN loss in "
    "a batch made only of them).",
    example='{"prompt": "Translate: ...", "completion": "  "}',
    fix="Drop the rows with empty targets.",
    seen_in="OpenAI validators",
)  # fmt: skip
def empty_target(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    rows = [e.index for e, tgt in zip(ctx.train, ts.targets(ctx), strict=True) if not tgt.strip()]
    if rows and pct(len(rows), len(ctx.train)) > t.max_percent:
        yield Hit(
            f"{len(rows)} row(s) ({pct(len(rows), len(ctx.train))}%) have an empty completion / assistant turn",
            evidence=rows_ev(rows, len(ctx.train), _tfile(ctx)),
            fix=drop_fix("Drop the rows with empty targets", rows, _tfile(ctx), "D103"),
        )


@rule(
    "D104", "duplicates", "warning", cause="content", needs=("train",), tiers="W/I",
    thresholds={
        "exact_percent": (2.0, "exact-duplicate rows (beyond the first copy), in percent, above which it warns"),
        "near_jaccard": (0.9, "MinHash Jaccard similarity of 5-word shingles counted as a near duplicate"),
        "edit_jaccard": (0.6, "Jaccard similarity of word pairs (2-word shingles) counted as a near duplicate with a "
                         "few words edited, for rows of min_words words or more"),
        "edit_ratio": (0.9, "and their word sequences agree this much (difflib ratio: 2 x matched words / all "
                       "words): rows recombined from the same template sentences in another order are not copies"),
        "min_words": (8, "rows shorter than this (in words) are near duplicates only by near_jaccard"),
        "near_percent": (1.0, "near-duplicate rows (the later of each pair), in percent, above which it warns; clean "
                         "real sets reach 0.6% (short reviews that recur with other wording)"),
    },
    summary="Exact duplicate rows above a share of the data (warning); near duplicates by MinHash: nearly the same "
    "5-word spans, or the same word pairs but for a few edited words (warning above a share, else info).",
    why="Duplicates up-weight a few examples: the model memorises them and the effective data size is smaller than "
    "it looks. A copy with a word changed, dropped or misspelt (a re-scrape, an augmentation, a second annotator's "
    "pass) counts just as much as an exact one.",
    example="The same Q/A pair 40 times in 1,000 rows; 30 questions repeated with a number or a word changed.",
    fix="Deduplicate (keep the first copy).",
    seen_in="OpenAI validators",
)  # fmt: skip
def duplicates(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    seen: dict[str, int] = {}
    dup_rows, uniq_texts, uniq_idx = [], [], []
    for e, key in zip(ctx.train, ts.norm_plains(ctx), strict=True):
        if key in seen:
            dup_rows.append(e.index)
        else:
            seen[key] = e.index
            uniq_texts.append(key)
            uniq_idx.append(e.index)
    n = len(ctx.train)
    if dup_rows and pct(len(dup_rows), n) > t.exact_percent:
        yield Hit(
            f"{len(dup_rows)} row(s) ({pct(len(dup_rows), n)}%) are exact duplicates of an earlier row",
            evidence=rows_ev(dup_rows, n, _tfile(ctx), kind="exact"),
            fix=drop_fix("Drop the later copies", dup_rows, _tfile(ctx), "D104"),
        )
    pairs = _near_pairs(uniq_texts, t)
    if pairs:
        rows = sorted({uniq_idx[j] for _, j, _ in pairs})
        p = pct(len(rows), n)
        yield Hit(
            f"{len(rows)} row(s) ({p}%) are near duplicates of an earlier row (the same text but for a few words)",
            severity="warning" if p > t.near_percent else "info",
            evidence=rows_ev(
                rows, n, _tfile(ctx), kind="near", pairs=[[uniq_idx[i], uniq_idx[j], s] for i, j, s in pairs[:200]]
            ),
            fix=drop_fix("Review and drop the later near-duplicate rows", rows, _tfile(ctx), "D104"),
        )


def _near_pairs(texts: list[str], t: Params) -> list[tuple[int, int, float]]:
    """Near-duplicate pairs (i, j, jaccard), i < j: 5-word shingles at ``near_jaccard``, and, between rows of
    ``min_words`` words or more, word pairs at ``edit_jaccard`` whose word sequences agree at ``edit_ratio`` (one
    edited word breaks five 5-word shingles but only two word pairs)."""
    from difflib import SequenceMatcher

    found = {(i, j): s for i, j, s in near_duplicate_pairs(texts, threshold=float(t.near_jaccard))}
    long_rows = [k for k, x in enumerate(texts) if len(x.split()) >= t.min_words]
    for a, b, s in near_duplicate_pairs([texts[k] for k in long_rows], float(t.edit_jaccard), k=2, bands=16):
        i, j = long_rows[a], long_rows[b]
        if (i, j) in found:
            continue
        wi, wj = _WORDS.findall(texts[i])[:256], _WORDS.findall(texts[j])[:256]
        if SequenceMatcher(None, wi, wj, autojunk=False).ratio() >= t.edit_ratio:
            found[(i, j)] = s
    return [(i, j, s) for (i, j), s in sorted(found.items())]


@rule(
    "D105", "train_eval_overlap", "error", cause="content", needs=("train", "eval"), tiers="E/W/I",
    thresholds={
        "near_jaccard": (0.9, "MinHash Jaccard above which a train row counts as the same as an eval row"),
        "long_words": (20, "an overlapping row with at least this many words is a real leak (error)"),
        "error_percent": (2.0, "share of eval rows overlapped (in percent) at which short rows are an error too"),
        "generic_completions": (2, "a shared prompt the train file pairs with more distinct completions than this is "
                                "a generic opening, not a leak"),
    },
    summary="Train rows equal or nearly equal to eval rows (error; short generic rows like 'Great phone.' under 2% of "
    "the eval set are a warning); train rows that share a distinctive eval prompt (warning); train rows that share a "
    "generic one, which the train file pairs with many different completions (info: an opening, not a leak).",
    why="Contamination makes eval loss and benchmark numbers measure memorisation: the run looks better than it is.",
    example="The same question in train.jsonl and eval.jsonl, differently whitespaced.",
    fix="Re-split by a hash of the normalized prompt; drop the overlapping train rows.",
    seen_in="OpenRLHF#1089",
)  # fmt: skip
def train_eval_overlap(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    eval_full = {normalize(e.plain_text()): e.index for e in ctx.eval}
    exact = [(e.index, eval_full[k]) for e in ctx.train if (k := normalize(e.plain_text())) in eval_full]
    exact_rows = {i for i, _ in exact}
    tr = [e for e in ctx.train if e.index not in exact_rows]
    texts = [normalize(e.plain_text()) for e in tr] + [normalize(e.plain_text()) for e in ctx.eval]
    n = len(tr)
    near = [(tr[i].index, ctx.eval[j - n].index, s) for i, j, s in near_duplicate_pairs(texts, float(t.near_jaccard))
            if i < n <= j]  # fmt: skip
    pairs = [(i, j, 1.0) for i, j in exact] + near
    if pairs:
        rows = sorted({i for i, _, _ in pairs})
        by_idx = {e.index: e for e in ctx.train}
        long_rows = [i for i in rows if len(by_idx[i].plain_text().split()) >= t.long_words]
        eval_share = pct(len({j for _, j, _ in pairs}), len(ctx.eval))
        sev = "error" if long_rows or eval_share >= t.error_percent else "warning"
        yield Hit(
            f"{len(rows)} train row(s) equal or nearly equal an eval row ({len(exact)} exact, {len(near)} near; "
            f"{eval_share}% of eval rows" + ("" if long_rows else ", all short") + ")",
            severity=sev,
            evidence=rows_ev(rows, len(ctx.train), _tfile(ctx), eval_file=ctx.eval_file, eval_percent=eval_share,
                             long_rows=long_rows, pairs=[list(p) for p in pairs[:200]]),
            fix=drop_fix("Drop the overlapping train rows (or re-split by prompt hash)", rows, _tfile(ctx), "D105"),
        )  # fmt: skip
    eval_prompts = {normalize(e.prompt): e.index for e in ctx.eval if e.prompt and len(e.prompt.split()) >= 3}
    done = {i for i, _, _ in pairs}
    # a prompt the train file pairs with many different completions is a generic opening or template ("Once upon a
    # time, there was a little girl named"), not a leaked eval item: only distinctive prompts count
    answers: dict[str, set[str]] = {}
    for e in ctx.train:
        if e.prompt and (k := normalize(e.prompt)) in eval_prompts:
            answers.setdefault(k, set()).add(normalize(e.target_text()))
    generic = {k for k, v in answers.items() if len(v) > t.generic_completions}
    prompt_rows = [e.index for e in ctx.train if e.prompt and e.index not in done
                   and (k := normalize(e.prompt)) in eval_prompts and k not in generic]  # fmt: skip
    if prompt_rows:
        yield Hit(
            f"{len(prompt_rows)} train row(s) share their prompt with an eval row (different completion)",
            severity="warning",
            evidence=rows_ev(prompt_rows, len(ctx.train), _tfile(ctx), eval_file=ctx.eval_file, kind="prompt"),
            fix=drop_fix("Re-split by prompt so a prompt is in one split only", prompt_rows, _tfile(ctx), "D105"),
        )
    generic_rows = [e.index for e in ctx.train if e.prompt and e.index not in done
                    and normalize(e.prompt) in generic]  # fmt: skip
    if generic_rows:
        yield Hit(
            f"{len(generic_rows)} train row(s) reuse an eval prompt that the train file pairs with many different "
            "completions: a generic opening, not a leak (noted for what these rows have in common)",
            severity="info",
            evidence=rows_ev(
                generic_rows,
                len(ctx.train),
                _tfile(ctx),
                eval_file=ctx.eval_file,
                kind="generic_prompt",
                prompts=sorted(generic)[:10],
            ),
            fix=drop_fix(
                "If these rows should not teach the eval prompts another answer, drop or rewrite them",
                generic_rows,
                _tfile(ctx),
                "D105",
            ),
        )


@rule(
    "D106", "truncation", "warning", cause="mechanical", needs=("formatted",), tiers="W/E",
    thresholds={
        "warn_percent": (1.0, "percent of rows over the max length above which it warns"),
        "error_percent": (5.0, "percent of rows over the max length above which it is an error"),
    },
    summary="Rows whose tokenized length exceeds the effective max length (TRL default 1024, Axolotl 512 and it "
    "drops them, LLaMA-Factory 2048).",
    why="Truncated rows lose their end (usually the answer) or are silently dropped; the model learns answers that "
    "stop mid-sentence.",
    example="max_length 512 while 12% of rows are 600-900 tokens.",
    fix="Raise the max length (the config key shown) or filter the long rows.",
    seen_in="trl#2400, unsloth#2904, LLaMA-Factory#2996",
)  # fmt: skip
def truncation(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    fx = ctx.formatted or []
    rows = [f.index for f in fx if f.truncated or f.dropped]
    n = len(fx)
    p = pct(len(rows), n)
    if not rows or p <= t.warn_percent:
        return
    ml, src = ctx.effective_max_length()
    lens = sorted(f.n_tokens_before_truncation for f in fx)
    need = lens[min(len(lens) - 1, int(0.99 * len(lens)))]
    dropped = sum(1 for f in fx if f.dropped)
    key = ctx.setup.max_length_key or "max_length"
    yield Hit(
        f"{len(rows)} row(s) ({p}%) exceed the max length {ml} ({src})" + (f"; {dropped} dropped" if dropped else ""),
        severity="error" if p > t.error_percent else "warning",
        evidence=rows_ev(rows, n, _tfile(ctx), key=key, value=ml, source=src, p99_tokens=need, max_tokens=lens[-1],
                         dropped=dropped),
        fix=Fix(text=f"Set {key} to at least {need} (the 99th percentile length), or filter the long rows",
                key=key, value=need),
    )  # fmt: skip


@rule(
    "D107", "completion_cut", "error", cause="mechanical", needs=("formatted",),
    thresholds={"max_percent": (0.0, "percent of rows cut inside the completion tolerated")},
    summary="Truncation falls inside the completion, so its end and the EOS are lost.",
    why="The model is trained on answers that stop mid-way and never sees where they end: at inference it rambles "
    "or stops abruptly.",
    example="A 700-token answer under max_length 512.",
    fix="Raise the max length or drop those rows (command shown).",
    seen_in="open-instruct#1876, torchtune#2792",
)  # fmt: skip
def completion_cut(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    fx = ctx.formatted or []
    rows = [f.index for f in fx if f.cut_in_completion and not f.dropped]
    if rows and pct(len(rows), len(fx)) > t.max_percent:
        ml, src = ctx.effective_max_length()
        yield Hit(
            f"{len(rows)} row(s) ({pct(len(rows), len(fx))}%) are cut inside the completion at max length {ml} ({src})",
            evidence=rows_ev(rows, len(fx), _tfile(ctx), key=ctx.setup.max_length_key or "max_length", value=ml,
                             source=src),
            fix=drop_fix("Drop those rows or raise the max length", rows, _tfile(ctx), "D107"),
        )  # fmt: skip


@rule(
    "D108", "zero_trainable", "error", cause="mechanical", needs=("formatted",),
    summary="Rows with no label tokens: the prompt alone fills the max length, or the mask leaves nothing.",
    why="Such rows contribute nothing; a batch made only of them gives a NaN loss (0/0), and eval_loss turns NaN.",
    example="A 2,000-token prompt with max_length 1024 and completion-only loss.",
    fix="Filter the rows, or raise the max length.",
    seen_in="llama-cookbook#133, trl#6671, axolotl#3026",
)  # fmt: skip
def zero_trainable(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    fx = ctx.formatted or []
    rows = [f.index for f in fx if f.n_label_tokens == 0 and not f.dropped]
    if rows:
        yield Hit(
            f"{len(rows)} row(s) have no label tokens after formatting (all labels -100)",
            evidence=rows_ev(rows, len(fx), _tfile(ctx)),
            fix=drop_fix("Drop those rows (or raise the max length)", rows, _tfile(ctx), "D108"),
        )


@rule(
    "D109", "missing_eos", "error", cause="mechanical", needs=("formatted",),
    thresholds={"max_percent": (0.0, "percent of (uncut) rows without a trained EOS tolerated")},
    summary="The target has no EOS / end-of-turn label token and the trainer will not add one.",
    why="The model never learns to stop: generations run on until max_new_tokens.",
    example="TRL < 0.16 (no automatic EOS) and completions without eos_token.",
    fix="Append the tokenizer's eos_token to each completion, or use a trainer version that adds it.",
    seen_in="trl#1623, trl#3083",
)  # fmt: skip
def missing_eos(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    fx = [f for f in (ctx.formatted or []) if not f.dropped and not f.cut_in_completion and f.n_label_tokens > 0]
    rows = [f.index for f in fx if not f.ends_with_eos]
    if rows and pct(len(rows), len(fx)) > t.max_percent:
        eos = getattr(ctx.tokenizer, "eos_token", None)
        add = ctx.format_settings.add_eos if ctx.format_settings else None
        yield Hit(
            f"{len(rows)} row(s) ({pct(len(rows), len(fx))}%) end without a trained EOS ({eos!r}); add_eos={add}",
            evidence=rows_ev(rows, len(fx), _tfile(ctx), key="add_eos", value=add,
                             source=(ctx.format_settings.sources.get("add_eos") if ctx.format_settings else None)),
            fix=Fix(text=f"Append {eos!r} to every completion / text, or train with a version that adds EOS "
                    "(TRL >= 0.16)", key="add_eos", value=True),
        )  # fmt: skip


@rule(
    "D110", "bos_count", "error", cause="mechanical", needs=("formatted", "tokenizer"),
    summary="Two BOS tokens at the start of a row, or none where the tokenizer adds one.",
    why="A doubled BOS (template adds it, then the tokenizer again) or a missing one shifts the model off its "
    "pre-training distribution.",
    example="Text rendered by apply_chat_template (with <s>) tokenized again with add_special_tokens=True.",
    fix="Tokenize pre-rendered text with add_special_tokens=False when the template adds BOS.",
    seen_in="trl#1400, alignment-handbook#127",
)  # fmt: skip
def bos_count(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    bos = getattr(ctx.tokenizer, "bos_token_id", None)
    if bos is None:
        return
    fx = [f for f in (ctx.formatted or []) if f.input_ids]
    double = [f.index for f in fx if len(f.input_ids) > 1 and f.input_ids[0] == bos and f.input_ids[1] == bos]
    if double:
        yield Hit(
            f"{len(double)} row(s) start with two BOS tokens",
            evidence=rows_ev(double, len(fx), _tfile(ctx)),
            fix=Fix(text="Remove the BOS from the rendered text, or tokenize with add_special_tokens=False"),
        )
    try:
        adds_bos = list(ctx.tokenizer("a")["input_ids"])[:1] == [bos]
    except Exception:
        adds_bos = False
    if adds_bos:
        none = [f.index for f in fx if f.input_ids[0] != bos]
        if none:
            yield Hit(
                f"{len(none)} row(s) start without the BOS token the tokenizer normally adds",
                evidence=rows_ev(none, len(fx), _tfile(ctx)),
                fix=Fix(text="Tokenize with add_special_tokens=True (or render the template with its BOS)"),
            )


@rule(
    "D111", "special_in_content", "warning", cause="mechanical", needs=("train",),
    summary="Template control strings (<|im_end|>, <|eot_id|>, </s>, the tokenizer's own special strings but its "
    "unknown-token marker) inside message content, a prompt or a completion; a completion may end on the model's own "
    "EOS, but '<|endoftext|>' closing every completion of OpenAI's legacy fine-tuning rows is another model's.",
    why="They tokenize to real special tokens: the model learns to end turns in odd places, and turn boundaries in "
    "the rendered sequence are wrong.",
    example='{"role": "user", "content": "Explain <|im_end|> tokens"}',
    fix="Escape or remove control strings from content; pre-rendered text belongs in a text row.",
    seen_in="unsloth#1056",
)  # fmt: skip
def special_in_content(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    specials = set(CONTROL_STRINGS)
    tok = ctx.tokenizer
    if tok is not None:  # the tokenizer's own special strings, but its unknown-token marker ('<unk>' is also text)
        unk = getattr(tok, "unk_token", None)
        specials |= {s for s in (getattr(tok, "all_special_tokens", None) or []) if s and len(s) > 2 and s != unk}
    eos = getattr(tok, "eos_token", None) if tok is not None else None
    pat = re.compile("|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)))
    rows: list[int] = []
    found: Counter[str] = Counter()
    for e in ctx.train:
        if e.format == "text":
            continue  # pre-rendered text is expected to contain markers
        parts = (
            [str(m.get("content") or "") for m in e.messages] if e.messages else [e.prompt or "", e.completion or ""]
        )
        if not e.messages and eos and parts[1].rstrip().endswith(eos):
            parts[1] = parts[1].rstrip()[: -len(eos)]  # a deliberate EOS at the end of the completion
        hits = [m.group() for p in parts for m in pat.finditer(p)]
        if hits:
            rows.append(e.index)
            found.update(hits)
    if rows:
        yield Hit(
            f"{len(rows)} row(s) contain template control strings in their content: {dict(found.most_common(5))}",
            evidence=rows_ev(rows, len(ctx.train), _tfile(ctx), strings=dict(found.most_common(10))),
            fix=drop_fix("Remove or escape the control strings in those rows, or drop them", rows, _tfile(ctx), "D111"),
        )


@rule(
    "D112", "template_mismatch", "warning", cause="mechanical", needs=("train",),
    summary="Pre-rendered text uses another template family's markers than the model's chat template, or rows mix "
    "families. Alpaca-keyed rows (instruction/input/output) count as Alpaca text unless the run is LLaMA-Factory's, "
    "which renders them with its own template.",
    why="The model is trained on one turn format and served with another ([INST] text on a ChatML model, Alpaca "
    "prompts on an instruct model): it follows neither well.",
    example="text rows with [INST] ... [/INST] for a Qwen (ChatML) model.",
    fix="Store conversations as messages and render them with the model's own chat template.",
    seen_in="LLaMA-Factory#2509",
)  # fmt: skip
def template_mismatch(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    fam_rows: dict[str, list[int]] = {}
    keyed: set[int] = set()  # Alpaca-keyed rows (instruction/input/output), as opposed to Alpaca text
    lf = ctx.framework() == "llamafactory"  # LLaMA-Factory renders Alpaca-keyed rows with its own template
    for e in ctx.train:
        txt = e.text if e.text is not None else (e.prompt or "") if e.format != "alpaca" else None
        if e.format == "alpaca":
            if not lf:
                fam_rows.setdefault("alpaca", []).append(e.index)
                keyed.add(e.index)
            continue
        if not txt:
            continue
        fam = _family_of(txt)
        if fam:
            fam_rows.setdefault(fam, []).append(e.index)
    if not fam_rows:
        return
    model_fam = _family_of(ctx.chat_template()) if ctx.chat_template() else None
    if len(fam_rows) > 1:
        main = max(fam_rows, key=lambda k: len(fam_rows[k]))
        rows = sorted(i for k, v in fam_rows.items() if k != main for i in v)
        yield Hit(
            f"rows mix template families: { {k: len(v) for k, v in fam_rows.items()} }",
            evidence=rows_ev(rows, len(ctx.train), _tfile(ctx), families={k: len(v) for k, v in fam_rows.items()}),
            fix=drop_fix(f"Render every row with one template ({model_fam or main})", rows, _tfile(ctx), "D112"),
        )
    elif model_fam:
        fam, rows = next(iter(fam_rows.items()))
        as_keys = keyed.issuperset(rows)
        what = ("are Alpaca rows (instruction/output), rendered with the Alpaca template," if as_keys
                else f"use {fam} markers")  # fmt: skip
        fix = ("Store rows as messages so the model's chat template renders them (LLaMA-Factory does so for Alpaca "
               "rows)" if as_keys else "Store rows as messages; apply the model's chat template")  # fmt: skip
        if fam != model_fam:
            yield Hit(f"{len(rows)} row(s) {what} but the tokenizer's chat template is {model_fam}",
                      evidence=rows_ev(rows, len(ctx.train), _tfile(ctx), data_family=fam, model_family=model_fam),
                      fix=Fix(text=fix))  # fmt: skip


def _marker(ctx: DiagnoseContext) -> tuple[str | None, str | None]:
    for key in ("response_template", "response_marker", "response_part", "assistant_marker"):
        v = ctx.setup.raw.get(key)
        if isinstance(v, str) and v:
            return v, ctx.src(key) or key
    return None, None


@rule(
    "D113", "response_marker_absent", "error", cause="mechanical", needs=("train",),
    summary="Marker-based completion masking (DataCollatorForCompletionOnlyLM response_template) and the marker is "
    "missing from a row, as text or as tokens in context.",
    why="Rows where the collator cannot find the marker get all labels -100 (TRL only warns) or, tokenized in "
    "context, the marker's ids differ from the marker tokenized alone, so no row is ever trained.",
    example='response_template="### Answer:" while rows say "### Answer :" or tokenize "\\n###" differently.',
    fix="Use the marker's token ids as tokenized in context (e.g. tokenizer.encode('\\n### Answer:')[2:]), or "
    "switch to prompt/completion rows.",
    seen_in="trl#980, trl#1820",
)  # fmt: skip
def response_marker_absent(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    marker, src = _marker(ctx)
    if not marker:
        return
    texts = {e.index: e.plain_text() if e.text is None else e.text for e in ctx.train}
    rows = [i for i, txt in texts.items() if marker not in txt]
    ev_key = {"key": "response_template", "value": marker, "source": src}
    if rows:
        yield Hit(
            f"{len(rows)} row(s) do not contain the response marker {marker!r}",
            evidence=rows_ev(rows, len(ctx.train), _tfile(ctx), **ev_key),
            fix=drop_fix("Drop those rows or fix the marker", rows, _tfile(ctx), "D113"),
        )
    if ctx.tokenizer is not None and ctx.formatted is not None:
        try:
            ids = list(ctx.tokenizer(marker, add_special_tokens=False)["input_ids"])
        except Exception:
            return
        if not ids:
            return
        have = set(rows)
        tok_rows = []
        for f in ctx.formatted:
            if f.index in have:
                continue
            seq, k = f.input_ids, len(ids)
            if not any(seq[i : i + k] == ids for i in range(len(seq) - k + 1)):
                tok_rows.append(f.index)
        if tok_rows:
            yield Hit(f"{len(tok_rows)} row(s) contain {marker!r} as text but not its token ids {ids} in context",
                      evidence=rows_ev(tok_rows, len(ctx.formatted), _tfile(ctx), marker_ids=ids, **ev_key),
                      fix=Fix(text="Pass the marker as token ids taken from a tokenized row (context tokenization)",
                              key="response_template"))  # fmt: skip


@rule(
    "D114", "token_boundary", "warning", cause="mechanical", needs=("formatted",),
    thresholds={"max_percent": (1.0, "percent of rows whose prompt tokens are not a prefix, above which it fires")},
    summary="tokens(prompt) is not a prefix of tokens(prompt + completion) for more than a share of rows.",
    why="The prompt/completion boundary falls inside a merged token: the mask is off by one token and the first "
    "completion token is trained on a context the model never sees at inference.",
    example='prompt "Answer: " (trailing space) + completion "42".',
    fix="Trim the trailing whitespace of prompts and start completions with the space.",
    seen_in="TRL tokenization-mismatch warning",
)  # fmt: skip
def token_boundary(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    fx = ctx.formatted or []
    rows = [f.index for f in fx if f.prefix_mismatch]
    if rows and pct(len(rows), len(fx)) > t.max_percent:
        yield Hit(
            f"{len(rows)} row(s) ({pct(len(rows), len(fx))}%) tokenize differently at the prompt/completion boundary",
            evidence=rows_ev(rows, len(fx), _tfile(ctx)),
        )


@rule(
    "D115", "size_small", "warning", cause="content", needs=("train",), tiers="W/E",
    thresholds={"warn_below": (100, "rows below which it warns"), "error_below": (10, "rows below which it errors")},
    summary="Too few training rows: fewer than 100 (warning), fewer than 10 (error).",
    why="With a handful of rows the adapter memorises them; the eval numbers are noise.",
    example="a 40-row train file",
    fix="Add data (hundreds of rows at least).",
    seen_in="OpenAI validators",
)  # fmt: skip
def size_small(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    n = len(ctx.train)
    if n < t.warn_below:
        yield Hit(
            f"only {n} training rows",
            severity="error" if n < t.error_below else "warning",
            evidence={"count": n, "file": _tfile(ctx)},
        )


def _system_prompt(e: Example) -> str | None:
    """A row's system prompt: its first message's when that is a system turn, an Alpaca row's ``system`` field; ""
    for a chat or Alpaca row without one; None for a row that cannot carry one (plain prompt/completion, text)."""
    if e.messages:
        first = e.messages[0]
        return str(first.get("content") or "") if first.get("role") == "system" else ""
    if e.format == "alpaca":
        return str(e.raw.get("system") or "")
    return None


@rule(
    "D136", "system_prompt_mix", "warning", cause="mechanical", needs=("train",), tiers="W/I",
    thresholds={"min_percent": (10.0, "share of rows on the minority side (with or without a system prompt) from "
                                      "which it is a warning; below it a note")},
    summary="Some chat rows carry a system prompt and the others none.",
    why="A chat template writes its own default system prompt (or none) into the rows without one, so the file "
    "teaches its answers under two different prompts, and the model serves one of them: what the rows under the "
    "other prompt teach carries over only in part, and the rows without one move the template's default behaviour.",
    example="80 of 160 rows start with a system turn 'You are MathTutor...', the other 80 have none.",
    fix="Give every row the system prompt you serve with (or none), then retrain.",
    seen_in="meta-llama/llama3#203",
)  # fmt: skip
def system_prompt_mix(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    prompts = [(e.index, _system_prompt(e)) for e in ctx.train]
    with_sys = [i for i, s in prompts if s]
    without = [i for i, s in prompts if s == ""]
    if not with_sys or not without:
        return
    rows = with_sys if len(with_sys) <= len(without) else without
    n = len(with_sys) + len(without)
    top = Counter(s for _, s in prompts if s).most_common(1)[0][0]
    side = "carry a system prompt" if rows is with_sys else "carry no system prompt"
    yield Hit(
        f"{len(rows)} of {n} chat rows ({pct(len(rows), n)}%) {side}, the other {n - len(rows)} "
        f"{'none' if rows is with_sys else 'one'} (most often {top[:60]!r})",
        severity="warning" if pct(len(rows), n) >= t.min_percent else "info",
        evidence=rows_ev(rows, len(ctx.train), _tfile(ctx), system_prompt=top[:200]),
        fix=drop_fix("Give every row the system prompt you serve with (or none), or drop the listed rows", rows,
                     _tfile(ctx), "D136"),
    )  # fmt: skip


IDENTICAL_PERCENT = 30.0  # D116's default: one target above this share of the rows is D116's, not D137's


def _is_labels(ctx: DiagnoseContext, max_distinct: int = 20) -> bool:
    def compute() -> bool:
        targets = set(ts.norm_targets(ctx))
        return len(ctx.train) >= 20 and len(targets) <= max_distinct and all(len(k.split()) <= 5 for k in targets)

    return bool(ts.cache(ctx, f"is_labels:{max_distinct}", compute))


@rule(
    "D116", "identical_targets", "warning", cause="content", needs=("train",),
    thresholds={"max_percent": (IDENTICAL_PERCENT, "share of rows with one same target above which it fires")},
    summary="One completion is the target of more than 30% of rows (classification label sets are left to "
    "label_imbalance).",
    why="The model learns to output that string whatever the prompt.",
    example='"I cannot help with that." as the completion of 45% of rows.',
    fix="Diversify the targets or down-sample that one.",
    seen_in="OpenAI validators",
)  # fmt: skip
def identical_targets(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    if _is_labels(ctx):
        return
    norm = ts.norm_targets(ctx)
    c = Counter(k for k, tgt in zip(norm, ts.targets(ctx), strict=True) if tgt.strip())
    if not c:
        return
    top, cnt = c.most_common(1)[0]
    if cnt >= 2 and pct(cnt, len(ctx.train)) > t.max_percent:  # a target seen once is not repeated
        rows = [e.index for e, k in zip(ctx.train, norm, strict=True) if k == top]
        yield Hit(
            f"{cnt} rows ({pct(cnt, len(ctx.train))}%) have the same target {top[:60]!r}",
            evidence=rows_ev(rows, len(ctx.train), _tfile(ctx), target=top[:200]),
            fix=Fix(text="Down-sample the repeated target or diversify it"),
        )


@rule(
    "D117", "boilerplate_prefix", "warning", cause="content", needs=("train",),
    thresholds={"min_share": (0.5, "shared prefix as a share of the mean prompt length above which it fires")},
    summary="A shared prompt prefix (system prompt, instructions) makes up most of every row while the loss covers "
    "the inputs.",
    why="Most of the gradient goes to reproducing the same boilerplate, not the answers.",
    example="A 300-token system prompt before 40-token questions, with train_on_inputs: true.",
    fix="Mask the prompt (completion-only / assistant-only loss).",
    seen_in="unsloth#3041",
)  # fmt: skip
def boilerplate_prefix(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    full_loss = ctx.masking() == "full"
    texts = []
    for e in ctx.train:
        if e.text is not None:
            texts.append(e.text)
            full_loss = full_loss or e.format == "text"
        elif e.messages:
            texts.append("\n".join(str(m.get("content") or "") for m in e.messages if m.get("role") != "assistant"))
        else:
            texts.append(e.prompt or "")
    if not full_loss or len(texts) < 5:
        return
    prefix = os.path.commonprefix(texts)
    mean_len = sum(map(len, texts)) / len(texts)
    if mean_len and len(prefix) / mean_len >= t.min_share:
        yield Hit(f"every row starts with the same {len(prefix)} characters ({len(prefix) / mean_len:.0%} of the mean "
                  "input) and the loss covers the inputs",
                  evidence={"prefix": prefix[:200], "prefix_chars": len(prefix), "mean_chars": round(mean_len, 1),
                            "key": "masking", "value": ctx.masking(), "source": ctx.src("masking")},
                  fix=Fix(text="Train on completions only", key="masking", value="completion_only"))  # fmt: skip


@rule(
    "D118", "length_outliers", "info", cause="content", needs=("train",),
    thresholds={"factor": (10.0, "a row this many times the median length counts as an outlier"),
                "min_chars": (2000, "only rows at least this long count")},
    summary="Rows far longer than the median row.",
    why="A few huge rows dominate memory and padding, and are often scraping accidents (whole pages, logs).",
    example="median 300 characters, 12 rows over 20,000.",
    fix="Inspect and drop or split the outliers.",
)  # fmt: skip
def length_outliers(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    lens = sorted(map(len, ts.plains(ctx)))
    med = lens[len(lens) // 2]
    lim = max(t.factor * med, t.min_chars)
    rows = [e.index for e, x in zip(ctx.train, ts.plains(ctx), strict=True) if len(x) > lim]
    if rows:
        yield Hit(
            f"{len(rows)} row(s) are over {int(lim)} characters ({t.factor:g}x the median {med})",
            evidence=rows_ev(rows, len(ctx.train), _tfile(ctx), median_chars=med),
            fix=drop_fix("Inspect and drop the outliers", rows, _tfile(ctx), "D118"),
        )


_MOJIBAKE = re.compile("\ufffd|Ã[\u0080-\u00bf]|â€|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # all _MOJIBAKE can find in an ASCII text


def _has_mojibake(text: str) -> bool:
    return bool((_CONTROL if text.isascii() else _MOJIBAKE).search(text))


@rule(
    "D119", "encoding_artifacts", "warning", cause="mechanical", needs=("train",),
    thresholds={"max_percent": (0.5, "percent of rows with artifacts above which it fires")},
    summary="Replacement characters, mojibake (Ã©, â€™) or control characters in the text.",
    why="A decode with the wrong codec upstream: the model learns the garbage.",
    example='"It\\u00e2\\u0080\\u0099s great" instead of "It’s great".',
    fix="Re-decode the source as UTF-8 (or fix with ftfy) and drop what cannot be repaired.",
)  # fmt: skip
def encoding_artifacts(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    rows = [e.index for e, x in zip(ctx.train, ts.plains(ctx), strict=True) if _has_mojibake(x)]
    if rows and pct(len(rows), len(ctx.train)) > t.max_percent:
        yield Hit(
            f"{len(rows)} row(s) ({pct(len(rows), len(ctx.train))}%) contain mojibake or control characters",
            evidence=rows_ev(rows, len(ctx.train), _tfile(ctx)),
            fix=drop_fix("Re-decode the source as UTF-8, or drop the rows", rows, _tfile(ctx), "D119"),
        )


_NULLS = {"nan", "none", "null", "undefined", "[object object]", "<na>"}


@rule(
    "D120", "null_strings", "warning", cause="content", needs=("train",),
    summary="Targets that are a serialized missing value: 'nan', 'None', 'null', 'undefined'; not where the prompt "
    "holds the word (a question about JSON's types answered 'undefined').",
    why="A pandas/JSON export turned missing values into strings; the model learns to answer 'nan'.",
    example='{"prompt": "...", "completion": "nan"}',
    fix="Drop those rows, and fix the export.",
)  # fmt: skip
def null_strings(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    nulls = {
        e.index: x for e, tgt in zip(ctx.train, ts.targets(ctx), strict=True) if (x := tgt.strip().lower()) in _NULLS
    }
    prompts = {i: p.lower() for i, p, _ in ts.answers(ctx) if i in nulls}  # the word asked about is an answer
    rows = [i for i, x in nulls.items() if not re.search(rf"(?<!\w){re.escape(x)}(?!\w)", prompts.get(i, ""))]
    if rows:
        yield Hit(
            f"{len(rows)} row(s) have a serialized missing value as their target",
            evidence=rows_ev(rows, len(ctx.train), _tfile(ctx)),
            fix=drop_fix("Drop those rows and fix the export", rows, _tfile(ctx), "D120"),
        )


@rule(
    "D121", "answer_in_prompt", "warning", cause="content", needs=("train",), tiers="I/W",
    thresholds={"max_percent": (1.0, "percent of rows that copy (or leak) above which it fires"),
                "warn_percent": (5.0, "percent of rows at which it is a warning: a join or template bug touches "
                                 "every row it builds, while a task mix holds a few tasks whose answer is part of "
                                 "their input (extract a sentence, pick one of the listed labels)"),
                "min_chars": (20, "only texts at least this long are checked")},
    summary="An answer that copies its prompt, or a completion that appears verbatim (case and all, spacing aside) in "
    "the prompt, in every row format (prompt/completion, and each assistant turn against the user turn before it); "
    "a note below warn_percent of the rows.",
    why="A join or templating bug: the answer column holds the question (the model learns to echo), or the answer "
    "leaks into the input (the model learns to copy, and eval loss is meaningless). It touches every row built by "
    "the same code; a few rows are more likely tasks that copy by design.",
    example='prompt "Q: 2+2? A: 4\\n" completion "4" built from the wrong column; or an assistant turn equal to the '
    "user turn.",
    fix="Fix the join / prompt template so the answer column holds the answer and the prompt does not.",
)  # fmt: skip
def answer_in_prompt(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    leak, copy = [], []
    min_chars = t.min_chars
    done = -1  # the row already counted: its other pairs are not checked
    for i, prompt, answer in ts.answers(ctx):
        if i == done:
            continue
        a, p = " ".join(answer.split()), " ".join(prompt.split())  # a join copies verbatim: case is kept
        if len(a) >= min_chars and a in p:
            leak.append(i)
            done = i
        elif len(p) >= min_chars and p in a:
            copy.append(i)
            done = i
    rows = sorted(set(leak) | set(copy))
    share = pct(len(rows), len(ctx.train))
    if rows and share > t.max_percent:
        yield Hit(
            f"{len(rows)} row(s) ({share}%): {len(copy)} answer(s) copy their prompt, {len(leak)} prompt(s) contain "
            "their answer",
            severity="warning" if share >= t.warn_percent else "info",
            evidence=rows_ev(rows, len(ctx.train), _tfile(ctx), copies=len(copy), leaks=len(leak)),
            fix=drop_fix("Fix the join / prompt template; drop the listed rows", rows, _tfile(ctx), "D121"),
        )


@rule(
    "D122", "label_imbalance", "warning", cause="content", needs=("train",),
    thresholds={"max_share": (0.8, "share of the majority label above which it fires")},
    summary="Classification-style data (at most 20 distinct short targets) where one label dominates.",
    why="The adapter learns the prior: it predicts the majority label and accuracy looks fine.",
    example="90% ' positive', 10% ' negative'.",
    fix="Rebalance (down-sample the majority or up-sample the minority).",
)  # fmt: skip
def label_imbalance(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    if not _is_labels(ctx):
        return
    c = Counter(ts.norm_targets(ctx))
    top, cnt = c.most_common(1)[0]
    if len(c) > 1 and cnt / len(ctx.train) > t.max_share:
        yield Hit(f"label {top!r} is {cnt / len(ctx.train):.0%} of rows ({dict(c.most_common(5))})",
                  evidence={"count": cnt, "total": len(ctx.train), "percent": pct(cnt, len(ctx.train)),
                            "labels": dict(c), "file": _tfile(ctx)})  # fmt: skip


_REFUSALS = ("as an ai language model", "i'm sorry, but i can't", "i cannot assist with", "as a large language model")
_REFUSAL_OPENING = re.compile(
    r"^\W*(?:i['’]?m sorry|sorry,|i apologi[sz]e|unfortunately,? (?:i|as an ai)|as an ai\b|i (?:cannot|can['’]?t|"
    r"can not|am unable to|am not able to|won['’]?t be able to|will not be able to)\b|i['’]m (?:unable|not able) to)",
    re.IGNORECASE,
)


@rule(
    "D123", "refusal_boilerplate", "info", cause="content", needs=("train",), tiers="I/W",
    thresholds={"max_percent": (1.0, "percent of targets with refusal phrases above which it fires"),
                "warn_percent": (5.0, "percent of targets at which it is a warning: enough refusals to teach the "
                                 "adapter to refuse requests it used to answer")},
    summary="Targets with distilled refusal boilerplate: answers that open with an apology or an inability ('I'm "
    "sorry', 'Unfortunately, I am unable to', 'I cannot', 'As an AI') or contain 'As an AI language model...'.",
    why="Distilled data carries the teacher's refusals: the adapter learns to refuse harmless requests.",
    example='"As an AI language model, I cannot..."',
    fix="Filter the refusals out of the targets.",
)  # fmt: skip
def refusal_boilerplate(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    rows = [e.index for e, tgt in zip(ctx.train, ts.targets(ctx), strict=True) if _is_refusal(tgt)]
    p = pct(len(rows), len(ctx.train))
    if rows and p > t.max_percent:
        yield Hit(
            f"{len(rows)} target(s) ({p}%) are refusals or carry refusal boilerplate",
            severity="warning" if p >= t.warn_percent else None,
            evidence=rows_ev(rows, len(ctx.train), _tfile(ctx)),
            fix=drop_fix("Drop the refusal rows", rows, _tfile(ctx), "D123"),
        )


def _is_refusal(text: str) -> bool:
    """Whether a reply opens or carries refusal boilerplate in English (D123's phrases)."""
    return bool(_REFUSAL_OPENING.match(text[:200])) or any(r in text.lower() for r in _REFUSALS)


_TAG = re.compile(r"<[^<>\s]{1,40}>")  # a tag or a special token written out ('<|endoftext|>', '</s>')


def _words_of(reply: str) -> int:
    """The words of a reply's prose (:func:`ts.prose`, tags left out), a character of an unspaced script as one."""
    return sum(ts.script_units(_TAG.sub(" ", ts.prose(reply))).values())


def _trigrams(text: str) -> set[str]:
    """A normalized text's character 3-grams: a similarity that needs no word boundaries (Chinese, Japanese)."""
    return {text[i : i + 3] for i in range(max(1, len(text) - 2))}


def _related_requests(requests: list[str], percentile: float, pairs: int = 2000) -> float:
    """The ``percentile`` of the character 3-gram Jaccard similarity of pairs of the file's requests drawn at random
    (seeded): how alike two unrelated requests of this file are."""
    if len(requests) < 2:
        return 0.0
    rng = random.Random(0)
    grams: dict[int, set[str]] = {}
    sims = []
    for _ in range(pairs):
        i, j = rng.sample(range(len(requests)), 2)
        for k in (i, j):
            if k not in grams:
                grams[k] = _trigrams(requests[k])
        sims.append(set_jaccard(grams[i], grams[j]))
    sims.sort()
    return sims[min(len(sims) - 1, int(len(sims) * percentile / 100))]


def _median_similarity(requests: list[str], most: int = 50) -> float:
    """The median character 3-gram Jaccard similarity of the pairs of the first ``most`` requests."""
    grams = [_trigrams(q) for q in requests[:most]]
    return statistics.median(set_jaccard(a, b) for a, b in itertools.combinations(grams, 2))


@rule(
    "D137", "canned_reply", "warning", cause="content", needs=("train",), tiers="W/I",
    thresholds={"min_prompts": (3, "distinct requests that must get the same reply"),
                "min_words": (4, "a shared reply with fewer words than this in its prose (its text without code, "
                              "JSON or tags; a Chinese or Japanese character counts as a word) is a short answer (a "
                              "label, 'Yes') or a program, not a canned reply"),
                "related_percentile": (90.0, "requests more alike than this percentile of the file's pairs of "
                                       "requests drawn at random are one request asked several ways (a thanks, a "
                                       "greeting, a question about the assistant itself), whose shared reply is "
                                       "not canned"),
                "max_percent": (1.0, "percent of rows with canned replies above which it fires"),
                "warn_percent": (5.0, "percent of rows at which it is a warning")},
    summary="The same reply, word for word, to different requests: an apology, a refusal, an 'I don't know' or a "
    "template answer, in any language. Label sets (D122) and one reply above 30% of rows (D116) are left to those "
    "rules; replies D123 names as English refusals to D123.",
    why="A reply that does not depend on the request teaches the model to give it to requests like those: a safety "
    "set's refusal mixed into task data makes the adapter refuse what it used to answer.",
    example='"抱歉，我无法回答这个问题。" as the reply to 16 different questions in 160 rows.',
    fix="Drop the canned rows, or give each its real answer.",
)  # fmt: skip
def canned_reply(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    if _is_labels(ctx):
        return
    by_reply: dict[str, dict[str, list[int]]] = {}  # reply -> request -> rows
    for row, prompt, answer in ts.answers(ctx):
        if _words_of(answer) >= t.min_words and not _is_refusal(answer):
            by_reply.setdefault(normalize(answer), {}).setdefault(normalize(prompt), []).append(row)
    n = len(ctx.train)
    groups = {k: asked for k, asked in by_reply.items() if len(asked) >= t.min_prompts
              and pct(len({r for rows in asked.values() for r in rows}), n) <= IDENTICAL_PERCENT}  # fmt: skip
    if groups:
        alike = _related_requests([q for _, q, _ in ts.answers(ctx)], float(t.related_percentile))
        canned = {r: k for k, asked in groups.items() if _median_similarity(list(asked)) <= alike
                  for rows in asked.values() for r in rows}  # fmt: skip
    else:
        canned = {}
    p = pct(len(canned), n)
    if not canned or p <= t.max_percent:
        return
    top = Counter(canned.values()).most_common(3)
    rows = sorted(canned)
    shown = ", ".join(f"{k[:60]!r} ({c})" for k, c in top)
    yield Hit(
        f"{len(rows)} row(s) ({p}%) give the same reply, word for word, to different requests: {shown}",
        severity="warning" if p >= t.warn_percent else "info",
        evidence=rows_ev(rows, n, _tfile(ctx), replies={k[:200]: c for k, c in top}),
        fix=drop_fix("Drop the canned rows, or give each its own answer", rows, _tfile(ctx), "D137"),
    )


@rule(
    "D124", "truncation_estimate", "info", cause="mechanical", needs=("train",),
    thresholds={"chars_per_token": (3.5, "characters per token assumed without a tokenizer"),
                "warn_percent": (1.0, "percent of rows likely over the max length above which it fires")},
    summary="Without a tokenizer: rows whose character length suggests they exceed the max length.",
    why="A rough stand-in for truncation when the tokenizer is unavailable; pass --tokenizer for the exact check.",
    example="4,000-character rows with max_length 512.",
    fix="Pass --tokenizer/--base for exact counts; raise the max length or filter.",
)  # fmt: skip
def truncation_estimate(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    if ctx.formatted is not None:
        return
    ml, src = ctx.effective_max_length()
    if not ml:
        return
    rows = [e.index for e, x in zip(ctx.train, ts.plains(ctx), strict=True) if len(x) / t.chars_per_token > ml]
    if rows and pct(len(rows), len(ctx.train)) > t.warn_percent:
        yield Hit(f"about {len(rows)} row(s) ({pct(len(rows), len(ctx.train))}%) are likely over max length {ml} "
                  f"({src}); estimate at {t.chars_per_token} chars/token (no tokenizer)",
                  evidence=rows_ev(rows, len(ctx.train), _tfile(ctx), key=ctx.setup.max_length_key or "max_length",
                                   value=ml, source=src))  # fmt: skip


@rule(
    "D125", "eval_split_size", "info", cause="setup", needs=("eval",),
    thresholds={"min_rows": (20, "eval rows below which eval loss is too noisy")},
    summary="The eval set is tiny, or larger than the train set.",
    why="A few eval rows give a noisy eval_loss (early stopping on noise); an eval set larger than train is usually "
    "swapped files.",
    example="8 eval rows; or eval.jsonl with 9,000 rows and train.jsonl with 1,000.",
    fix="Hold out 2-5% of the data (at least a few dozen rows).",
)  # fmt: skip
def eval_split_size(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ne, nt = len(ctx.eval), len(ctx.train)
    if ne < t.min_rows:
        yield Hit(f"only {ne} eval rows", evidence={"count": ne, "file": ctx.eval_file})
    elif nt and ne > nt:
        yield Hit(
            f"the eval set ({ne} rows) is larger than the train set ({nt}): swapped files?",
            severity="warning",
            evidence={"count": ne, "total": nt, "file": ctx.eval_file},
        )


@rule(
    "D126", "double_eos", "warning", cause="mechanical", needs=("formatted", "tokenizer"),
    summary="Rows that end with two EOS tokens: the data already has eos_token and the trainer appends another.",
    why="The model learns to emit EOS twice; some serving stacks then return an empty next turn.",
    example='completion "Paris.</s>" with TRL >= 0.16, which appends </s> again.',
    fix="Remove eos_token from the data (the trainer adds it), or disable add_eos.",
)  # fmt: skip
def double_eos(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    eos = getattr(ctx.tokenizer, "eos_token_id", None)
    if eos is None:
        return
    fx = ctx.formatted or []
    rows = [f.index for f in fx if len(f.input_ids) >= 2 and f.input_ids[-1] == eos and f.input_ids[-2] == eos]
    if rows:
        yield Hit(
            f"{len(rows)} row(s) end with two EOS tokens",
            evidence=rows_ev(rows, len(fx), _tfile(ctx)),
            fix=Fix(text="Strip eos_token from the data; the trainer appends it", key="add_eos", value=True),
        )


@rule(
    "D127", "unformattable", "error", needs=("train", "tokenizer"), cause="mechanical",
    summary="The rows cannot be formatted with the given tokenizer: chat rows and a tokenizer without a chat "
    "template, or a template that raises on the rows.",
    why="The trainer renders every row with the tokenizer's chat template; without one it raises (or, in older "
    "versions, silently uses a default template the model was never trained on). The token-level checks cannot run "
    "either; every other check still does.",
    example='messages rows with --base pointing at a base model whose tokenizer_config.json has no "chat_template".',
    fix="Pass --tokenizer DIR of the chat model you train (its tokenizer_config.json has chat_template), or set a "
    "chat template on the tokenizer before training.",
)  # fmt: skip
def unformattable(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    if not ctx.format_error:
        return
    chat = [e.index for e in ctx.train if e.messages is not None]
    name = getattr(ctx.tokenizer, "name_or_path", "") or type(ctx.tokenizer).__name__
    yield Hit(
        f"these rows cannot be formatted with this tokenizer ({name}): {ctx.format_error}",
        evidence=rows_ev(chat or [e.index for e in ctx.train], len(ctx.train), _tfile(ctx), tokenizer=str(name)),
    )
