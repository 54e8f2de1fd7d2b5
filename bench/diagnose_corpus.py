"""A corpus of planted data faults on real text, for `gradian diagnose` and the validators people use instead.

Each file is a clean real set (GSM8K prompt/completion or messages, the sentiment sentences, base-model stories,
tinyshakespeare text rows; see tests/realsets.py) with one kind of fault planted in 15% of its rows (one row for
file-level faults). The foreign-language rows are hand-written sentences (no non-English text in ../shared).

Four kinds come in several cases each, on other sets, seeds, sizes and shares (near duplicates with a few edited
words, flipped sentiment labels, foreign reviews in an English sentiment file, text rows cut mid-word or
mid-sentence), with clean sets of the same shapes. `--score` runs `gradian diagnose --select D` on every file and
writes, per kind, the planted rows the expected rule flags (recall), the share of its flagged rows that are planted
(precision) and its severity (where that mixes in a note, also the recall and precision of the rows named at warning
or error alone), and every error or warning on the clean sets (false alarms).

    python bench/diagnose_corpus.py OUT_DIR                  # writes OUT_DIR/<kind>.jsonl, clean_<set>.jsonl, manifest
    python bench/diagnose_corpus.py OUT_DIR --score RESULTS  # and RESULTS.json, RESULTS.md (the scores)
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from foreign_reviews import REVIEWS  # noqa: E402

import realsets  # noqa: E402

SHARE = 0.15
FOREIGN = [
    "Le chat dort sur le canapé pendant que les enfants jouent dans le jardin avec leurs amis.",
    "Nous avons acheté du pain et du fromage au marché avant de rentrer à la maison ce soir.",
    "Elle a décidé de partir en vacances à la montagne parce qu'il faisait trop chaud en ville.",
    "Der Hund läuft jeden Morgen mit seinem Besitzer durch den großen Park neben dem Fluss.",
    "Wir haben gestern Abend einen sehr langen Film gesehen und sind danach spät nach Hause gegangen.",
    "Die Kinder spielen im Garten, während ihre Eltern in der Küche das Essen vorbereiten.",
    "El niño comió una manzana roja mientras esperaba el autobús en la esquina de la calle.",
    "Mañana vamos a visitar a nuestros abuelos que viven en un pueblo pequeño cerca del mar.",
    "La profesora explicó la lección dos veces porque muchos estudiantes no entendían el problema.",
    "Il ragazzo ha letto un libro interessante sulla storia della città durante le vacanze estive.",
    "Кошка спала на диване, пока дети играли во дворе со своими друзьями до самого вечера.",
    "Мы купили хлеб и молоко в магазине и пошли домой по длинной улице под дождём.",
]


REFUSALS = [
    "I'm sorry, I can't help with that.",
    "Unfortunately, I am unable to provide that information.",
    "I cannot answer this question.",
    "Sorry, that is not something I can do.",
    "I apologize, but I won't be able to assist with this request.",
    "As an AI, I don't have personal opinions on this.",
    "I'm not able to help with that request, but I can help with something else.",
]

# a refusal in other languages, as a safety set in the user's language writes it (hand-written)
FOREIGN_REFUSALS = [
    "抱歉，我无法帮助你处理这个请求。",
    "Je suis désolé, mais je ne peux pas vous aider avec cela.",
    "Es tut mir leid, aber dabei kann ich nicht helfen.",
    "Lo siento, pero no puedo ayudar con eso.",
    "申し訳ありませんが、そのお手伝いはできません。",
    "Извините, но я не могу с этим помочь.",
]


def _cut_mid(s: str, rng: random.Random) -> str:
    words = s.split()
    k = rng.randint(max(3, len(words) // 3), max(4, 2 * len(words) // 3))
    out = " ".join(words[:k]).rstrip(".!?,;:\"')")
    return (" " if s.startswith(" ") else "") + out


def _loop(s: str, rng: random.Random) -> str:
    sents = [x for x in s.replace("\n", " ").split(". ") if len(x.split()) >= 4] or [s.strip()]
    x = rng.choice(sents).strip().rstrip(".") + "."
    return s.rstrip() + " " + " ".join([x] * rng.randint(3, 6))


def _loop_phrase(s: str, rng: random.Random) -> str:
    words = s.split()
    k = rng.randint(0, max(0, len(words) - 6))
    phrase = " ".join(words[k : k + 6])
    return " ".join(words[:k]) + " " + " ".join([phrase] * 8)


PC_PLANTS: dict[str, Callable[[dict, random.Random], dict]] = {
    "cut_mid_sentence": lambda r, g: {**r, "completion": _cut_mid(r["completion"], g)},
    "loop_sentence": lambda r, g: {**r, "completion": _loop(r["completion"], g)},
    "loop_phrase": lambda r, g: {**r, "completion": " " + _loop_phrase(r["completion"], g)},
    "template_alpaca_text": lambda r, g: {
        "text": "### Question:\n" + r["prompt"] + "\n\n### Answer:\n" + r["completion"].strip()
    },
    "template_human_assistant_text": lambda r, g: {
        "text": "Human: " + r["prompt"] + "\n\nAssistant: " + r["completion"].strip()
    },
    "template_user_tag_text": lambda r, g: {
        "text": "<|user|>\n" + r["prompt"] + "\n<|assistant|>\n" + r["completion"].strip()
    },
    "next_turn_in_answer": lambda r, g: {**r, "completion": r["completion"] + "\n\nQuestion: What else?\nAnswer:"},
    "placeholder_single": lambda r, g: {**r, "prompt": "{instruction}\n\n" + r["prompt"]},
    "placeholder_double": lambda r, g: {
        **r,
        "prompt": r["prompt"].replace("Question:", "Question: {{input}}", 1)
        if "Question:" in r["prompt"]
        else "{{input}} " + r["prompt"],
    },
    "placeholder_angle": lambda r, g: {**r, "completion": " <PLACEHOLDER>" + r["completion"]},
    "html_tags": lambda r, g: {**r, "completion": " <p>" + r["completion"].strip() + "</p><br/>"},
    "html_entities": lambda r, g: {**r, "completion": r["completion"].replace(" ", "&nbsp;", 3)},
    "copied_prompt": lambda r, g: {**r, "completion": " " + r["prompt"]},
    "answer_leak": lambda r, g: {**r, "prompt": r["prompt"] + r["completion"]},
    "cot_stripped": lambda r, g: {**r, "completion": " " + r["completion"].strip().split("\n")[-1]},
    "foreign_language": lambda r, g: {**r, "completion": " " + " ".join(g.sample(FOREIGN, 3))},
    "empty_target": lambda r, g: {**r, "completion": " "},
    "null_string": lambda r, g: {**r, "completion": g.choice(["nan", "None", "null"])},
    "mojibake": lambda r, g: {**r, "completion": r["completion"].replace("e", "Ã©", 2) + " itâ€™s"},
    "control_token": lambda r, g: {**r, "completion": r["completion"] + "<|im_end|>"},
    "refusal": lambda r, g: {**r, "completion": " I'm sorry, but I can't help with that request."},
    "refusal_varied": lambda r, g: {**r, "completion": " " + g.choice(REFUSALS)},
    "extra_key": lambda r, g: {**r, "meta": "x"},
    "mixed_format_text": lambda r, g: {"text": r["prompt"] + r["completion"]},
    "refusal_foreign": lambda r, g: {**r, "completion": " " + FOREIGN_REFUSALS[0]},
    "refusal_foreign_varied": lambda r, g: {**r, "completion": " " + g.choice(FOREIGN_REFUSALS)},
}

CHAT_PLANTS: dict[str, Callable[[dict, random.Random], dict]] = {
    "chat_copied_prompt": lambda r, g: {"messages": [r["messages"][0], {"role": "assistant",
                                                                         "content": r["messages"][0]["content"]}]},
    "chat_repeated_role": lambda r, g: {"messages": [r["messages"][0], r["messages"][0], r["messages"][1]]},
    "chat_last_user": lambda r, g: {"messages": [*r["messages"], {"role": "user", "content": "Thanks!"}]},
    "chat_unknown_role": lambda r, g: {"messages": [{**r["messages"][0], "role": "human"}, r["messages"][1]]},
    "chat_cut_answer": lambda r, g: {"messages": [r["messages"][0], {"role": "assistant",
                                                                      "content": _cut_mid(r["messages"][1]["content"],
                                                                                          g)}]},
    "chat_extra_message_key": lambda r, g: {"messages": [r["messages"][0], {**r["messages"][1], "score": 1}]},
    "chat_loop": lambda r, g: {"messages": [r["messages"][0], {"role": "assistant",
                                                                "content": _loop(r["messages"][1]["content"], g)}]},
    "chat_system_prompt": lambda r, g: {"messages": [{"role": "system", "content": "You are a patient math tutor."},
                                                     *r["messages"]]},
    "chat_refusal_foreign": lambda r, g: {"messages": [r["messages"][0], {"role": "assistant",
                                                                           "content": g.choice(FOREIGN_REFUSALS[:2])}]},
}  # fmt: skip

# kind -> the rules that should catch it (any of them)
EXPECT = {
    "cut_mid_sentence": ["D128"], "loop_sentence": ["D129"], "loop_phrase": ["D129"],
    "template_alpaca_text": ["D130", "D101"], "template_human_assistant_text": ["D130", "D101"],
    "template_user_tag_text": ["D130", "D101"], "next_turn_in_answer": ["D130"], "placeholder_single": ["D131"],
    "placeholder_double": ["D131"], "placeholder_angle": ["D131"], "html_tags": ["D132"], "html_entities": ["D132"],
    "copied_prompt": ["D121"], "answer_leak": ["D121"], "cot_stripped": ["D133"], "foreign_language": ["D134"],
    "empty_target": ["D103"], "null_string": ["D120"], "mojibake": ["D119"], "control_token": ["D111"],
    "refusal": ["D123"], "refusal_varied": ["D123"], "extra_key": ["D101"], "mixed_format_text": ["D101"],
    "refusal_foreign": ["D137"], "refusal_foreign_varied": ["D137"], "chat_refusal_foreign": ["D137"],
    "chat_copied_prompt": ["D121"],
    "chat_repeated_role": ["D102"], "chat_last_user": ["D102"], "chat_unknown_role": ["D102", "D101"],
    "chat_cut_answer": ["D128"], "chat_extra_message_key": ["D101"], "chat_loop": ["D129"],
    "chat_system_prompt": ["D136"],
    "label_flip": ["D135"], "duplicates": ["D104"],
    "near_dup_gsm8k": ["D104"], "near_dup_sentiment": ["D104"], "near_dup_shakespeare": ["D104"],
    "near_dup_stories": ["D104"],
    "label_noise_sentiment": ["D135"], "label_noise_yelp": ["D135"], "label_noise_amazon_imdb": ["D135"],
    "foreign_sentiment": ["D134"], "foreign_sentiment_small": ["D134"], "foreign_yelp": ["D134"],
    "cut_text_shakespeare": ["D128"], "cut_text_gsm8k": ["D128"], "cut_text_stories": ["D128"],
}  # fmt: skip

# The precision each kind is held to besides recall >= 0.8 (0.5 unless named): a flipped label on a unique review
# shows only through a text model of the file, and a bag-of-words model also disagrees with about one correct short
# review in five, so at recall 0.8 its rows (those it names at warning and its review list, a note) hold about three
# correct rows per flipped one.
MIN_PRECISION = {"label_noise_sentiment": 0.2, "label_noise_yelp": 0.2, "label_noise_amazon_imdb": 0.2}


def _chat(rows: list[dict]) -> list[dict]:
    return [{"messages": [{"role": "user", "content": r["prompt"].removeprefix("Question: ").removesuffix("\nAnswer:")},
                          {"role": "assistant", "content": r["completion"].strip()}]} for r in rows]  # fmt: skip


def _pick(n: int, rng: random.Random, share: float = SHARE) -> list[int]:
    return sorted(rng.sample(range(n), max(1, int(share * n))))


def build(out: Path, seed: int = 0) -> dict:
    """Write every planted file and the clean sets; return the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    gsm, stories = realsets.gsm8k(600), realsets.stories()
    bases = {"gsm8k": gsm, "stories": stories}
    manifest: dict = {"kinds": {}, "clean": {}}
    for name, rows in {"gsm8k": realsets.gsm8k(1000), "sentiment": realsets.sentiment()[:1500],
                       "shakespeare": realsets.shakespeare(600), "stories": stories,
                       "gsm8k_chat": _chat(gsm)}.items():  # fmt: skip
        realsets.write_jsonl(out / f"clean_{name}.jsonl", rows)
        manifest["clean"][name] = f"clean_{name}.jsonl"
    for k, (kind, fn) in enumerate(PC_PLANTS.items()):
        base = "gsm8k" if kind in ("cot_stripped", "next_turn_in_answer") or k % 2 == 0 else "stories"
        rng = random.Random(seed * 1000 + k)
        rows = [dict(r) for r in bases[base]]
        idx = _pick(len(rows), rng)
        for i in idx:
            rows[i] = fn(rows[i], rng)
        _save(out, manifest, kind, base, rows, idx)
    chat = _chat(gsm)
    for k, (kind, fn) in enumerate(CHAT_PLANTS.items()):
        rng = random.Random(seed * 1000 + 100 + k)
        rows = [dict(r) for r in chat]
        idx = _pick(len(rows), rng)
        for i in idx:
            rows[i] = fn(rows[i], rng)
        _save(out, manifest, kind, "gsm8k_chat", rows, idx)
    rng = random.Random(seed + 7)
    sent = realsets.sentiment()[:1500]
    src = _pick(len(sent), rng, SHARE / 2)
    rows = list(sent)
    planted = []
    for i in src:  # the same review again, with the other label, at a random place
        flip = {**sent[i], "completion": " negative" if sent[i]["completion"] == " positive" else " positive"}
        rows.insert(rng.randrange(len(rows) + 1), {"__planted": True, **flip})
    planted = [k for k, r in enumerate(rows) if r.pop("__planted", False)]
    _save(out, manifest, "label_flip", "sentiment", rows, planted)
    dup_src = _pick(len(gsm), rng, SHARE)
    rows = list(gsm) + [gsm[i] for i in dup_src]  # later copies: the rows a dedupe drops
    _save(out, manifest, "duplicates", "gsm8k", rows, list(range(len(gsm), len(rows))))
    build_more(out, manifest, seed)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def as_text(rows: list[dict]) -> list[dict]:
    """Prompt/completion rows as plain text rows: the question (without its 'Question:'/'Answer:' markers) and its
    answer in one text."""
    return [{"text": r["prompt"].removeprefix("Question: ").removesuffix("\nAnswer:") + "\n" + r["completion"].strip()}
            for r in rows]  # fmt: skip


def _edit(text: str, rng: random.Random, vocab: list[str]) -> str:
    """A near duplicate of ``text``: one to four small edits (a word replaced, dropped or added, a typo, a number
    changed), about one per 25 words, the layout (newlines) kept."""
    parts = re.split(r"(\s+)", text)
    spots = [k for k, p in enumerate(parts) if p.strip()]
    for _ in range(min(4, max(1, len(spots) // 25))):
        k = rng.choice(spots[1:] or spots)
        w, op = parts[k], rng.choice(("swap", "drop", "add", "typo", "number"))
        if op == "number" and any(c.isdigit() for c in w):
            parts[k] = re.sub(r"\d+", lambda m: str(int(m.group()) + rng.randint(1, 9)), w, count=1)
        elif op == "typo" and len(w) >= 4:
            j = rng.randrange(1, len(w) - 2)
            parts[k] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
        elif op == "drop":
            parts[k] = ""
        elif op == "add":
            parts[k] = w + " " + rng.choice(vocab)
        else:
            parts[k] = rng.choice(vocab)
    return re.sub(r"  +", " ", "".join(parts))


def _near_dups(rows: list[dict], rng: random.Random, n: int, min_words: int) -> tuple[list[dict], list[int]]:
    """``n`` edited copies of distinct rows of at least ``min_words`` words, each placed after its source row."""
    key = "text" if "text" in rows[0] else max(("prompt", "completion"), key=lambda k: len(rows[0][k]))
    vocab = sorted({w for r in rows[:300] for w in r[key].split() if w.isalpha() and len(w) > 2})
    src = rng.sample([i for i, r in enumerate(rows) if len(r[key].split()) >= min_words], n)
    out = [(dict(r), False) for r in rows]
    for i in sorted(src, reverse=True):
        copy = {**rows[i], key: _edit(rows[i][key], rng, vocab)}
        out.insert(rng.randint(i + 1, len(out)), (copy, True))
    return [r for r, _ in out], [k for k, (_, p) in enumerate(out) if p]


def _cut_text(text: str, rng: random.Random) -> str:
    """The text cut at a random character between 30% and 90% of its length: mid-word or mid-sentence, never right
    after a sentence end (the cut must show)."""
    for _ in range(50):
        cut = text[: rng.randint(int(0.3 * len(text)), int(0.9 * len(text)))].rstrip()
        if cut and cut[-1] not in ".!?\"')":
            return cut
    return text.rstrip(".!?") + " and"


def _plant_each(rows: list[dict], idx: list[int], fn: Callable[[dict], dict]) -> list[dict]:
    out = [dict(r) for r in rows]
    for i in idx:
        out[i] = fn(out[i])
    return out


def _flip(r: dict) -> dict:
    return {**r, "completion": " negative" if r["completion"] == " positive" else " positive"}


def build_more(out: Path, manifest: dict, seed: int = 0) -> None:
    """The near-duplicate, label-noise, foreign-review and cut-text cases, and clean sets of their shapes."""
    rng = random.Random(seed * 1000 + 500)
    gsm_b, stories = realsets.gsm8k(800, start=1000), realsets.stories()
    shakes = realsets.shakespeare(500, chars=400)
    sent = realsets.sentiment(seed=3)[:1200]
    for name, (rows, n, min_w) in {"gsm8k": (gsm_b, 30, 20), "sentiment": (sent, 40, 10),
                                   "shakespeare": (shakes, 25, 20), "stories": (stories, 20, 20)}.items():  # fmt: skip
        planted_rows, idx = _near_dups(rows, rng, n, min_w)
        _save(out, manifest, f"near_dup_{name}", name, planted_rows, idx)
    for kind, rows, share in (
        ("label_noise_sentiment", realsets.sentiment(seed=5)[:1500], 0.10),
        ("label_noise_yelp", realsets.sentiment(seed=6, sources=("yelp",)), 0.15),
        ("label_noise_amazon_imdb", realsets.sentiment(seed=7, sources=("amazon", "imdb"))[:800], 0.08),
    ):
        idx = _pick(len(rows), rng, share)
        _save(out, manifest, kind, "sentiment", _plant_each(rows, idx, _flip), idx)  # fmt: skip
    foreign = [{"prompt": f"Review: {s}\nSentiment:", "completion": " positive" if lab else " negative"}
               for s, lab in REVIEWS]  # fmt: skip
    for kind, rows, share in (
        ("foreign_sentiment", realsets.sentiment(seed=8)[:1200], 0.05),
        ("foreign_sentiment_small", realsets.sentiment(seed=9)[:600], 0.08),
        ("foreign_yelp", realsets.sentiment(seed=10, sources=("yelp",)), 0.06),
    ):
        idx = _pick(len(rows), rng, share)
        pool = rng.sample(foreign, len(idx))
        out_rows = [dict(r) for r in rows]
        for i, f in zip(idx, pool, strict=True):
            out_rows[i] = f
        _save(out, manifest, kind, "sentiment", out_rows, idx)  # fmt: skip
    for kind, rows, share in (
        ("cut_text_shakespeare", realsets.shakespeare(600, chars=800), 0.15),
        ("cut_text_gsm8k", as_text(realsets.gsm8k(700, start=2000)), 0.10),
        ("cut_text_stories", as_text(stories), 0.12),
    ):
        idx = _pick(len(rows), rng, share)
        _save(out, manifest, kind, kind.removeprefix("cut_text_") + "_text",
              _plant_each(rows, idx, lambda r: {"text": _cut_text(r["text"], rng)}), idx)  # fmt: skip
    for name, rows in {"gsm8k_text": as_text(realsets.gsm8k(700, start=2000)), "stories_text": as_text(stories),
                       "yelp": realsets.sentiment(seed=6, sources=("yelp",)),
                       "amazon_imdb": realsets.sentiment(sources=("amazon", "imdb")),
                       "shakespeare_long": realsets.shakespeare(600, chars=800),
                       "gsm8k_b": gsm_b, "shakespeare_short": realsets.shakespeare(1500, chars=300),
                       "imdb": realsets.sentiment(sources=("imdb",))}.items():  # fmt: skip
        realsets.write_jsonl(out / f"clean_{name}.jsonl", rows)
        manifest["clean"][name] = f"clean_{name}.jsonl"


def best_finding(fs: list, expect: list[str], planted: set[int]) -> tuple[str, set[int], list[str]]:
    """(rule, rows, severities) of what catches the planted rows best among the expected rules' findings: one finding
    alone, or all of one rule's findings together, whichever flags the most planted rows (then the fewest rows). One
    rule can say two things (label conflicts between copies, and a review list from a text model): each is scored on
    its own rows."""
    cands: list[tuple[str, set[int], list[str]]] = []
    for code in expect:
        mine = [f for f in fs if f.code == code]
        cands += [(code, set(f.evidence.get("rows") or []), [f.severity.value]) for f in mine]
        cands.append((code, {r for f in mine for r in f.evidence.get("rows") or []},
                      sorted({f.severity.value for f in mine})))  # fmt: skip
    return max(cands, key=lambda c: (len(c[1] & planted), -len(c[1])))


def score(out: Path, manifest: dict, select: tuple[str, ...] = ("D",)) -> dict:
    """Per planted kind: what of the expected rules flags the most planted rows (:func:`best_finding`), its recall,
    precision and severities; per clean set: every error or warning finding (a false alarm)."""
    from gradian.diagnose.api import diagnose_full
    from gradian.diagnose.settings import DiagnoseSettings

    def run(path: Path) -> list:
        return diagnose_full(train=path, select=list(select), settings=DiagnoseSettings())[0]

    res: dict = {"kinds": {}, "clean": {}}
    for kind, m in manifest["kinds"].items():
        planted = set(m["rows"])
        fs = run(out / m["file"])
        best, got, sev = best_finding(fs, m["expect"], planted)
        tp = len(got & planted)
        res["kinds"][kind] = {"base": m["base"], "n": m["n"], "planted": len(planted), "rule": best, "found": tp,
                              "recall": round(tp / len(planted), 3),
                              "precision": round(tp / len(got), 3) if got else None, "severity": sev}  # fmt: skip
        if "info" in sev:  # the rows the expected rule names at warning or error alone
            loud = {
                r for f in fs if f.code == best and f.severity.value != "info" for r in f.evidence.get("rows") or []
            }
            res["kinds"][kind]["loud"] = _rates(loud, planted)
    for name, f in manifest["clean"].items():
        res["clean"][name] = [f"{x.code}:{x.severity.value}" for x in run(out / f) if x.severity.value != "info"]
    return res


def _rates(rows: set[int], planted: set[int]) -> dict:
    tp = len(rows & planted)
    return {"rows": len(rows), "found": tp, "recall": round(tp / len(planted), 3),
            "precision": round(tp / len(rows), 3) if rows else None}  # fmt: skip


def write_scores(res: dict, dest: Path) -> None:
    """dest.json and dest.md: the per-kind table, the clean sets' false alarms and the rows named at warning."""
    dest.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    lines = ["| kind | base | rows | planted | rule | found | recall | precision | severity |",
             "|---|---|---:|---:|---|---:|---:|---:|---|"]  # fmt: skip
    for kind, r in res["kinds"].items():
        prec = "-" if r["precision"] is None else f"{r['precision']:.2f}"
        lines.append(f"| {kind} | {r['base']} | {r['n']} | {r['planted']} | {r['rule']} | {r['found']} | "
                     f"{r['recall']:.2f} | {prec} | {', '.join(r['severity']) or '-'} |")  # fmt: skip
    caught = sum(r["recall"] >= 0.8 for r in res["kinds"].values())
    lines += ["", f"{caught} of {len(res['kinds'])} kinds caught at recall >= 0.8.", "",
              "| clean set | error/warning findings |", "|---|---|"]  # fmt: skip
    lines += [f"| {name} | {', '.join(fs) or 'none'} |" for name, fs in res["clean"].items()]
    loud = {kind: r["loud"] for kind, r in res["kinds"].items() if "loud" in r}
    if loud:
        lines += ["", "| kind | rows at warning | planted among them | recall at warning | precision at warning |",
                  "|---|---:|---:|---:|---:|"]  # fmt: skip
        for kind, x in loud.items():
            prec = "-" if x["precision"] is None else f"{x['precision']:.2f}"
            lines.append(f"| {kind} | {x['rows']} | {x['found']} | {x['recall']:.2f} | {prec} |")
    dest.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _save(out: Path, manifest: dict, kind: str, base: str, rows: list[dict], idx: list[int]) -> None:
    realsets.write_jsonl(out / f"{kind}.jsonl", rows)
    manifest["kinds"][kind] = {"file": f"{kind}.jsonl", "base": base, "rows": idx, "n": len(rows),
                               "expect": EXPECT[kind]}  # fmt: skip


if __name__ == "__main__":
    args = sys.argv[1:]
    corpus = Path(args[0] if args and not args[0].startswith("--") else "bench/results/diagnose_corpus")
    m = build(corpus)
    print(f"{len(m['kinds'])} planted kinds, {len(m['clean'])} clean sets")
    if "--score" in args:
        dest = Path(args[args.index("--score") + 1])
        write_scores(score(corpus, m), dest)
        print(dest.with_suffix(".md").read_text(encoding="utf-8"))
