"""Per-row text measures the content rules compare with the file's own rows (no phrase lists): how a row ends,
how much of it repeats (the Gopher / datatrove repetition measures), which line-initial markers recur across rows,
and which function words make up the file's language profile."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Any

from gradian.data.types import Example
from gradian.diagnose.minhash import normalize

# Sentence-final punctuation in many scripts (Latin, CJK, Arabic, Devanagari, Ethiopic, Armenian, Greek).
TERMINAL = set(".!?…。！？؟۔।॥።։\u037e")  # U+037E: the Greek question mark (ASCII ';' is mid-sentence)
CLOSERS = set("\"')]}»”’」』】〉》*`_>")
MID = set(",;:-–—(/&+=[{<")


TAIL = 300  # characters of a text's end its last tokens are read from (a search over the whole text is quadratic)
# a link, a #tag or an @handle; an attribution after a closing sentence ('... possible." - Charles Kingsleigh', up to
# eight words: '― Roy T. Bennett, The Light in the Heart')
_TOKEN_END = re.compile(r"(?:\w+://\S+|(?<!\S)[#@]\w+|[.!?。！？…][\"'”’」]*\s*[-–—―]\s*\S+(?:[ \t]+\S+){0,7})$")


# what may be a letter's closing after its last sentence: a short phrase, a comma, and a name ('Yours sincerely, Jane
# Austen', 'Best regards, [Your Name], CEO'), on one line or a signature block's lines; the phrase is group 1
_NAME = r"(?:\[[^\]\n]{1,30}\]|[A-Z][\w.'’-]{0,30})"
_SIGNATURE = re.compile(
    rf"[.!?…][\"'”’]*\s+([A-Z][^.!?\n,]{{0,60}}),\s+{_NAME}(?:,?\s+(?:{_NAME}|[a-z]{{1,3}})){{0,12}}(?<=[\w\]])$"
)


def closing(text: str) -> str:
    """The phrase of what may be a letter's closing at the end of a text, lowercased ('yours sincerely'), or ``""``.
    A text that ends in one a file's texts share ends whole; one phrase alone may as well be a sentence cut after
    a name ('One day, Lily')."""
    m = _SIGNATURE.search(text.rstrip()[-TAIL:])
    return " ".join(m.group(1).lower().split()) if m else ""


def signature_block(text: str) -> bool:
    """Whether a text ends in a letter's closing laid out as a block: the phrase alone on its line, then the name's
    lines ('Warm regards,' / '[Your Name]' / 'Acme Team'). A sentence cut after a name runs on one line."""
    m = _SIGNATURE.search(text.rstrip()[-TAIL:])
    if not m:
        return False
    before, after = m.string[: m.start(1)], m.string[m.end(1) :]
    return before.rstrip(" \t").endswith("\n") and bool(re.match(r",[ \t]*\n", after))


_EMOJI_JOINERS = "\u200d\ufe0e\ufe0f"  # an emoji's joiner and presentation selectors (combining marks, not letters)


def end_class(text: str) -> str:
    """How a text ends: ``clean`` (terminal punctuation, maybe inside closing quotes/brackets, or a digit), ``word``
    (a letter: mid-sentence), ``mid`` (a comma, colon, dash, open bracket...), ``other`` (symbols, emoji, a closing
    bracket or quote after anything but terminal punctuation: code, markup; a link, a #tag, a quote's attribution),
    ``empty``."""
    s = text.rstrip().rstrip(_EMOJI_JOINERS).rstrip()
    if not s:
        return "empty"
    if _TOKEN_END.search(s[-TAIL:]):  # a link, a #tag, an attribution: a whole unit, not a sentence cut
        return "other"
    if s[-1] in CLOSERS:  # '..."', '...!)' are clean; code and markup ('f(x)', '</b>', '```') are left alone
        inner = s.rstrip("".join(CLOSERS)).rstrip()
        return "clean" if inner and inner[-1] in TERMINAL else "other"
    c = s[-1]
    if c in TERMINAL or c.isdigit():
        return "clean"
    if c in MID:
        return "mid"
    cat = unicodedata.category(c)
    if cat[0] in "LM":
        return "word"
    return "other"


# a sentence end inside a text: a mark after a letter or a digit and before a space, or a full-width mark (scripts
# that do not space their words); an enumerator ('1. Java') is none
_INNER_END = re.compile(r"[^\W_][.!?…؟।]+[\"'”’)\]»]*\s|[。！？]")
_ENUMERATOR = re.compile(r"(?m)^\s*\d{1,3}[.)]\s")


def writes_sentences(text: str) -> bool:
    """Whether a text holds a sentence end before its last character: one that holds none (a title, a list of
    names, a menu, lyrics, a table) is not written in sentences, so its ending says nothing of a cut sentence."""
    return bool(_INNER_END.search(_ENUMERATOR.sub("", text.rstrip()[:-1])))


_CELL_BAR = re.compile(r"\S\s+\|\s+\S")


def table_line(line: str) -> bool:
    """A table's row: two or more cells between '|' ('Subject | Ending', '| a | b |')."""
    return line.count("|") >= 2 or bool(_CELL_BAR.search(line))


_SENT = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_SENT_END = re.compile(r"[.!?。！？\n]")  # a text without any of these is one sentence (_SENT cannot split it)
_WORDS = re.compile(r"\w+")


def loop_run(units: list[str], max_period: int = 3) -> int:
    """The most back-to-back copies of one sentence, or of a cycle of up to ``max_period`` sentences, of 4+ words
    (``A A A`` or ``A B A B A B`` -> 3): how a generation loop repeats itself. Copies with other text between them
    (a song's chorus, a heading before each example) are not a run; a unit that ends in the copy just before a run
    of one sentence is its first copy (the loop glued to a line without a full stop: '#### 72 A. A. A.')."""
    best = 1
    for p in range(1, max_period + 1):
        run = 0
        for k, same in enumerate(map(str.__eq__, units[p:], units), start=p):
            if not same:
                run = 0
                continue
            run += 1
            if sum(u.count(" ") + 1 for u in units[k - p + 1 : k + 1]) < 4:
                continue
            start = k - run - p  # the unit before the run: the loop's first copy may end it, glued to what came before
            glued = p == 1 and start >= 0 and units[start].endswith(" " + units[k])
            best = max(best, (run + p) // p + glued)
    return best


def paragraph_copies(text: str) -> int:
    """The most copies of one sentence of 5+ words among the sentences of the text's paragraphs (lines of two
    sentences or more): a reply that says the same sentence again and again, one paragraph after another. A line
    that is a sentence on its own (a song's line, a list item, a heading) repeats by design."""
    seen: Counter[str] = Counter()
    for line in text.split("\n"):
        sents = [x.strip().lower() for x in _SENT.split(line) if x.strip()]
        if len(sents) > 1:
            seen.update(x for x in sents if x.count(" ") >= 4 and x[-1] in TERMINAL)
    return max(seen.values(), default=1)


def loop_measures(text: str) -> tuple[int, float, float]:
    """The repetition measures the repetition rule uses, computed lean: the most back-to-back copies of a sentence
    or a short cycle of them (:func:`loop_run`), or of one sentence across paragraphs (:func:`paragraph_copies`), the
    share of characters in repeated sentences/lines, and the share of word characters in repeated 10-grams.
    A repeated 10-gram needs at least 10 repeated word occurrences and a repeated 3-gram, a repeated sentence at
    least one repeated word and a sentence end: rows without skip the work."""
    words = text.lower().split()
    n_dup = len(words) - len(set(words))
    if n_dup == 0:
        return 1, 0.0, 0.0
    copies, dup_sent = 1, 0.0
    if _SENT_END.search(text):
        units = [u.strip().lower() for u in _SENT.split(text) if u and u.strip()]
        seen = Counter(units)
        if len(seen) < len(units):
            copies = max(loop_run(units), paragraph_copies(text))
            dup_sent = sum(len(u) for u in units if seen[u] > 1) / (sum(len(u) for u in units) or 1)
    n = 10
    if n_dup < n or len(set(zip(words, words[1:], words[2:], strict=False))) == len(words) - 2:
        return copies, dup_sent, 0.0  # a repeated 10-gram needs 10 repeated words and a repeated 3-gram
    grams = [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
    counts = Counter(grams)
    if len(counts) == len(grams):
        return copies, dup_sent, 0.0
    covered = [False] * len(words)
    for i, g in enumerate(grams):
        if counts[g] > 1:
            covered[i : i + n] = [True] * n
    wchars = sum(len(w) for w in words) or 1
    return copies, dup_sent, sum(len(w) for w, c in zip(words, covered, strict=True) if c) / wchars


def one_unit_loop(text: str) -> int:
    """How many times a text repeats its one sentence (or line) when it is nothing but copies of it (``"Lily. Lily.
    Lily."`` -> 3); 1 when it holds any other sentence. The loop a short row is, which the share measures of
    :func:`loop_measures` leave to rows of 40+ characters."""
    units = [u.strip().lower() for u in _SENT.split(text) if u and u.strip()]
    return len(units) if len(units) > 1 and len(set(units)) == 1 else 1


def repetition(text: str) -> dict[str, float]:
    """Gopher-style repetition measures of one text (Rae et al. 2021, as in datatrove's GopherRepetitionFilter):
    the share of characters in duplicated lines / sentences, the top 2-4-gram character share, and the duplicated
    5-10-gram character share; plus the most copies of any one sentence of at least 4 words."""
    out: dict[str, float] = {}
    units = [u.strip() for u in _SENT.split(text) if u and u.strip()]
    total = sum(len(u) for u in units) or 1
    seen: Counter[str] = Counter(u.lower() for u in units)
    out["dup_sentence_chars"] = sum(len(u) for u in units if seen[u.lower()] > 1) / total
    long_counts = [c for u, c in seen.items() if len(u.split()) >= 4]
    out["max_sentence_copies"] = float(max(long_counts, default=0))
    words = _WORDS.findall(text.lower())
    wchars = sum(len(w) for w in words) or 1
    for n in (2, 3, 4):
        if len(words) < n:
            out[f"top_{n}gram"] = 0.0
            continue
        grams = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
        g, c = grams.most_common(1)[0]
        out[f"top_{n}gram"] = (sum(len(w) for w in g) * c / wchars) if c > 1 else 0.0
    for n in (5, 10):
        runs = [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
        counts = Counter(runs)
        covered = [False] * len(words)
        for i, run in enumerate(runs):
            if counts[run] > 1:
                covered[i : i + n] = [True] * n
        out[f"dup_{n}gram"] = sum(len(w) for w, c in zip(words, covered, strict=True) if c) / wchars
    return out


_MARKER_LINE = re.compile(r"^[ \t]*((?:#{1,4}[ \t]*)?[^\W\d_][\w '/-]{0,30}?:)(?=\s|$)", re.M)
KNOWN_MARKERS = (
    "### Instruction:", "### Input:", "### Response:", "### Question:", "### Answer:", "### Human:",
    "### Assistant:", "Human:", "Assistant:", "<|user|>", "<|assistant|>", "<|system|>", "<|im_start|>",
    "[INST]", "<start_of_turn>", "<|start_header_id|>", "<|prompter|>", "<human>:", "<bot>:", "USER:", "ASSISTANT:",
)  # fmt: skip


def line_markers(text: str) -> set[str]:
    """Line-initial label sequences ending in ':' ("### Question:", "Human:", "Answer:"), at most 4 words."""
    return {m.group(1).strip() for m in _MARKER_LINE.finditer(text) if len(m.group(1).split()) <= 4}


_KNOWN_TOKENS = "|".join(re.escape(m) for m in sorted(KNOWN_MARKERS, key=len, reverse=True) if not m.endswith(":"))
_KNOWN_LABELS = "|".join(re.escape(m) for m in sorted(KNOWN_MARKERS, key=len, reverse=True) if m.endswith(":"))
# a role label opens its line ('Human: ...'); inside a sentence it is a name ('Open Assistant: the blog post')
_KNOWN_RE = re.compile(rf"{_KNOWN_TOKENS}|(?:^|(?<=\n))[ \t]*({_KNOWN_LABELS})")


def known_markers(text: str) -> set[str]:
    """The known families' markers in ``text``: special tokens anywhere, role labels ('Human:', '### Response:')
    where they open a line."""
    return {m.group(1) or m.group(0) for m in _KNOWN_RE.finditer(text)}


def sample(items: list, n: int = 5000) -> list:
    """Up to about ``n`` evenly spaced items: enough to learn a file's norm, cheap at 100k rows."""
    return items[:: max(1, len(items) // n)]


def template_lines(prompts: list[str], min_share: float = 0.1) -> set[str]:
    """Lines that at least ``min_share`` of the prompts (and 3) hold: a template's, not a prompt's own."""
    lines = Counter(ln for p in prompts for ln in set(p.split("\n")))
    return {ln for ln, c in lines.items() if c >= max(3, min_share * len(prompts))}


def learned_markers(texts: list[str], min_share: float = 0.1, min_rows: int = 3) -> dict[str, int]:
    """Line markers that recur across rows: ``{marker: rows}`` for those in at least ``min_share`` of the rows."""
    c: Counter[str] = Counter()
    for t in texts:
        c.update(line_markers(t))
    need = max(min_rows, min_share * len(texts))
    return {m: n for m, n in c.items() if n >= need}


def row_pairs(e: Example) -> list[tuple[str, str]]:
    """(prompt, answer) pairs of a row: the prompt and completion, or each assistant turn with the user turn before
    it. Text rows have none."""
    if e.messages is not None:
        out, last_user = [], ""
        start = e.n_prompt_messages or 0
        for k, m in enumerate(e.messages):
            role, content = m.get("role"), str(m.get("content") or "")
            if role == "assistant" and k >= start and last_user:
                out.append((last_user, content))
            elif role == "user":
                last_user = content
        return out
    if e.text is not None:
        return []
    return [(e.prompt or "", e.completion or "")]


_ASCII_LETTER = re.compile("[A-Za-z]")  # str.isalpha() of an ASCII character


UNSPACED = {"CJK", "HIRAGANA", "KATAKANA", "THAI", "LAO", "KHMER", "MYANMAR", "TIBETAN"}  # no spaces between words


def script_of(text: str) -> str | None:
    """The dominant Unicode script family of a text (by the first word of its letters' Unicode names), counted in
    units of writing: a word (a run of letters) of a script that spaces its words, a character of one that does not
    (a Chinese character carries about what an English word does), so that English glosses in a Chinese answer do
    not outweigh it."""
    if text.isascii():
        return "LATIN" if _ASCII_LETTER.search(text) else None
    c = script_units(text)
    return c.most_common(1)[0][0] if c else None


def script_units(text: str) -> Counter[str]:
    """Units of writing per Unicode script family (:func:`script_of`): words, or characters where words are not
    spaced."""
    c: Counter[str] = Counter()
    prev = None
    for ch in text:
        if not ch.isalpha():
            if not unicodedata.category(ch).startswith("M"):  # a vowel sign or an accent stays inside its word
                prev = None
            continue
        try:
            script = unicodedata.name(ch).split(" ")[0]
        except ValueError:
            prev = None
            continue
        if script in UNSPACED or script != prev:
            c[script] += 1
        prev = script
    return c


def cache(ctx: Any, key: str, fn: Any) -> Any:
    """Compute ``fn()`` once per context (several rules read the same per-row measures)."""
    store = ctx.cache
    if key not in store:
        store[key] = fn()
    return store[key]


def targets(ctx: Any) -> list[str]:
    """Every train row's ``target_text()``, in row order, computed once per context."""
    return cache(ctx, "targets", lambda: [e.target_text() for e in ctx.train])


_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]+`", re.DOTALL)  # fenced blocks (an unclosed one runs to the end), spans
_BLOCKS = re.compile(r"\n\s*\n")
# identifiers and tags are bounded: an unbounded run backtracks over a long word at every start (quadratic)
_CALL = re.compile(r"[A-Za-z_$][\w.$]{0,80}(?:\(|\s*(?:\[[^\]]{0,80}\]\s*)?[-+*/%|&]?=(?!=))")  # f(, x.y =, a[0] +=
TAGS_LINE = re.compile(r"\s*(?:<[!?/]?[A-Za-z][^<>]{0,200}>\s*)+")  # a line of tags alone
_HARD_CODE = re.compile(r"[{};]|[A-Za-z_][\w.]{0,80}\(|<[/!?]?[A-Za-z][^<>]{0,200}>")
ITEM_START = re.compile(r"\s*(?:[-*•+]|\d{1,3}[.)]|[A-Za-z][.)])\s")  # a list item: a bullet or an enumerator


def _code_line(line: str) -> bool:
    """A line laid out as code: indented, or ending on a brace or a semicolon, or opening with a call or an
    assignment ('print(x)', 'arr = [0, 0]'); never a list item ('- salt (optional)')."""
    if not line.strip() or ITEM_START.match(line):
        return False
    if line[:1] in (" ", "\t"):
        return True
    return line.rstrip()[-1:] in ("{", "}", ";") or bool(_CALL.match(line))


def is_code_block(block: str) -> bool:
    """Whether a block (lines between blank lines) is code, not prose: at least 60% of its lines are laid out as code
    (:func:`_code_line`), and one of them is so by more than its indentation (indentation alone is also a poem's or a
    list's): it opens with a call or an assignment, ends on a brace or a semicolon, is a line of tags, or ends on a
    colon with indented lines after it ('def f(x):', 'for i in range(n):')."""
    lines = [ln for ln in block.split("\n") if ln.strip()]
    if len(lines) == 1:  # a line alone: code when it opens with a call or an assignment, or ends on a semicolon
        return bool(_CALL.match(lines[0].lstrip())) or lines[0].rstrip().endswith(";")
    flags = [_code_line(ln) or bool(TAGS_LINE.fullmatch(ln)) for ln in lines]
    for k, ln in enumerate(lines[:-1]):
        if ln.rstrip().endswith(":") and ln[:1] not in (" ", "\t") and lines[k + 1][:1] in (" ", "\t"):
            flags[k] = not ITEM_START.match(ln)
    hard = any(f and (ln[:1] not in (" ", "\t") or _code_line(ln.lstrip())) for f, ln in zip(flags, lines, strict=True))
    return hard and sum(flags) >= 0.6 * len(lines)


LETTER = re.compile(r"[^\W\d_]")  # a line without one (a printed array, a row of numbers) is data, not language
_JSON_LINE = re.compile(r'(?m)^[ \t]*(?:\{[ \t]*"[^"\n]*"[ \t]*:|\[[ \t]*[\[{"\d-]).*[\]}][ \t]*$')  # {"name": ...}


def prose(text: str) -> str:
    """``text`` without its code (fenced blocks, inline spans, lines that are JSON objects or arrays, and blocks
    laid out as code, :func:`is_code_block`): what the content rules judge as language, markup and repetition, since
    code repeats its own syntax, is in no natural language, and may be markup on purpose."""
    if "`" in text:
        text = _CODE.sub(" ", text)
    if '"' in text:
        text = _JSON_LINE.sub(" ", text)  # a tool call's arguments, a record: data, not language
    if "\n" not in text and not _CALL.match(text) and text.rstrip()[-1:] != ";":
        return text  # one line that neither opens like code nor ends so
    return "\n\n".join(b for b in _BLOCKS.split(text) if not is_code_block(b))


def ends_in_code(text: str) -> bool:
    """Whether a text's last block is code, its ending no sentence's: a fenced block, or a block laid out as code
    (:func:`is_code_block`) with a brace, a semicolon, a call or a tag in it (assignments alone are also a worked
    sum's lines: 'Total = 15 + 12 = 27')."""
    s = text.rstrip()
    if s.endswith("```"):
        return True
    if not any(c in s for c in "{};(<"):
        return False
    last = _BLOCKS.split(s)[-1]
    return is_code_block(last) and bool(_HARD_CODE.search(last))


def prose_targets(ctx: Any) -> list[str]:
    """Every train row's target without its code (:func:`prose`), in row order, computed once per context."""
    return cache(ctx, "prose_targets", lambda: [prose(t) for t in targets(ctx)])


def plains(ctx: Any) -> list[str]:
    """Every train row's ``plain_text()``, in row order, computed once per context."""
    return cache(ctx, "plains", lambda: [e.plain_text() for e in ctx.train])


def norm_targets(ctx: Any) -> list[str]:
    """Every train row's normalized target (lowercased, whitespace collapsed: the duplicate and label key)."""
    return cache(ctx, "norm_targets", lambda: [normalize(t) for t in targets(ctx)])


def norm_plains(ctx: Any) -> list[str]:
    """Every train row's normalized whole text (the exact-duplicate key)."""
    return cache(ctx, "norm_plains", lambda: [normalize(t) for t in plains(ctx)])


def answers(ctx: Any) -> list[tuple[int, str, str]]:
    """(row, prompt, answer) for every answer of a prompt/completion or chat row (text rows have none), in order."""
    return cache(ctx, "answers", lambda: [(e.index, p, a) for e in ctx.train for p, a in row_pairs(e)])
