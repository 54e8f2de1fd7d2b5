"""Content rules (D128-D135): faults inside the rows, each judged against the file's own rows (how its answers
normally end, how long they normally are, which markers recur, which words make up its language) rather than against
phrase lists."""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator

from gradian.diagnose import textstats as ts
from gradian.diagnose.context import DiagnoseContext
from gradian.diagnose.minhash import near_duplicate_pairs, normalize
from gradian.diagnose.registry import Hit, Params, rule
from gradian.diagnose.rules._util import drop_fix, pct, rows_ev


def _first_of_last_line(answer: str) -> str:
    return (answer.strip().rsplit("\n", 1)[-1].split() or [""])[0]


def _signature(ans: list[tuple[int, str]], norm: float) -> str:
    """The marker nearly every answer's last line starts with (GSM8K's '####'), or ``""``: a word or a number starts
    many lines anyway, so only a marker makes a signature."""
    top, n = Counter(_first_of_last_line(a) for _, a in ans).most_common(1)[0] if ans else ("", 0)
    if not top or n < max(20, norm * len(ans)) or top.isalpha() or not (set(top) - set("0123456789")):
        return ""
    return top


def _off_signature(ans: list[tuple[int, str]], top: str) -> set[int]:
    """Answers whose last line does not start like nearly all of the file's answers' last lines (GSM8K: '#### 72'),
    and which are at least as long (in words) as the median answer that has it: a learned ending signature, for
    files whose answers end in a fixed final line. A length limit cuts the answers that are long (the complete ones
    are the shorter ones, or the limit would cut most of them); a shorter answer without the line is as likely another
    kind of answer (a refusal, a reply in another language, another task's row), which the text does not show to be
    cut, unless it is at least half as long and does not end in a full stop or another sentence end (an export cut
    it inside a line: '... = <<2*16=32>>32'). An answer that holds the marker anywhere reached its final line: what
    follows it (a scraper's closing markup, a signature) is added text, not a cut, which other rules judge."""
    if not top:  # the file's final-line marker (:func:`_signature`)
        return set()
    firsts = [(i, _first_of_last_line(a)) for i, a in ans]
    words = dict((i, len(a.split())) for i, a in ans)
    typical = statistics.median(words[i] for i, f in firsts if f == top)
    open_end = {i for i, a in ans if a.rstrip()[-1:] not in ts.TERMINAL | ts.CLOSERS}
    reached = {i for i, a in ans if top in a}
    return {
        i
        for i, f in firsts
        if f != top and i not in reached and (words[i] >= typical or (words[i] >= 0.5 * typical and i in open_end))
    }


def _ending(text: str, cls: str) -> str:
    """What a text ends with, as the file's own endings are counted: the last punctuation mark after a mark ('--'
    counts as '-'), the last word after a letter ('... 3 KING HENRY VI' as 'VI')."""
    s = text.rstrip()
    return s[-1:] if cls == "mid" else (s.split() or [""])[-1] if cls == "word" else ""


def _own_endings(items: list[tuple[int, str]], candidates: set[str], rate: float) -> set[str]:
    """The ``candidates`` (endings, :func:`_ending`) that end the texts about as often as they end lines inside them:
    the texts' rate of ending on one, per line inside them that ends on it, is at least ``rate`` times the rate for
    clean endings. Rows of a play end after an interrupted speech ('--') about as often as its speeches end so inside
    them; a cut after a speaker's name ('CORIOLANUS:') is rare however many lines end so."""
    rows: Counter[str] = Counter()
    inner: Counter[str] = Counter()
    for _, a in ts.sample(items):
        lines = a.rstrip().split("\n")
        for k, line in enumerate(lines):
            c = ts.end_class(line)
            e = "." if c == "clean" else _ending(line, c) if c in ("word", "mid") else ""
            (rows if k == len(lines) - 1 else inner)[e] += 1
    base = rows["."] / max(1, inner["."])
    return {e for e in candidates if inner[e] >= 3 and rows[e] / inner[e] >= rate * base}


def _cut_rows(items: list[tuple[int, str]], t: Params, own_endings: bool) -> tuple[set[int], set[int], float] | None:
    """(rows that end mid-sentence, rows without the file's final-line marker, the clean share) among ``items``
    (row, text), or None when they have no clean-ending norm. With ``own_endings`` (text rows: excerpts of plays and
    books), an ending that many of them share, and that ends them about as often as it ends lines inside them (a
    play's '--' for an interrupted speech, a title line between its acts), is one of the file's own ways to end, not
    a cut: an export cuts at random characters, mostly inside a word, and no line of the file ends in such a piece
    of a word. Answers are judged one by one (a conversation's replies each), then named by their rows."""
    rows_of = [i for i, _ in items]
    by_row, items = items, list(enumerate(a for _, a in items))  # keyed by answer from here on
    classes = [(i, c, _ending(a, c)) for i, a in items if len(a.split()) >= t.min_words for c in [ts.end_class(a)]]
    judged = [(i, c, e) for i, c, e in classes if c in ("clean", "word", "mid")]
    if len(judged) < 20:
        return None
    ends = Counter(e for _, c, e in judged if c != "clean")
    common = {e for e, k in ends.items() if k >= max(3, t.own_end_share * len(judged))}
    own = _own_endings(items, common, float(t.own_end_rate)) if own_endings and common else set()
    mid = {i for i, c, e in judged if c != "clean" and e not in own}
    sig = _signature(items, float(t.norm_share))
    if not own_endings:  # list items and short lines the file ends without a mark are its own endings too
        mid -= _line_endings_of_the_file(items, mid, float(t.norm_share))
    if not own_endings and mid:  # what the answers' text does not show to be cut
        text, cls = dict(items), {i: c for i, c, _ in judged}
        inside = _words_inside_sentences(items, int(t.inside_uses))
        # an open answer that stops on a word the file never ends with, or short of the final line all answers end on
        stops = {i for i in mid if cls[i] == "word" and (_last_word(text[i]) in inside or (sig and sig not in text[i]))}
        mid = {i for i in mid if i in stops or not _unpunctuated_last_line(text[i])}
        mid -= {i for i in mid if ts.signature_block(text[i])}  # a closing on its own line, the name's lines below
        signed = {i: c for i in mid if (c := ts.closing(text[i]))}
        if signed:  # letters signed the file's way
            closings = Counter(c for _, a in items if (c := ts.closing(a)))
            mid -= {i for i, c in signed.items() if closings[c] >= SHARED}
        mid -= _phrase_answers_of_the_file(text, cls, judged, mid - stops, float(t.norm_share))
    clean = len(judged) - len(mid)
    if clean / len(judged) < t.norm_share:
        return None
    cut = {rows_of[k] for k in mid}
    return cut, _off_signature(by_row, sig) - cut, clean / len(judged)


SHORT_LINE = 3  # words: a line this short is a title, a name, a sign-off rather than a sentence
SHARED = 3  # answers that end on one closing phrase and a name ('Yours sincerely, Jane Austen'): the file's sign-off


def line_shape(line: str) -> str:
    """``item`` (a list item), ``short`` (a line of at most SHORT_LINE words: a heading, a name, a signature) or
    ``prose``."""
    if ts.ITEM_START.match(line):
        return "item"
    return "short" if len(line.split()) <= SHORT_LINE else "prose"


def _line_endings_of_the_file(items: list[tuple[int, str]], rows: set[int], norm: float) -> set[int]:
    """The ``rows`` whose answer's last line is a list item or a short line that ends open (on a word or a mark) in
    a file whose complete lines of that shape (inside answers: a line follows them) end open at least ``1 - norm`` of
    the time, over at least 20 such lines: list items without a full stop ('1. Java'), a sign-off ('John Smith').
    Such a line is a whole unit, and the file writes its units so; a length limit cuts at a random word, mostly
    inside a line of prose, which keeps the row-level norm."""
    shapes: Counter[str] = Counter()
    open_: Counter[str] = Counter()
    for _, a in ts.sample(items):
        for line in a.strip().split("\n")[:-1]:
            if line.strip() and (shape := line_shape(line)) != "prose":
                shapes[shape] += 1
                open_[shape] += ts.end_class(line) in ("word", "mid")
    text = dict(items)
    own = set()
    for i in rows:
        last = text[i].rstrip().rsplit("\n", 1)[-1]
        shape = line_shape(last)
        if shape != "prose" and shapes[shape] >= 20 and open_[shape] >= (1 - norm) * shapes[shape]:
            own.add(i)
    return own


_WORD_OR_END = re.compile(r"[^\W\d_]+|[.!?…。！？؟।]|[^\s.!?…。！？؟।]")  # a word, a sentence end, anything else


def _words_inside_sentences(items: list[tuple[int, str]], uses: int) -> set[str]:
    """Words (lowercased) the file's answers use at least ``uses`` times and never end a sentence or a line with
    ('of', 'the', 'per'): an answer ending on one stops inside a sentence. The answers' own last words are not
    counted (a cut one ends on any word)."""
    used: Counter[str] = Counter()
    final: Counter[str] = Counter()
    for _, a in ts.sample(items):
        lines = a.rstrip().split("\n")
        for k, line in enumerate(lines):
            toks = _WORD_OR_END.findall(line) + ["."] * (k < len(lines) - 1)  # an inner line's end ends a unit
            for w, nxt in zip(toks, toks[1:], strict=False):  # the answer's own last word: cut or not, it says nothing
                if w[0].isalpha():
                    used[w.lower()] += 1
                    final[w.lower()] += nxt in ts.TERMINAL
    return {w for w, n in used.items() if n >= uses and not final[w]}


def _last_word(text: str) -> str:
    toks = _WORD_OR_END.findall(text[-ts.TAIL :])
    return toks[-1].lower() if toks else ""


def _phrase_answers_of_the_file(text: dict[int, str], cls: dict[int, str], judged: list[tuple[int, str, str]],
                                rows: set[int], norm: float) -> set[int]:  # fmt: skip
    """The ``rows`` that are phrases the file writes so: answers with no sentence end before their last character
    (a title, a list of names, a menu) that end on a word, in a file whose answers of that kind end so more than
    1 - norm of the time (a task mix; GSM8K's end on '#### 72'). ``cls``: each judged answer's ending class."""
    cands = {i for i in rows if cls[i] == "word" and not ts.writes_sentences(text[i])}
    phrases = [c for i, c, _ in ts.sample(judged) if not ts.writes_sentences(text[i])] if cands else []
    if not phrases or phrases.count("clean") >= norm * len(phrases):
        return set()
    return cands


def _comma_list(line: str) -> bool:
    """A list written on one line: three or more comma-separated items of at most SHORT_LINE + 1 words each ('Breaking
    Bad, Peaky Blinders, Arrow')."""
    items = line.split(",")
    return len(items) >= 3 and all(0 < len(x.split()) <= SHORT_LINE + 1 for x in items)


def _unpunctuated_last_line(answer: str) -> bool:
    """Whether an answer's last line is one the answer itself writes without a mark: a table's row, a value the line
    before introduces with a colon ('So the converted time is:' / 'December 22, 5:00 am TST') or a list of names on
    one line, neither written in sentences; a list item where most of the answer's other items (two at least) end on
    a word too; or a line ending on a word where at least half of the answer's other lines of prose (more than
    SHORT_LINE words, no list item, '#' heading or code) end on a word too (an agenda, a list of titles, lyrics). A
    length limit cuts a line of an answer whose lines end in marks (a poem's commas and full stops)."""
    before, _, last = answer.strip().rpartition("\n")
    if ts.table_line(last):
        return True
    if ts.end_class(last) != "word":
        return False
    if not ts.writes_sentences(last) and (before.rstrip().endswith(":") or _comma_list(last)):
        return True  # a value a line introduces ('The answer is:'), a list of names on one line
    if line_shape(last) == "item":  # a list whose items end without a mark ('24. Nimble' / '25. Unconventional')
        items = [ts.end_class(ln) for ln in before.split("\n") if line_shape(ln) == "item"]
        return items.count("word") >= 2 and 2 * items.count("word") >= len(items)
    lines = [ln for ln in ts.prose(answer).strip().split("\n")[:-1] if ln.strip()]
    inner = [ts.end_class(ln) for ln in lines if line_shape(ln) == "prose" and not ln.lstrip().startswith("#")]
    words = inner.count("word")
    return words > 0 and 2 * words >= len(inner)


@rule(
    "D128", "cut_completion", "warning", needs=("train",), tiers="I/W/E", cause="mechanical",
    thresholds={
        "norm_share": (0.8, "share of the file's answers that end cleanly for the file to have an ending norm"),
        "min_words": (5, "only answers at least this many words long are judged (short answers end anyhow)"),
        "inside_uses": (20, "an answer with no sentence end that ends on a word is judged cut when the file's answers "
                        "use that word at least this often and never end a sentence or a line with it"),
        "own_end_share": (0.005, "an ending (the last mark after a mark, the last word after a letter) shared by at "
                          "least this share of the judged text rows (and 3) can be one of the file's own endings"),
        "own_end_rate": (0.1, "it is one when the rows end on it, per line inside them that ends on it, at least this "
                         "fraction as often as for clean endings (a play's '--': 0.3-0.9; a cut after 'NAME:': 0.01)"),
        "text_percent": (1.0, "percent of text rows cut under which it is a note: excerpts of plays and books end "
                         "irregularly now and then"),
        "error_percent": (5.0, "percent of answers cut at which it is an error"),
    },
    summary="Answers, or text rows, that end mid-sentence (on a letter, comma, colon or dash) in a file whose rows "
    "normally end cleanly (terminal punctuation in any script, a closing quote or bracket after it, a number, or, "
    "for text rows, an ending that recurs across the file), or whose last line lacks the marker nearly every row's "
    "last line starts with (GSM8K's '#### 72') while the row is at least as long as the file's usual one (a length "
    "limit cuts the long ones). Answers and text rows each have their own norm. An answer whose last line is a list "
    "item or a short line (a name, a sign-off) ending on a word is not judged when the file's complete lines of that "
    "shape end so too ('1. Java'); one that ends on a link, a #tag, a quote's attribution, an emoji after its last "
    "sentence, a closing phrase and a name that at least three answers share ('Yours sincerely, Jane Austen'), or a "
    "closing laid out as a block ('Warm regards,' / '[Your Name]') ends whole; one that "
    "ends in code is not judged, nor a file where more than 1 - norm_share of the answers do. What a text does not "
    "show to be cut is not judged either: a table's row; a value the line before introduces with a colon ('The "
    "answer is:'); a list of names on one line; a list item where the answer's other items end on a word too; a last "
    "line the answer's other lines of prose also end on a word (an agenda, lyrics); an answer with no sentence end "
    "at all (a title, a list of names) in a file whose such answers end on a word more than 1 - norm_share of the "
    "time, unless it ends on a word the file's answers "
    "use often and never end a sentence or a line with ('of', 'the') or lacks the final line all of them end on.",
    why="LLM-generated data cut by max_tokens (finish_reason 'length') or a broken export: the model learns to stop "
    "mid-sentence. The norm is learned from the file itself (C4 and FineWeb filter on the same terminal-punctuation "
    "signal), so answers that are single words or labels are never judged.",
    example='Most completions end with "." and 40 of them end with "... and then the".',
    fix="Regenerate the cut answers with a larger max_tokens (or re-export the cut text rows whole), or drop them.",
    seen_in="synthetic-data pipelines (finish_reason 'length')",
)  # fmt: skip
def cut_completion(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    ans = [(i, a) for i, _, a in ts.answers(ctx) if a.strip()]
    coded = {i for i, a in ans if ts.ends_in_code(a)}
    if len(coded) > (1 - t.norm_share) * len(ans):  # a code file: its answers do not end as sentences
        ans = []
    ans = [(i, a) for i, a in ans if i not in coded]
    texts = [(e.index, e.text) for e in ctx.train if e.text is not None and e.text.strip()]
    for items, what in ((ans, "an answer"), (texts, "a text")):
        found = _cut_rows(items, t, what == "a text")
        if not found:
            continue
        mid, unsigned, share = found
        rows = sorted(mid | unsigned)
        if not rows:
            continue
        p, p_of = pct(len(rows), len(ctx.train)), pct(len(rows), len(items))
        said = [f"{len(mid)} end mid-sentence, while {share:.0%} of the file's rows of that shape end cleanly"]
        if unsigned:
            said.append(f"{len(unsigned)} end without the final line nearly every row of the file ends with, at a "
                        "length where a limit cuts")  # fmt: skip
        sev = "error" if p >= t.error_percent else "warning"
        yield Hit(
            f"{len(rows)} row(s) ({p}%) have {what} that looks cut: " + "; ".join(said[not mid :]),
            severity="info" if what == "a text" and p_of < t.text_percent else sev,
            evidence=rows_ev(rows, len(ctx.train), ctx.train_file, clean_share=round(share, 3)),
            fix=drop_fix(
                "Regenerate the cut rows whole (larger max_tokens, a full export) or drop them",
                rows,
                ctx.train_file,
                "D128",
            ),
        )


@rule(
    "D129", "repetition", "error", needs=("train",), cause="mechanical",
    thresholds={
        "sentence_copies": (3, "back-to-back copies of one sentence, or of a cycle of up to 3 sentences (4+ "
                            "words), or copies of one sentence (5+ words) among paragraphs' sentences, that make a "
                            "loop; lines of their own repeated apart (a song's chorus, a heading before each example) "
                            "are not one"),
        "dup_sentence_share": (0.5, "share of a row's characters in repeated sentences/lines (Gopher: 0.30 for "
                               "lines; clean tinyshakespeare refrains reach 0.31)"),
        "dup_10gram_share": (0.6, "share of a row's word characters in repeated 10-grams (Gopher: 0.10 for long "
                             "documents; clean GSM8K answers reach 0.49)"),
    },
    summary="Degenerate repetition inside a row: one sentence (or a cycle of up to three) three or more times "
    "back to back, or three times among its paragraphs' sentences, or most of the row made of "
    "repeated sentences or repeated 10-word spans (the Gopher / datatrove repetition measures); a row too short "
    "for those shares when it is one sentence or word, three or more times and nothing else ('Lily. Lily. Lily.'). "
    "Each assistant turn of a conversation is judged alone (replies may share sentences; a loop is inside one). "
    "Code (fenced, JSON lines, or laid out as code) and tables are left out: they repeat their own syntax; an "
    "inline code span counts as its words.",
    why="Generation loops in distilled or scraped data teach the model to loop: it repeats itself until "
    "max_new_tokens.",
    example='"The answer is 4. The answer is 4. The answer is 4. The answer is 4."',
    fix="Drop the looping rows, or cut them at the first repeat.",
    seen_in="Gopher (Rae et al. 2021), datatrove GopherRepetitionFilter",
)  # fmt: skip
def repetition(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    rows: list[int] = []
    worst: Counter[str] = Counter()
    for e, tgt, raw in zip(ctx.train, ts.prose_targets(ctx), ts.targets(ctx), strict=True):
        turns = e.assistant_turns()
        # each assistant turn is judged alone: a loop is inside one reply, while replies may share their sentences
        if len(turns) > 1:
            texts = [_loop_text(x) for x in turns]
        else:
            texts = [_loop_text(raw) if "`" in raw else tgt]
        kind = next((k for x in texts if (k := _loop_kind(x, t))), "")
        if kind:
            worst[kind] += 1
            rows.append(e.index)
    if rows:
        yield Hit(
            f"{len(rows)} row(s) ({pct(len(rows), len(ctx.train))}%) repeat themselves: {dict(worst)}",
            evidence=rows_ev(rows, len(ctx.train), ctx.train_file, kinds=dict(worst)),
            fix=drop_fix("Drop the looping rows (or cut them at the first repeat)", rows, ctx.train_file, "D129"),
        )


_INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def _loop_text(text: str) -> str:
    """A reply's prose for the loop measures: inline code spans keep their content (lines that differ only in their
    spans, '`250` to `255`', are not copies of one another)."""
    return ts.prose(_INLINE_CODE.sub(r" \1 ", text)) if "`" in text else ts.prose(text)


def _loop_kind(text: str, t: Params) -> str:
    """How a text loops (the repetition rule's measures against its thresholds), or ``""``. Lines without a letter
    (a program's printed array, a row of numbers) and a table's rows are data, not sentences that repeat."""
    if "\n" in text:
        text = "\n".join(ln for ln in text.split("\n") if ts.LETTER.search(ln) and not ts.table_line(ln))
    if len(text) < 40:  # too short for the share measures: a loop only when it is all one sentence, repeated
        return "short row of one sentence repeated" if ts.one_unit_loop(text) >= t.sentence_copies else ""
    copies, dup_sent, dup_10 = ts.loop_measures(text)
    if copies >= t.sentence_copies:
        return "sentence repeated"
    if dup_sent >= t.dup_sentence_share:
        return "repeated sentences"
    return "repeated 10-grams" if dup_10 >= t.dup_10gram_share else ""


def template_layout(ctx: DiagnoseContext, min_share: float = 0.1) -> tuple[list[int], list[str]]:
    """Text rows that carry a rendered prompt template: known families ("### Question:", "Human:", "<|user|>"), or
    two or more line markers learned from the file that recur together across its text rows. Also used by C216."""

    def compute() -> tuple[list[int], list[str]]:
        text_rows = [e for e in ctx.train if e.text is not None]
        if not text_rows:
            return [], []
        per_row = [ts.line_markers(e.text or "") for e in text_rows]
        counts = Counter(m for ms in per_row for m in ms)
        need = max(3, min_share * len(text_rows))
        learned = {m for m, c in counts.items() if c >= need}
        # markers that recur *together* (a prompt marker and a response marker), not speaker names of a script
        paired = set()
        for m in learned:
            with_m = [ms for ms in per_row if m in ms]
            if any(sum(1 for ms in with_m if o in ms) >= 0.8 * len(with_m) for o in learned if o != m):
                paired.add(m)
        rows: list[int] = []
        used: Counter[str] = Counter()
        for e, ms in zip(text_rows, per_row, strict=True):
            hit = (ms & paired) | ts.known_markers(e.text or "")
            if hit:
                rows.append(e.index)
                used.update(sorted(hit))  # a set: sorted, so ties keep one order whatever the hash seed
        return rows, [m for m, _ in used.most_common(6)]

    return ts.cache(ctx, f"template_layout:{min_share}", compute)


@rule(
    "D130", "template_in_text", "warning", needs=("train",), cause="mechanical",
    thresholds={"min_share": (0.1, "share of text rows a learned marker must recur in (known families: any row)")},
    summary="A prompt template rendered into text rows ('### Question: ... ### Answer:', 'Human: ... Assistant:', "
    "'<|user|>'), or prompt markers inside answers: the markers are learned from the file (line-initial labels "
    "ending in ':' that recur together across rows) plus known families (special tokens anywhere, role labels where "
    "they open a line: 'Open Assistant: the blog post' is a name). Markers in an answer's code (a fake chat page "
    "asked for) are the code's own.",
    why="Text rows get loss on every token, so the model learns to write the questions too; markers inside an "
    "answer teach it to start a new turn by itself.",
    example='{"text": "### Question: What is 2+2?\\n### Answer: 4"}',
    fix="Store such rows as prompt/completion (or messages) so the prompt can be masked; cut the markers out of "
    "answers.",
    seen_in="axolotl#1068",
)  # fmt: skip
def template_in_text(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    rows, markers = template_layout(ctx, float(t.min_share))
    if rows:
        yield Hit(
            f"{len(rows)} text row(s) carry a rendered prompt template ({', '.join(markers)}): the loss covers the "
            "prompt part too",
            evidence=rows_ev(rows, len(ctx.train), ctx.train_file, markers=markers),
            fix=drop_fix("Store the rows as prompt/completion or messages", rows, ctx.train_file, "D130"),
        )
    prompts = [p for _, p, _ in ts.answers(ctx)]
    if not prompts:
        return
    learned = sorted(ts.learned_markers(ts.sample(prompts), 0.5))
    found: Counter[str] = Counter()
    inside: set[int] = set()
    for i, _, a in ts.answers(ctx):
        ms = _markers_in(a, learned)
        if ms:  # markers in code (a fake chat page asked for) are the code's own
            ms = _markers_in(ts.prose(a), learned)
        if ms:
            inside.add(i)
            found.update(sorted(ms))
    if inside:
        shown = [m for m, _ in found.most_common(4)]
        named = sorted(inside)
        yield Hit(
            f"{len(inside)} answer(s) contain prompt markers ({', '.join(shown)}): the model learns to open a new turn",
            evidence=rows_ev(named, len(ctx.train), ctx.train_file, markers=shown),
            fix=drop_fix("Cut the answers at the marker, or drop the rows", named, ctx.train_file, "D130"),
        )


def _markers_in(text: str, learned: list[str]) -> set[str]:
    """The file's learned prompt markers that open a line of ``text``, and the known families' markers in it."""
    return {m for m in learned if "\n" + m in text} | ts.known_markers(text)


_PLACEHOLDER = re.compile(
    r"\{\{\s*[A-Za-z_][\w.]*\s*\}\}"  # {{input}}, {{ user.name }}
    r"|(?<![\w\\])\{(?:instruction|input|output|question|answer|context|prompt|response|query|text|document|passage|label|"
    r"topic|name|user|system|examples?|task|title|content|sentence|target|source)\}"  # {instruction}
    r"|<(?:PLACEHOLDER|[A-Z]+_HERE)>|\[(?:PLACEHOLDER|TODO)\]",  # <PLACEHOLDER>, <TEXT_HERE>, [TODO]
    re.IGNORECASE,
)  # not fill-in blanks in words ('[Your Name]', '[insert date]'): letters leave them for their reader to fill, and
# prompts use them to ask for a format ('The missing word is: [your answer here]')


@rule(
    "D131", "placeholder", "error", needs=("train",), cause="content",
    summary="Unfilled template slots in the text: '{instruction}', '{{input}}', '<PLACEHOLDER>', '[TODO]'. Fill-in "
    "blanks written in words ('[Your Name]', '[insert date]') are ordinary text: a letter leaves them for its reader, "
    "a prompt asks for a format with them; and slots in code are the code's own (f-strings, templates).",
    why="The prompt template was applied without its values (a renamed column, a missing field): the model learns "
    "to answer or to write literal placeholders.",
    example='{"prompt": "{instruction}\\n\\n{input}", "completion": " ..."}',
    fix="Fill the slots (fix the column names in the templating step) or drop the rows.",
    seen_in="C4 filter (rows containing '{')",
)  # fmt: skip
def placeholder(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    rows: list[int] = []
    found: Counter[str] = Counter()
    for e, x in zip(ctx.train, ts.plains(ctx), strict=True):
        hits = _PLACEHOLDER.findall(x) if "{" in x or "<" in x or "[" in x else []
        if hits:
            hits = _PLACEHOLDER.findall(ts.prose(x))  # a template's slots in code are the code's own ('{name}')
        if hits:
            rows.append(e.index)
            found.update(h[:40] for h in hits)
    if rows:
        yield Hit(
            f"{len(rows)} row(s) contain unfilled placeholders: {dict(found.most_common(5))}",
            evidence=rows_ev(rows, len(ctx.train), ctx.train_file, placeholders=dict(found.most_common(10))),
            fix=drop_fix("Fill the placeholders or drop the rows", rows, ctx.train_file, "D131"),
        )


_MARKUP = re.compile(
    r"</?(?:p|div|br|span|a|b|i|u|strong|em|ul|ol|li|table|tr|td|th|h[1-6]|img|script|style|font|center|"
    r"blockquote|pre|code|html|body|head|meta|link|iframe|nav|footer|header|section|article)\b[^<>]{0,200}/?>"
    r"|&(?:nbsp|amp|lt|gt|quot|apos|mdash|ndash|hellip|rsquo|lsquo|rdquo|ldquo|#\d{2,5}|#x[0-9a-f]{2,4});",
    re.IGNORECASE,
)


_VOID = re.compile(r"\s*</?(?:br|hr|img|meta|link|input|wbr)\b", re.IGNORECASE)


def _written_markup(text: str, prose: str) -> bool:
    """Whether the markup in an answer is what it was asked to write (a page, a table, a snippet), not markup left
    around prose: it sits in code (:func:`gradian.diagnose.textstats.prose`) or in a table's cells (a '<br>' in
    Markdown), the answer is nothing but markup (``<img src="a.png" alt="A">``), or lays it out as markup, two or
    more lines that are nothing but tags (``<table>``, ``  <tr>``), not line breaks. ``prose``: ``text`` without its
    code."""
    if not _MARKUP.search(prose) or not _MARKUP.sub("", prose).strip():  # no markup in prose, or nothing but markup
        return True
    if all(ts.table_line(ln) for ln in prose.split("\n") if _MARKUP.search(ln)):  # '<br>' inside a table's cells
        return True
    lines = [ln for ln in text.split("\n") if ts.TAGS_LINE.fullmatch(ln) and not _VOID.match(ln)]
    return len(lines) >= 2


_ASKS_MARKUP = re.compile(r"\bhtml\b|<[a-z][a-z0-9]*[\s>/]", re.IGNORECASE)  # the prompt names HTML or writes a tag


@rule(
    "D132", "markup", "warning", needs=("train",), cause="content",
    thresholds={"max_share": (0.5, "if more of the answers than this carry markup, or code, markup is the file's "
                              "format")},
    summary="HTML tags or entities (<div>, <br>, &nbsp;) in answers, where most of the file's answers have none; "
    "not markup an answer was asked to write (in code, in a table's cells, or laid out as markup: two or more lines "
    "of tags alone) or asked about (its prompt names HTML or writes a tag), nor in a file most of whose answers are "
    "code.",
    why="Scraped or exported text kept its markup: the model learns to emit tags and entities in plain-text "
    "answers.",
    example='"The capital is <b>Paris</b>.&nbsp;<br/>"',
    fix="Strip the markup (html.unescape and a tag stripper) or drop the rows.",
    seen_in="scraped data",
)  # fmt: skip
def markup(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    flagged: dict[int, list[str]] = {}
    targets, proses = ts.targets(ctx), ts.prose_targets(ctx)
    for e, tgt, prose in zip(ctx.train, targets, proses, strict=True):
        hits = _MARKUP.findall(tgt) if "<" in tgt or "&" in tgt else []
        if hits and not _written_markup(tgt, prose):
            flagged[e.index] = hits
    if flagged:  # markup a prompt asks about: it names HTML or writes a tag itself
        prompts: dict[int, str] = defaultdict(str)
        for i, p, _ in ts.answers(ctx):
            if i in flagged:
                prompts[i] += p
        flagged = {i: h for i, h in flagged.items() if not _ASKS_MARKUP.search(prompts[i])}
    rows = sorted(flagged)
    found = Counter(h.split()[0][:20].lower() for hits in flagged.values() for h in hits)
    coded = sum(p != x for p, x in zip(proses, targets, strict=True))  # answers with code
    if rows and len(rows) <= t.max_share * len(ctx.train) and coded <= t.max_share * len(ctx.train):
        yield Hit(
            f"{len(rows)} row(s) ({pct(len(rows), len(ctx.train))}%) have HTML markup in their answers: "
            f"{dict(found.most_common(5))}",
            evidence=rows_ev(rows, len(ctx.train), ctx.train_file, markup=dict(found.most_common(10))),
            fix=drop_fix("Strip the markup or drop the rows", rows, ctx.train_file, "D132"),
        )


_TOKENS = re.compile(r"\w+")


def _log_spread(lengths: list[int]) -> tuple[list[float], float, float]:
    """The logs of ``lengths``, their median and their robust spread (1.4826 x the median absolute deviation)."""
    logs = [math.log(max(1, n)) for n in lengths]
    med = statistics.median(logs)
    return logs, med, 1.4826 * statistics.median(abs(x - med) for x in logs)


def short_cut(lengths: list[int], z: float) -> float:
    """The length under which an answer is a low outlier of ``lengths``: its log is more than ``z`` robust spreads
    below their median. -1 (nothing is) when the logs do not spread."""
    _, med, spread = _log_spread(lengths)
    return math.exp(med - z * spread) if spread > 0 else -1.0


def _repeated_requests(prompts: list[str], t: Params) -> bool:
    """Whether the prompts repeat their requests: at least ``request_share`` of them open (the first three words of
    their own lines; lines that 10% of them share are a template's) as ``opening_share`` of them or more do. Stories
    continued from a few openings do; a mix of instructions, whose answers may be a word or an essay, does not."""
    template = ts.template_lines(prompts)
    opens = [" ".join(_TOKENS.findall(" ".join(ln for ln in p.split("\n") if ln not in template).lower())[:3])
             for p in prompts]  # fmt: skip
    count = Counter(opens)
    need = max(3, t.opening_share * len(prompts))
    return sum(1 for o in opens if o and count[o] >= need) >= t.request_share * len(prompts)


def _prompt_peers(lengths: list[int], z: float) -> list[bool]:
    """Per row: whether its prompt is a peer of the file's prompts, its log length within ``z`` robust spreads of
    their median. A short answer to a prompt unlike the others (a one-line request among word problems) is another
    kind of row, not an answer stripped of its reasoning."""
    logs, med, spread = _log_spread(lengths)
    return [spread == 0 or abs(x - med) <= z * spread for x in logs]


def _words(text: str) -> list[str]:
    """Lower-cased word tokens, every number as one token ('0'): the material answers are made of."""
    return [re.sub(r"\d+", "0", w.lower()) for w in _TOKENS.findall(text)]


def _peer_words(answers: list[str], min_df: float) -> set[str]:
    """The words at least ``min_df`` of ``answers`` use: the peers' own material."""
    df = Counter(w for a in answers for w in set(_words(a)))
    return {w for w, c in df.items() if c >= min_df * len(answers)}


def _of_material(answer: str, material: set[str]) -> float:
    """The share of ``answer``'s words that are the peers' common words (1 for an answer without words)."""
    ws = _words(answer)
    return sum(w in material for w in ws) / len(ws) if ws else 1.0


@rule(
    "D133", "short_answer", "warning", needs=("train",), cause="mechanical",
    thresholds={
        "min_typical_words": (15, "the file's lower-quartile answer length (\\w+ tokens) below which it is off"),
        "factor": (8.0, "an answer this many times shorter than the lower quartile is flagged"),
        "outlier_z": (3.5, "also flagged: answers whose log length is this many robust spreads below their peers' "
                      "median (a modified z; Iglewicz and Hoaglin's outlier cut)"),
        "min_factor": (2.0, "such an outlier is also at least this many times shorter than the lower quartile"),
        "min_rows": (5, "outliers are flagged only when they and the bare answers are at least this many rows"),
        "min_share": (0.02, "and at least this share of their peers: fewer are a file's natural tail (1-3% of a base "
                      "model's own stories); a defect that cut answers hits a group"),
        "material_df": (0.02, "a word is the peers' own material when at least this share of their answers that are "
                        "not short (the lower quartile's length or more) use it (as D134's profile words)"),
        "min_material": (0.5, "a short answer is a stripped or cut one only when at least this share of its words are "
                         "the peers' material; in other words it is another kind of answer (a refusal, a reply in "
                         "another language), which other rules judge"),
        "request_share": (0.5, "low outliers are judged only where the prompts repeat their requests: at least this "
                          "share of them open (the first three words of their own lines, the file's template lines "
                          "aside) as opening_share of them or more do ('Once upon a time', 'Write a story about'); "
                          "a mix of tasks asks for answers of every length, and only a gap (the bare answers) tells "
                          "a cut group there"),
        "opening_share": (0.05, "the share of the prompts an opening must start to count as a repeated request"),
    },
    summary="Answers far shorter than the file's answers for the same kind of prompt (e.g. chain of thought "
    "stripped to a bare number in some rows, or stories cut after their first sentence): shorter than the lower "
    "quartile by a fixed factor, or a low outlier of the log lengths the file's own rows spread over, and made of "
    "the words the other answers use. The same kind of prompt: the same recurring markers, and a prompt length "
    "within the outlier cut of the file's prompts. Either kind counts as a group (min_rows, min_share) where the "
    "prompts repeat a few requests (request_share), so that their answers' lengths compare at all; bare answers also "
    "count where they stand apart, more of them than answers between them and the lower quartile's half (a mix of "
    "tasks, where short answers run on down to one word, has no such gap).",
    why="A join or export dropped the reasoning from some rows, or cut answers short: the model learns to answer "
    "without it, or to stop early, and those rows pull it toward bare or short answers.",
    example="GSM8K rows whose answer is just '#### 72' among rows with full worked solutions.",
    fix="Restore the full answers, or drop the short rows.",
    seen_in="GSM8K-style mixes",
)  # fmt: skip
def short_answer(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    groups: dict[tuple[str, ...], list[tuple[int, str]]] = defaultdict(list)
    answers = ts.answers(ctx)
    layouts = sorted(ts.learned_markers(ts.sample([p for _, p, _ in answers]), 0.1))
    for i, p, a in answers:
        kind = tuple(m for m in layouts if m in p)  # the prompt's layout (its recurring markers) stands for its kind
        groups[kind].append((i, a))
    rows: list[int] = []
    n_outliers = 0
    prompts = {i: p for i, p, _ in answers}
    for members in groups.values():
        if len(members) < 20:
            continue
        peers = _prompt_peers([len(_TOKENS.findall(prompts[i])) for i, _ in members], t.outlier_z)
        members = [m for m, ok in zip(members, peers, strict=True) if ok]
        lens = sorted(len(_TOKENS.findall(a)) for _, a in ts.sample(members))  # the norm, from up to 5,000 peers
        q25 = lens[len(lens) // 4]
        if q25 < t.min_typical_words:
            continue
        cut = short_cut(lens, t.outlier_z)
        chars = sorted(len(a) for _, a in ts.sample(members))
        short_chars = chars[len(chars) // 4] / 2  # far shorter in tokens is far shorter in characters: a cheap screen
        full = [a for _, a in ts.sample(members) if len(_TOKENS.findall(a)) >= q25]  # the answers that set the norm
        material = _peer_words(full, t.material_df)
        bare, outliers, tail = [], [], 0
        for i, a in members:
            if len(a) > short_chars:
                continue
            if _of_material(a, material) < t.min_material:  # another kind of answer (a refusal), for other rules
                continue
            w = len(_TOKENS.findall(a))
            if w * t.factor <= q25:
                bare.append(i)
            else:
                tail += w * t.min_factor <= q25  # short, not bare: the lengths between the bare and the norm
                if w <= cut and w * t.min_factor <= q25:
                    outliers.append(i)
        group = len(bare) + len(outliers) >= max(t.min_rows, t.min_share * len(members)) and _repeated_requests(
            [prompts[i] for i, _ in ts.sample(members)], t
        )
        if group or len(bare) > tail:  # bare answers count where they stand apart, not as a tail's end
            rows += bare
        if group:
            rows += outliers
            n_outliers += len(outliers)
    if rows:
        n_bare = len(rows) - n_outliers
        parts = [f"{n_bare} at least {t.factor:g}x shorter than the lower quartile"] if n_bare else []
        if n_outliers:
            parts.append(f"{n_outliers} more than {t.outlier_z:g} robust spreads of the log length under the median")
        yield Hit(
            f"{len(rows)} row(s) have answers far shorter than their peers': {'; '.join(parts)}",
            evidence=rows_ev(rows, len(ctx.train), ctx.train_file),
            fix=drop_fix("Restore the full answers, or drop the rows", rows, ctx.train_file, "D133"),
        )


_W = re.compile(r"[^\W\d_]+")


_LANGID: list = []


def _lang_scores(text: str) -> dict[str, float]:
    """py3langid's (langid.py's model: 97 languages, offline, n-gram naive Bayes) log-probability per language,
    per character, of the text's words only (numbers and formulas mislead it)."""
    if not _LANGID:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        _LANGID.append(LanguageIdentifier.from_model_file(MODEL_FILE))  # an .npz model: nothing unpickled
    words = " ".join(_W.findall(text))
    return {lang: float(s) / max(1, len(words)) for lang, s in _LANGID[0].rank(words)}


def _profile_shares(segs: list[str], template: set[str], profile: set[str], min_words: int) -> list[tuple[int, float]]:
    """(k, share of the file's profile words among segs[k]'s distinct words) for the texts with at least
    ``min_words`` distinct words besides the template words; words from the first 600 characters."""
    out = []
    for k, seg in enumerate(segs):
        ws = set(seg[:600].lower().split())
        m = len(ws) - len(ws & template) if template else len(ws)
        if m >= min_words:
            out.append((k, len(ws & profile) / m))
    return out


_WORD_TOKEN = re.compile(r"[\"'“‘(¿¡]*[^\W\d_]+(?:['’][^\W\d_]+)?[\"'”’).,;:!?]*")


def _wordlike(text: str) -> bool:
    """Whether most of a short text's tokens are words: a language's, where codes ('#F5F5DC', a regex), times
    ('10:50am'), a pronunciation ('in-tuh-PRET-shuh-nuhz') or emoji are in none."""
    toks = text.split()
    return 2 * sum(1 for x in toks if _WORD_TOKEN.fullmatch(x)) > len(toks)


def _top_lang(text: str) -> str:
    sc = _lang_scores(text)
    return max(sc, key=sc.__getitem__)


def _letters(text: str) -> str:
    return " " + " ".join(_W.findall(text[:300].lower())) + " "


def _char_outliers(segs: list[str], short: list[int], z: float) -> list[int]:
    """Among the ``short`` texts (indices into segs), those whose characters are unlikely under a character-trigram
    model of the file's own texts: the mean log-probability per trigram (given its first two characters, the text's
    own counts left out) more than ``z`` robust spreads under the short texts' median. Another language spells with
    other letter sequences than the file's majority, however few words it has, and whichever of them it shares
    with the file's language ('is', 'a', 'de')."""
    fit = set(range(0, len(segs), max(1, len(segs) // 5000)))  # the model, from up to 5,000 evenly spaced texts
    per: dict[int, Counter[tuple[str, str, str]]] = {}
    for k in fit | set(short):
        x = _letters(segs[k])
        per[k] = Counter(zip(x, x[1:], x[2:], strict=False))
    tri: Counter[tuple[str, str, str]] = Counter()
    for k in fit:
        tri.update(per[k])
    ctx2: Counter[tuple[str, str]] = Counter()
    for g, c in tri.items():
        ctx2[g[:2]] += c
    v = len({g[2] for g in tri}) + 1
    short = [k for k in short if per[k]]
    if len(short) < 20:
        return []
    import numpy as np

    vocab: dict[tuple[str, str, str], int] = {}
    ids: list[int] = []
    ms: list[int] = []
    for k in short:
        ids.extend(vocab.setdefault(g, len(vocab)) for g in per[k])
        ms.extend(per[k].values())
    lens = np.array([len(per[k]) for k in short])
    m = np.array(ms, dtype=float)
    own = np.repeat(np.array([k in fit for k in short], dtype=float), lens) * m
    tri_n = np.array([tri[g] for g in vocab], dtype=float)[ids]
    ctx_n = np.array([ctx2[g[:2]] for g in vocab], dtype=float)[ids]
    ll = m * np.log((tri_n - own + 0.1) / (ctx_n - own + 0.1 * v))
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    scores = np.add.reduceat(ll, starts) / np.add.reduceat(m, starts)
    med = float(np.median(scores))
    mad = float(np.median(np.abs(scores - med)))
    return [k for k, x in zip(short, scores.tolist(), strict=True) if mad > 0 and x < med - z * 1.4826 * mad]


def _language_segments(ctx: DiagnoseContext, template_markers: dict[str, int]) -> list[tuple[int, str]]:
    """(row, text) judged for language: what the model learns to write (the answer, or the whole text row), since
    a foreign prompt with an answer in the file's language is a translation task and an English prompt must not hide
    a foreign answer; in a classification file (a few short labels), the input it reads, without the file's template
    markers ('Review:', 'Sentiment:'), since a label is no sentence."""
    from gradian.diagnose.rules.dataset import _is_labels

    if not _is_labels(ctx):
        return [(e.index, seg) for e, seg in zip(ctx.train, ts.prose_targets(ctx), strict=True) if seg.strip()]
    out = []
    for i, p, _ in ts.answers(ctx):
        for m in template_markers:
            p = p.replace(m, " ")
        out.append((i, p))
    return out


# English names of the languages py3langid reads (its ISO codes), for a prompt that names the language it asks for
_LANG_NAMES = {
    "af": "Afrikaans", "am": "Amharic", "ar": "Arabic", "ary": "Arabic", "arz": "Arabic", "as": "Assamese",
    "az": "Azerbaijani", "be": "Belarusian", "bg": "Bulgarian", "bn": "Bengali", "br": "Breton", "bs": "Bosnian",
    "ca": "Catalan", "cs": "Czech", "cy": "Welsh", "da": "Danish", "de": "German", "el": "Greek", "en": "English",
    "eo": "Esperanto", "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian|Farsi", "fi": "Finnish",
    "fo": "Faroese", "fr": "French", "fy": "Frisian", "ga": "Irish", "gd": "Gaelic", "gl": "Galician",
    "grc": "Greek", "gu": "Gujarati", "ha": "Hausa", "hbo": "Hebrew", "he": "Hebrew", "hi": "Hindi",
    "hr": "Croatian", "ht": "Haitian|Creole", "hu": "Hungarian", "hy": "Armenian", "id": "Indonesian",
    "ig": "Igbo", "is": "Icelandic", "it": "Italian", "ja": "Japanese", "jv": "Javanese", "ka": "Georgian",
    "kk": "Kazakh", "km": "Khmer", "kn": "Kannada", "ko": "Korean", "ku": "Kurdish", "ky": "Kyrgyz", "la": "Latin",
    "lb": "Luxembourgish", "lo": "Lao", "lt": "Lithuanian", "lv": "Latvian", "mg": "Malagasy", "mk": "Macedonian",
    "ml": "Malayalam", "mn": "Mongolian", "mr": "Marathi", "ms": "Malay", "mt": "Maltese", "my": "Burmese",
    "ne": "Nepali", "nl": "Dutch", "nn": "Norwegian", "no": "Norwegian", "oc": "Occitan", "or": "Odia|Oriya",
    "pa": "Punjabi", "pl": "Polish", "ps": "Pashto", "pt": "Portuguese", "qu": "Quechua", "ro": "Romanian",
    "ru": "Russian", "rw": "Kinyarwanda", "sa": "Sanskrit", "si": "Sinhala", "sk": "Slovak", "sl": "Slovenian",
    "so": "Somali", "sq": "Albanian", "sr": "Serbian", "sv": "Swedish", "sw": "Swahili", "ta": "Tamil",
    "te": "Telugu", "tg": "Tajik", "th": "Thai", "tk": "Turkmen", "tl": "Tagalog|Filipino", "tr": "Turkish",
    "tt": "Tatar", "ug": "Uyghur", "uk": "Ukrainian", "ur": "Urdu", "uz": "Uzbek", "vi": "Vietnamese",
    "xh": "Xhosa", "yo": "Yoruba", "yue": "Cantonese|Chinese", "zh": "Chinese|Mandarin", "zu": "Zulu",
}  # fmt: skip


def _names_language(prompt: str, lang: str) -> bool:
    """Whether a prompt names the language ``lang`` (a py3langid code) in English ('Translate this into French')."""
    name = _LANG_NAMES.get(lang)
    return bool(name) and re.search(rf"\b(?:{name})\b", prompt, re.IGNORECASE) is not None


def _asked_for(ctx: DiagnoseContext, rows: set[int], segs: dict[int, str], scripts: dict[int, str | None],
               main: str | None, words: int) -> set[int]:  # fmt: skip
    """The ``rows`` whose prompt names their answer's language ('into French') or holds text in it: at least
    ``words`` units of its script (a Hindi passage to answer in Hindi in an English file), or a line of at least
    ``words`` words that the language model reads as the answer's language (an English phrase to use in a sentence,
    in a Chinese file); lines the file's prompts share (a template's) are not the prompt's own. The answer is in the
    language the prompt asks for or works in, not a slip into another one."""
    if not rows:
        return set()
    prompts: dict[int, list[str]] = defaultdict(list)
    for i, p, _ in ts.answers(ctx):
        if i in rows:
            prompts[i].append(p)
    template = ts.template_lines([p for _, p, _ in ts.sample(ts.answers(ctx))])
    out = set()
    for i in rows:
        prompt = "\n".join(ln for p in prompts[i] for ln in p.split("\n") if ln not in template)
        lang = _top_lang(segs[i])
        if _names_language(prompt, lang):  # a translation into the language the prompt names
            out.add(i)
            continue
        script = scripts[i]
        if script and script != main:  # another script than the file's: does the prompt write in it?
            if ts.script_units(prompt)[script] >= words:
                out.add(i)
            continue
        if any(len(_W.findall(ln)) >= words and _top_lang(ln) == lang for ln in prompt.split("\n")):
            out.add(i)
    return out


@rule(
    "D134", "language_mix", "warning", needs=("train",), cause="content", tiers="W/I",
    thresholds={
        "min_words": (8, "texts with fewer distinct words (after the file's template words) are not judged by the "
                      "file's common words"),
        "short_words": (4, "texts with fewer words of letters than this (numbers and formulas aside) are not judged "
                        "at all"),
        "char_words": (30, "texts with fewer words than this are also judged by their characters, when most of "
                       "their tokens are words (a hex colour, a regex, a time are in no language)"),
        "profile_words": (50, "the file's most common words (in 2%+ of rows) that make up its language profile"),
        "ratio": (0.25, "a text whose share of distinct profile words is below this fraction of the file's median "
                  "is a candidate"),
        "min_median": (0.1, "the file's median share of profile words below which it has no clear language profile"),
        "char_z": (2.0, "a short text whose character-trigram log-probability (under the file's own model) is this "
                   "many robust spreads under the short texts' median is a candidate"),
        "sample": (300, "texts of ordinary profile share identified to learn the file's majority language"),
        "margin": (0.5, "log-probability per character by which another language must beat the file's language "
                   "(clean English maths and reviews: <= 0.1; French, German, Spanish sentences: >= 1.3)"),
    },
    summary="Rows in another language or script than the file's majority: answers (or text rows; in a "
    "classification file, the inputs) with few of the file's common words, or, when short, with letter sequences a "
    "character model of the file's own rows finds unlikely, confirmed by an offline language-ID model (py3langid) "
    "against the language of the file's ordinary rows; and another Unicode script than nearly all rows' (counted in "
    "words, or characters for scripts that do not space their words: Chinese, Japanese, Thai). "
    "Code (fenced, inline, JSON lines, or laid out as code) is left out: it is in no natural language. An answer "
    "whose prompt names its language in English ('into French') or writes in it (a passage in that script, a line "
    "of that language, besides the file's template lines) is what the prompt asks for or works in, not a slip: "
    "those rows are a note.",
    why="A mixed crawl or a translation set slipped in: the model code-switches, or the rows are noise for the task.",
    example="French and German rows in an English instruction set; Spanish reviews in an English sentiment set.",
    fix="Drop the rows, or split them into their own set.",
    seen_in="mixed crawls",
)  # fmt: skip
def language_mix(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    from gradian.diagnose.rules.dataset import _is_labels

    n = len(ctx.train)
    if n < 20:
        return
    plains_sample = ts.sample(ts.plains(ctx))
    df: Counter[str] = Counter()
    for x in plains_sample:
        df.update(set(x.lower().split()))
    markers = ts.learned_markers(plains_sample, 0.9)
    segs = _language_segments(ctx, markers)
    template = {w for m in markers for w in m.lower().split()}  # "question:", "answer:": the file's layout words
    n_s = len(plains_sample)
    common = Counter({w: c for w, c in df.items() if w not in template and c >= 0.02 * n_s})
    profile = {w for w, _ in common.most_common(t.profile_words)}
    scores = _profile_shares([seg for _, seg in segs], template, profile, int(t.min_words))
    short = [
        k
        for k, (_, seg) in enumerate(segs)
        if t.short_words <= len(_W.findall(seg)) and len(seg.split()) < t.char_words and _wordlike(seg)
    ]
    if len(scores) < 20 and len(short) < 20:
        return
    med = sorted(s for _, s in scores)[len(scores) // 2] if scores else 0.0
    low = [k for k, s in scores if s < t.ratio * med] if med >= t.min_median else []
    low += _char_outliers([seg for _, seg in segs], short, float(t.char_z))
    rows: set[int] = set()
    scripts = {i: ts.script_of(seg) for i, seg in segs}
    main, cnt = Counter(v for v in scripts.values() if v).most_common(1)[0] if any(scripts.values()) else (None, 0)
    if low:
        cands = set(low)
        # the language of the file's main script, where it has one (not its tool calls' English)
        ordinary = [seg for k, (i, seg) in enumerate(segs) if k not in cands and len(seg.split()) >= t.short_words
                    and (cnt < 0.8 * n or scripts[i] in (main, None))]  # fmt: skip
        langs = Counter(_top_lang(x) for x in ordinary[:: max(1, len(ordinary) // int(t.sample))])
        main_lang = langs.most_common(1)[0][0] if langs else ""
        for k in sorted(cands):
            sc = _lang_scores(segs[k][1])
            top = max(sc, key=sc.__getitem__)
            if main_lang and top != main_lang and sc[top] - sc.get(main_lang, -1e9) >= t.margin:
                rows.add(segs[k][0])
    if main and cnt >= 0.8 * n:
        rows |= {i for i, s in scripts.items() if s and s != main}
    asked = _asked_for(ctx, rows, dict(segs), scripts, main, int(t.short_words)) if not _is_labels(ctx) else set()
    said_asked = ", as their prompts are or name (a multilingual set, a translation task)"
    for group, said in ((rows - asked, ""), (asked, said_asked)):
        if group:
            rows_l = sorted(group)
            yield Hit(
                f"{len(rows_l)} row(s) ({pct(len(rows_l), n)}%) look like another language than the file's "
                f"majority{said}",
                severity="info" if said else None,
                evidence=rows_ev(rows_l, n, ctx.train_file, main_script=main, median_profile_share=round(med, 3)),
                fix=drop_fix("Drop the rows or move them to their own set", rows_l, ctx.train_file, "D134"),
            )


def _nb_margins(inputs: list[str], labels: list[str], alpha: float) -> list[float]:
    """Per row: how much more likely its input is under the best other label than under its own, in nats, by a
    multinomial naive Bayes model over the words of the file's own inputs (each word once per row, add-``alpha``
    smoothing), with the row itself left out of its own label's counts and prior. Positive: the text reads more like
    the other label's rows than like its own label's."""
    import numpy as np

    names = sorted(set(labels))
    lab = np.array([names.index(y) for y in labels])
    words = [sorted(set(_TOKENS.findall(x.lower()))) for x in inputs]
    vocab: dict[str, int] = {}
    ids = np.array([vocab.setdefault(w, len(vocab)) for ws in words for w in ws], dtype=np.int64)
    lens = np.array([len(ws) for ws in words], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
    tok_lab = np.repeat(lab, lens)
    counts = np.zeros((len(names), len(vocab)))
    np.add.at(counts, (tok_lab, ids), 1.0)
    totals, rows_of = counts.sum(axis=1), np.bincount(lab, minlength=len(names)).astype(float)
    n, v = len(labels), len(vocab)

    def per_row(values: np.ndarray) -> np.ndarray:
        out = np.zeros(n)
        has = lens > 0
        out[has] = np.add.reduceat(values, offsets[has]) if len(values) else 0.0
        return out

    own = per_row(np.log(counts[tok_lab, ids] - 1 + alpha)) - lens * np.log(totals[lab] - lens + alpha * v)
    own += np.log((rows_of[lab] - 1 + 1) / (n - 1 + len(names)))
    best_other = np.full(n, -np.inf)
    for k in range(len(names)):
        sc = per_row(np.log(counts[k, ids] + alpha)) - lens * np.log(totals[k] + alpha * v)
        sc += np.log((rows_of[k] + 1) / (n - 1 + len(names)))
        best_other = np.where(lab != k, np.maximum(best_other, sc), best_other)
    return (best_other - own).tolist()


def _wilson_low(k: int, n: int, z: float = 1.645) -> float:
    """One-sided 95% lower bound of a rate of ``k`` in ``n`` (Wilson score interval)."""
    p, d = k / n, 1 + z * z / n
    return (p + z * z / (2 * n) - z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / d


@rule(
    "D135", "label_noise", "warning", needs=("train",), cause="content", tiers="W/I",
    thresholds={
        "near_jaccard": (0.8, "MinHash Jaccard above which two inputs count as the same input"),
        "alpha": (1.0, "add-alpha smoothing of the naive Bayes word counts"),
        "margin": (-0.25, "a row whose input is at most this many nats less likely under another label than under "
                   "its own (leave-one-out naive Bayes) reads like that label's rows: listed for review"),
        "min_rows": (100, "rows a classification file needs for the naive Bayes checks"),
        "max_error_ratio": (0.8, "the naive Bayes checks run only where the model disagrees with fewer labels than "
                            "this fraction of those a majority-label guess gets wrong (the words predict the label)"),
        "clear_share": (0.4, "the share of rows the model reads most clearly (largest margin, either way) on which "
                        "the file's label disagreement is measured: flipped labels show there as often as anywhere, "
                        "the model's own mistakes seldom"),
        "noisy_rate": (0.075, "the labels are called noisy where the one-sided 95% lower bound of the disagreement "
                       "on those rows is above this (clean real review files: 0.06 at most; 5% to 15% flipped: "
                       "0.09 and up)"),
    },
    summary="Classification-style rows (few distinct short targets) whose label disagrees with the label of the "
    "same or a near-duplicate input elsewhere in the file (the minority label is flagged; a warning); files whose "
    "labels look flipped at random: a naive Bayes model over the words of the file's own inputs, each row left out, "
    "disagrees with too many labels among the rows it reads most clearly (a warning naming those rows); and the "
    "other rows whose input reads more like another label's rows than like its own label's (a review list: a note).",
    why="Flipped or inconsistent labels teach the model contradictory answers. Two copies of one input with two "
    "labels are the cheapest reliable signal. A flipped label on a unique input shows only against the rest of the "
    "file: its words are those of the other label's rows. A bag-of-words model also misreads hard, correct rows "
    "(about one short review in five), but seldom the rows it reads most clearly, where random flips show as often "
    "as anywhere: many disagreements there mark a noisy file, and a third to two thirds of the rows named there "
    "were flipped in review files with 5% to 15% of their labels flipped. The rest of the flipped rows lie among "
    "the hard ones, where the model cannot tell them from correct rows, so that list is a note to review, not a "
    "verdict.",
    example='"Great phone, works well." labelled positive twice and negative once; "Terrible battery, returned it." '
    "labelled positive among 1,500 reviews.",
    fix="Relabel the flagged rows (or drop them); review the listed rows, the most confident first.",
    seen_in="cleanlab (find_label_issues)",
)  # fmt: skip
def label_noise(ctx: DiagnoseContext, t: Params) -> Iterator[Hit]:
    from gradian.diagnose.rules.dataset import _is_labels

    if not _is_labels(ctx):
        return
    rows_ = [e for e in ctx.train if e.prompt is not None or e.messages]
    inputs = [normalize(e.prompt or "\n".join(str(m.get("content") or "") for m in (e.messages or [])
                                              if m.get("role") != "assistant")) for e in rows_]  # fmt: skip
    labels = [normalize(e.target_text()) for e in rows_]
    rows = _conflicting_copies(inputs, labels, float(t.near_jaccard))
    if rows:
        yield Hit(
            f"{len(rows)} row(s) carry another label than the same (or a near-duplicate) input elsewhere",
            evidence=rows_ev([rows_[k].index for k in rows], len(ctx.train), ctx.train_file),
            fix=drop_fix("Relabel the flagged rows or drop them", [rows_[k].index for k in rows], ctx.train_file,
                         "D135"),
        )  # fmt: skip
    if len(rows_) < t.min_rows or len(set(labels)) < 2:
        return
    margins = _nb_margins(inputs, labels, float(t.alpha))
    majority = Counter(labels).most_common(1)[0][1] / len(labels)
    if sum(m > 0 for m in margins) > t.max_error_ratio * (1 - majority) * len(margins):
        return  # the words hardly predict the label (GSM8K questions labelled by the answer's parity): no list
    conflicts = set(rows)
    clear = sorted(range(len(margins)), key=lambda k: -abs(margins[k]))[: max(1, int(t.clear_share * len(margins)))]
    against = [k for k in clear if margins[k] > 0]
    low = _wilson_low(len(against), len(clear))
    named: set[int] = set()
    if low > t.noisy_rate:
        named = {k for k in against if k not in conflicts}
        flagged = sorted(named, key=lambda k: -margins[k])
        idx = [rows_[k].index for k in flagged]
        yield Hit(
            f"Labels look flipped: on the {len(clear)} rows the file's own words place most clearly, {len(against)} "
            f"({pct(len(against), len(clear))}%, at least {100 * low:.0f}% at 95% confidence) read as another label "
            f"than theirs, where a clean file shows a few percent: {len(idx)} row(s) named, the most confident "
            "first (a third to two thirds of such rows were flipped in files with labels flipped at random)",
            evidence=rows_ev(idx, len(ctx.train), ctx.train_file, kind="noisy_file", clear_rows=len(clear),
                             disagree=len(against), low_rate=round(low, 3), most_confident=idx[:20],
                             margins={str(i): round(margins[k], 2) for i, k in zip(idx[:20], flagged, strict=False)}),
            fix=drop_fix("Check the labels of the named rows, the most confident first, and of the file's source",
                         idx, ctx.train_file, "D135"),
        )  # fmt: skip
    skip = conflicts | named
    listed = sorted((k for k, m in enumerate(margins) if m > t.margin and k not in skip),
                    key=lambda k: -margins[k])  # fmt: skip
    if listed:
        idx = [rows_[k].index for k in listed]
        strong = [i for i, k in zip(idx, listed, strict=True) if margins[k] > 2.0]
        yield Hit(
            f"{len(idx)} row(s) ({pct(len(idx), len(ctx.train))}%) have an input that reads like another label's "
            f"rows (leave-one-out naive Bayes on this file's words; {len(strong)} by more than 2 nats): review "
            "their labels, the most confident first (a bag-of-words model also disagrees with hard, correct rows)",
            severity="info",
            evidence=rows_ev(idx, len(ctx.train), ctx.train_file, kind="model", most_confident=idx[:20],
                             margins={str(i): round(margins[k], 2) for i, k in zip(idx[:20], listed, strict=False)}),
            fix=drop_fix("Review the labels of the listed rows, the most confident first; relabel the wrong ones",
                         idx, ctx.train_file, "D135"),
        )  # fmt: skip


def _conflicting_copies(inputs: list[str], labels: list[str], near_jaccard: float) -> list[int]:
    """Positions (into inputs) whose label is a minority label among the same or near-duplicate inputs (all of a
    tied group)."""
    parent = list(range(len(inputs)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first: dict[str, int] = {}
    for k, s in enumerate(inputs):
        parent[find(k)] = find(first.setdefault(s, k))
    for a, b, _ in near_duplicate_pairs(inputs, near_jaccard):
        parent[find(a)] = find(b)
    groups: dict[int, list[int]] = defaultdict(list)
    for k in range(len(inputs)):
        groups[find(k)].append(k)
    rows = []
    for members in groups.values():
        c = Counter(labels[k] for k in members)
        if len(c) > 1:
            top, n_top = c.most_common(1)[0]
            if n_top * 2 > len(members):  # a majority label: flag the others; a tie: flag all
                rows += [k for k in members if labels[k] != top]
            else:
                rows += members
    return sorted(rows)
