"""Generation around the eval items: the base model writes the completions of prompt-only eval rows, and each regressed
item is shown as the base model's and the fine-tune's continuation of its prompt.

* Prompt-only rows (``Example.prompt_only``): the base model (adapter disabled) continues the prompt, greedy by default;
  ``samples=N`` draws N completions per prompt (plain sampling, temperature 1, seeded per row by ``seed`` + row index,
  so a row's samples do not depend on the batch). The completion stops at EOS (or the template's end of turn, which is
  left out, as a written completion leaves it out) or after ``max_new_tokens``. With ``cut`` (the default) it is then
  cut after the first token at which the fine-tune departs (teacher forced over the completion; kept whole when it
  never does): its most likely next token differs from the base model's, or its NLL of the base model's token is
  more than ``cut_rise`` nats higher (``--eval-cut-rise``, 0.1), a regression that leaves the argmax where it was (a
  name the fine-tune still writes, less surely; a stop it now makes 10% of the time): the base model's answer up to
  where the fine-tune departs from it. It keeps at least ``min_tokens`` tokens (``--eval-min-tokens``, 16; all of the
  reply when it is shorter): a chat model's fine-tune often departs at the first token of the reply, and one token
  holds the opening word, not the behaviour a person compares. Without the cut a regression in the first tokens is
  diluted by the rest of a long completion in the mean NLL per token. A completion never ends inside a character
  split over byte tokens (:func:`whole_chars`); one with nothing left is left out (noted), as is a row with none. The
  result is a written completion, formatted and scored as one, except that a completion the base model had not
  finished (cut, or stopped by ``max_new_tokens``) is scored without the EOS or end of turn after it
  (``Example.open_end``): the base model did not write it there.
* Side by side: greedy, the same ``max_new_tokens`` for both models, from the prompt tokens of the formatted item.

Batches are left-padded for ``generate``; the completion text is the decoded prompt+completion minus the decoded
prompt, so a leading space survives tokenizers that drop it when decoding a piece on its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from gradian.attribute.continuations import Continuation, Continuations
from gradian.data.types import Example, FormattedExample
from gradian.options import DEFAULTS

# the defaults live in gradian.options.AttributeOptions (with their help text)
MAX_NEW_TOKENS = DEFAULTS.max_new_tokens  # tokens generated per completion / continuation
EVAL_SAMPLES = DEFAULTS.eval_samples  # completions per prompt-only eval row: 0 = one greedy completion, N = N sampled
EVAL_SEED = DEFAULTS.eval_seed
EVAL_CUT = DEFAULTS.eval_cut  # cut generated eval completions where the fine-tune departs from the base model
CUT_RISE = DEFAULTS.eval_cut_rise  # nats: a token whose NLL rises more under the fine-tune is a departure too
MIN_TOKENS = DEFAULTS.eval_min_tokens  # a cut completion keeps at least this many tokens of the base model's reply
SIDE_BY_SIDE = DEFAULTS.generations  # regressed items shown as base vs fine-tune continuations; 0 = none
# Greedy generation runs this many training batches' rows at once: it keeps no activations for a backward (a row holds
# its KV cache, prompt + max_new_tokens), and its cost is a fixed per-step overhead times the steps, so fewer, wider
# batches are faster. On out-of-memory the batch is halved (down to one prompt) and generation goes on.
GREEDY_BATCH_FACTOR = 4


def prompt_ids(ex: Example, tokenizer: Any) -> list[int]:
    """The tokens a prompt-only row's completion follows: the tokenized prompt, or the chat template over the prompt
    messages with the generation prompt (as a conversational prompt/completion row is formatted)."""
    from gradian.data.formatting import _apply_template, _encode_texts

    if ex.messages is not None:
        return _apply_template(tokenizer, ex, ex.messages, None, add_generation_prompt=True)["input_ids"]
    return _encode_texts(tokenizer, [ex.prompt or ""])[0]


def _end_ids(tokenizer: Any) -> list[int]:
    from gradian.data.formatting import _end_ids

    return sorted(_end_ids(tokenizer))


def continuation_text(tokenizer: Any, prompt: Sequence[int], new: Sequence[int]) -> str:
    """The text ``new`` adds after ``prompt`` (special tokens left out)."""
    head = tokenizer.decode(list(prompt), skip_special_tokens=True)
    full = tokenizer.decode(list(prompt) + list(new), skip_special_tokens=True)
    return full[len(head) :] if full.startswith(head) else tokenizer.decode(list(new), skip_special_tokens=True)


def generate(
    model,
    tokenizer: Any,
    prompts: Sequence[Sequence[int]],
    *,
    adapter: bool,
    max_new_tokens: int = MAX_NEW_TOKENS,
    batch_size: int = DEFAULTS.batch_size,
    samples: int = 0,
    seed: int = EVAL_SEED,
    seeds: Sequence[int] | None = None,
    memo: Continuations | None = None,
) -> list[list[list[int]]]:
    """New token ids per prompt: ``[[greedy]]`` (``samples`` 0) or N sampled sequences, cut before the first end
    token. Greedy runs ``GREEDY_BATCH_FACTOR x batch_size`` prompts at a time (halved on out-of-memory); sampling
    runs one prompt at a time, seeded by ``seed + seeds[i]`` (default ``i``). Greedy with a ``memo``: a reply it
    holds for the prompt (same model, same ``max_new_tokens``) is reused, and each new one is put there with the
    log-probability of each token chosen."""
    if memo is not None and not samples:
        return _greedy_memo(model, tokenizer, prompts, memo, adapter=adapter, max_new_tokens=max_new_tokens,
                            batch_size=batch_size)  # fmt: skip
    seqs, _ = _generate(model, tokenizer, prompts, adapter=adapter, max_new_tokens=max_new_tokens,
                        batch_size=batch_size, samples=samples, seed=seed, seeds=seeds)  # fmt: skip
    ends = _end_ids(tokenizer)
    return seqs if samples else [[_cut(q[0], ends)] for q in seqs]


def _greedy_memo(model, tokenizer: Any, prompts: Sequence[Sequence[int]], memo: Continuations, *, adapter: bool,
                 max_new_tokens: int, batch_size: int) -> list[list[list[int]]]:  # fmt: skip
    ends = _end_ids(tokenizer)
    held = [memo.greedy(adapter, p, max_new_tokens) for p in prompts]
    todo = [i for i, h in enumerate(held) if h is None]
    new, logps = _generate(model, tokenizer, [prompts[i] for i in todo], adapter=adapter,
                           max_new_tokens=max_new_tokens, batch_size=batch_size)  # fmt: skip
    for i, seqs, lp in zip(todo, new, logps, strict=True):
        memo.put(adapter, prompts[i], Continuation(seqs[0], lp, greedy=max_new_tokens))
        held[i] = seqs[0]
    return [[_cut(list(h or []), ends)] for h in held]


def _generate(
    model,
    tokenizer: Any,
    prompts: Sequence[Sequence[int]],
    *,
    adapter: bool,
    max_new_tokens: int,
    batch_size: int,
    samples: int = 0,
    seed: int = EVAL_SEED,
    seeds: Sequence[int] | None = None,
) -> tuple[list[list[list[int]]], list[np.ndarray]]:
    """:func:`generate`'s sequences, and for greedy the sequences kept up to and with their first end token, each
    with the log-probability of every token chosen (``(sequences, logps)``; sampled: ``(cut sequences, [])``)."""
    from contextlib import nullcontext

    import torch
    from transformers import GenerationConfig, LogitsProcessorList

    from gradian.attribute.engine import pad_id_of
    from gradian.attribute.robust import free_accelerator_memory, is_oom

    dev = next(model.parameters()).device
    pad = pad_id_of(tokenizer)
    ends = _end_ids(tokenizer)
    cfg = dict(max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=ends or None)
    if samples:
        gc = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=samples, **cfg)
    else:
        gc = GenerationConfig(do_sample=False, **cfg)
    step = 1 if samples else batch_size * GREEDY_BATCH_FACTOR
    out: list[list[list[int]]] = []
    logps: list[np.ndarray] = []
    ctx = nullcontext() if adapter else model.disable_adapter()
    with ctx, torch.no_grad(), _own_config_aside(model):
        s = 0
        while s < len(prompts):
            batch = [list(p) for p in prompts[s : s + step]]
            T = max(len(p) for p in batch)
            ids = torch.full((len(batch), T), pad, dtype=torch.long)
            am = torch.zeros((len(batch), T), dtype=torch.long)
            for b, p in enumerate(batch):  # left padding
                ids[b, T - len(p) :] = torch.tensor(p, dtype=torch.long)
                am[b, T - len(p) :] = 1
            rng = torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else [])
            try:
                with rng:
                    if samples:
                        torch.manual_seed(seed + (seeds[s] if seeds is not None else s))
                    chosen = _ChosenLogp()
                    gen = model.generate(input_ids=ids.to(dev), attention_mask=am.to(dev), generation_config=gc,
                                         logits_processor=LogitsProcessorList([] if samples else [chosen]))  # fmt: skip
            except Exception as e:
                if step == 1 or not is_oom(e):
                    raise
                step = max(1, step // 2)  # a wide greedy batch that does not fit: narrower, from this prompt on
                free_accelerator_memory()
                continue
            new = gen[:, T:].tolist()
            per = max(samples, 1)
            if samples:
                for b in range(len(batch)):
                    out.append([_cut(seq, ends) for seq in new[b * per : (b + 1) * per]])
            else:
                steps = torch.stack(chosen.steps, 1).double().cpu().numpy() if chosen.steps else None
                for b in range(len(batch)):
                    seq = _to_end(new[b], ends)
                    out.append([seq])
                    logps.append(steps[b, : len(seq)] if steps is not None else np.zeros(0))
            s += len(batch)
    return out, logps


@contextmanager
def _own_config_aside(model) -> Iterator[None]:
    """The model's own generation config (a hub model's sampling settings, a repetition penalty) set aside while
    gradian generates: transformers fills every setting a call leaves unset from it, and a repetition penalty would
    change which token greedy picks. Greedy is then the argmax of the model's logits, and sampling draws from them as
    they are."""
    from transformers import GenerationConfig

    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    own = getattr(target, "generation_config", None)
    target.generation_config = GenerationConfig()
    try:
        yield
    finally:
        target.generation_config = own


class _ChosenLogp:
    """A logits processor that keeps, per greedy step, the log-probability of the token greedy picks (the scores'
    maximum: with the model's own config set aside, nothing changed the logits before it) and changes nothing."""

    def __init__(self) -> None:
        self.steps: list[Any] = []

    def __call__(self, input_ids, scores):
        import torch

        s = scores.float()
        self.steps.append(s.max(-1).values - torch.logsumexp(s, -1))
        return scores


def _to_end(seq: list[int], ends: Sequence[int]) -> list[int]:
    """``seq`` up to and with its first end token."""
    for k, t in enumerate(seq):
        if t in ends:
            return seq[: k + 1]
    return seq


def _cut(seq: list[int], ends: Sequence[int]) -> list[int]:
    for k, t in enumerate(seq):
        if t in ends:
            return seq[:k]
    return seq


def complete_prompts(
    model,
    tokenizer: Any,
    examples: Sequence[Example],
    *,
    max_new_tokens: int = MAX_NEW_TOKENS,
    samples: int = EVAL_SAMPLES,
    seed: int = EVAL_SEED,
    cut: bool = EVAL_CUT,
    cut_rise: float = CUT_RISE,
    min_tokens: int = MIN_TOKENS,
    batch_size: int = DEFAULTS.batch_size,
    memo: Continuations | None = None,
) -> tuple[dict[int, list[str]], dict[int, list[bool]]]:
    """Row index -> the base model's completion(s) of each prompt-only row (cut where the fine-tune departs but
    never under ``min_tokens`` tokens, and off a broken character: :func:`whole_chars`; ``cut_rise`` is
    :func:`departures`' ``min_rise``), and row index -> whether each is open (the base model's reply goes on after
    it). A completion with nothing left (the base model stops at once, or writes a byte that forms no character) is
    left out, and a row with none is missing. Greedy with a ``memo``: the base model's replies and the fine-tune's
    log-probabilities of them are left there (:mod:`gradian.attribute.continuations`)."""
    rows = [ex for ex in examples if ex.prompt_only]
    prompts = [prompt_ids(ex, tokenizer) for ex in rows]
    new = generate(
        model, tokenizer, prompts, adapter=False, max_new_tokens=max_new_tokens, batch_size=batch_size,
        samples=samples, seed=seed, seeds=[ex.index for ex in rows], memo=memo,
    )  # fmt: skip
    ends = [[len(seq) for seq in seqs] for seqs in new]
    if cut:
        flat = [(p, seq) for p, seqs in zip(prompts, new, strict=True) for seq in seqs]
        it = iter(departures(model, tokenizer, flat, batch_size=batch_size, min_rise=cut_rise,
                             memo=None if samples else memo))  # fmt: skip
        ends = [[max(next(it) + 1, min(min_tokens, len(seq))) for seq in seqs] for seqs in new]
    out: dict[int, list[str]] = {}
    opened: dict[int, list[bool]] = {}
    for ex, p, seqs, es in zip(rows, prompts, new, ends, strict=True):
        whole = [(seq, whole_chars(tokenizer, p, seq, e)) for seq, e in zip(seqs, es, strict=True)]
        kept = [(seq, e) for seq, e in whole if e]
        if kept:
            out[ex.index] = [continuation_text(tokenizer, p, seq[:e]) for seq, e in kept]
            # generate() stops a sequence at its first end token: one as long as max_new_tokens never reached one
            opened[ex.index] = [e < len(seq) or len(seq) >= max_new_tokens for seq, e in kept]
    return out, opened


def whole_chars(tokenizer: Any, prompt: Sequence[int], seq: Sequence[int], end: int) -> int:
    """``end`` (tokens of ``seq`` kept) moved off a broken character: a character split over byte tokens is completed
    (at most 3 more tokens), else the completion ends before its first broken one (0: nothing is left). A byte token
    that forms no character decodes to U+FFFD, which the tokenizer reads back as other, unlikely tokens: the item
    would score text the base model never wrote."""

    def whole(e: int) -> bool:
        return "\ufffd" not in continuation_text(tokenizer, prompt, seq[:e])

    end = min(end, len(seq))
    if whole(end):
        return end
    for e in range(end + 1, min(end + 3, len(seq)) + 1):
        if whole(e):
            return e
    while end > 0 and not whole(end):
        end -= 1
    return end


def departures(
    model,
    tokenizer: Any,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    batch_size: int = DEFAULTS.batch_size,
    min_rise: float = CUT_RISE,
    memo: Continuations | None = None,
) -> list[int]:
    """Per (prompt, completion) pair: the index of the first completion token at which the fine-tune departs from the
    base model: their most likely next tokens differ, or the fine-tune's NLL of the completion's token is more than
    ``min_rise`` nats above the base model's (the last index when neither happens). A completion that is the base
    model's greedy reply held in ``memo`` needs no base-model forward: its tokens are the base model's most likely
    ones and the memo holds their log-probabilities; the fine-tune's over the whole reply are left there."""
    import torch

    from gradian.attribute.engine import pad_id_of

    dev = next(model.parameters()).device
    pad = pad_id_of(tokenizer)
    out = []
    with torch.no_grad():
        for s in range(0, len(pairs), batch_size):
            batch = [(list(p), list(c)) for p, c in pairs[s : s + batch_size]]
            held = [memo.get(False, p) if memo is not None else None for p, _ in batch]
            if all(h is not None and h.greedy is not None and h.tokens[: len(c)] == c for h, (_, c) in zip(
                    held, batch, strict=True)):  # fmt: skip
                seqs = [(p, h.tokens) for h, (p, _) in zip(held, batch, strict=True) if h is not None]
            else:
                held, seqs = [None] * len(batch), batch
            T = max(len(p) + len(c) for p, c in seqs)
            ids = torch.full((len(batch), T), pad, dtype=torch.long)
            am = torch.zeros((len(batch), T), dtype=torch.long)
            for b, (p, c) in enumerate(seqs):
                ids[b, : len(p) + len(c)] = torch.tensor(p + c, dtype=torch.long)
                am[b, : len(p) + len(c)] = 1
            ids, am = ids.to(dev), am.to(dev)
            nxt = torch.roll(ids, -1, dims=1)[..., None]  # the token each position predicts
            top_t, lp_t = _top_and_logp(model(input_ids=ids, attention_mask=am).logits, nxt)
            if held[0] is None:
                with model.disable_adapter():
                    top_b, lp_b = _top_and_logp(model(input_ids=ids, attention_mask=am).logits, nxt)
            else:  # the base model's greedy tokens: its most likely ones, with the log-probabilities it chose them at
                top_b, lp_b = nxt[..., 0], torch.zeros_like(lp_t)
                for b, ((p, c), h) in enumerate(zip(seqs, held, strict=True)):
                    assert h is not None
                    lp_b[b, len(p) - 1 : len(p) + len(c) - 1] = torch.as_tensor(h.logp, dtype=lp_b.dtype)
                    memo_put = lp_t[b, len(p) - 1 : len(p) + len(c) - 1].double().cpu().numpy()
                    if memo is not None:
                        memo.put(True, p, Continuation(list(c), memo_put))
            moved = ((top_t != top_b) | (lp_b - lp_t > min_rise)).cpu()
            for b, (p, c) in enumerate(batch):
                pos = range(len(p) - 1, len(p) + len(c) - 1)  # logits at pos predict completion token pos + 1 - len(p)
                out.append(next((j for j, t in enumerate(pos) if moved[b, t]), max(len(c) - 1, 0)))
    return out


def _top_and_logp(logits, nxt):
    """Per position: the most likely next token and the log-probability of ``nxt`` (fp32; the vocabulary-wide tensors
    are freed before the next model runs)."""
    import torch

    return logits.argmax(-1), logits.gather(-1, nxt)[..., 0].float() - torch.logsumexp(logits.float(), -1)


def with_completions(
    examples: Sequence[Example], completions: dict[int, list[str]], how: str,
    opened: dict[int, list[bool]] | None = None,
) -> tuple[list[Example], list[dict[str, Any]]]:  # fmt: skip
    """The eval items: written rows as they are, each prompt-only row once per completion in ``completions`` (keys:
    row index, as ints or JSON strings), with what to add to each item of report.json ``eval`` (``completion``,
    ``generated``, ``open``). ``opened`` marks the completions the base model had not finished
    (``Example.open_end``). With several completions per row the items are renumbered 0.. in file order and carry
    ``row`` and ``sample``; otherwise an item's index is its row's."""
    comp = {int(k): list(v) for k, v in completions.items()}
    open_ = {int(k): list(v) for k, v in (opened or {}).items()}
    many = any(len(v) > 1 for v in comp.values())
    items: list[Example] = []
    extra: list[dict[str, Any]] = []
    for ex in examples:
        texts = comp.get(ex.index) if ex.prompt_only else None
        if ex.prompt_only and texts is None:
            continue  # a prompt-only row nothing was generated for
        for s, text in enumerate(texts if texts is not None else [None]):
            new = dataclasses.replace(ex, prompt_only=False)
            info: dict[str, Any] = {}
            if text is not None:
                if ex.messages is not None:
                    new.messages = [*ex.messages, {"role": "assistant", "content": text}]
                    new.n_prompt_messages = len(ex.messages)
                else:
                    new.completion = text
                new.open_end = bool(open_.get(ex.index, [False] * (s + 1))[s])
                info = {"completion": text, "generated": how, "open": new.open_end}
            if many:
                info |= {"row": ex.index, "sample": s if text is not None else None}
                new.index = len(items)
                if ex.id is not None and text is not None:
                    new.id = f"{ex.id}#{s}"
            items.append(new)
            extra.append(info)
    return items, extra


def side_by_side(
    model,
    tokenizer: Any,
    fxs: Sequence[FormattedExample],
    *,
    max_new_tokens: int = MAX_NEW_TOKENS,
    batch_size: int = DEFAULTS.batch_size,
    memo: Continuations | None = None,
) -> list[dict[str, str] | None]:
    """Per item: ``{"base", "finetuned"}`` greedy continuations of its prompt tokens (None for an item without
    prompt tokens, e.g. a text row); those ``memo`` holds are not generated again."""
    keep = [i for i, f in enumerate(fxs) if f.n_prompt_tokens > 0]
    prompts = [fxs[i].input_ids[: fxs[i].n_prompt_tokens] for i in keep]
    out: list[dict[str, str] | None] = [None] * len(fxs)
    if not keep:
        return out
    kw: dict[str, Any] = {"max_new_tokens": max_new_tokens, "batch_size": batch_size, "memo": memo}
    base = generate(model, tokenizer, prompts, adapter=False, **kw)
    tuned = generate(model, tokenizer, prompts, adapter=True, **kw)
    for i, p, b, t in zip(keep, prompts, base, tuned, strict=True):
        out[i] = {"base": continuation_text(tokenizer, p, b[0]), "finetuned": continuation_text(tokenizer, p, t[0])}
    return out


def finetuned_replies(
    model,
    tokenizer: Any,
    items: Sequence[Example],
    fxs: Sequence[FormattedExample],
    generated: Sequence[bool],
    *,
    max_new_tokens: int = MAX_NEW_TOKENS,
    batch_size: int = DEFAULTS.batch_size,
    memo: Continuations | None = None,
) -> list[Example | None]:
    """Per eval item: for a generated one, the fine-tune's greedy reply to the same prompt tokens as an item of its
    own, cut to as many tokens as the base model's completion has (off a broken character; open unless the fine-tune
    ended it there): the other side of the preference a person compares. None for a written item, and for one whose
    two replies agree over that length."""
    keep = [i for i, g in enumerate(generated) if g and fxs[i].n_prompt_tokens > 0]
    prompts = [fxs[i].input_ids[: fxs[i].n_prompt_tokens] for i in keep]
    out: list[Example | None] = [None] * len(items)
    if not keep:
        return out
    tuned = generate(model, tokenizer, prompts, adapter=True, max_new_tokens=max_new_tokens, batch_size=batch_size,
                     memo=memo)  # fmt: skip
    for i, p, seqs in zip(keep, prompts, tuned, strict=True):
        ex, seq = items[i], seqs[0]
        base = reply_of(ex)
        n = len(tokenizer(base, add_special_tokens=False)["input_ids"])
        e = whole_chars(tokenizer, p, seq, n)
        text = continuation_text(tokenizer, p, seq[:e])
        if not e or text == base:
            continue
        out[i] = with_reply(ex, text, e < len(seq) or len(seq) >= max_new_tokens)
    return out


def reply_of(ex: Example) -> str:
    """A completed eval item's reply: its completion, or its last (assistant) turn (:func:`with_reply`'s inverse)."""
    return str(ex.messages[-1]["content"]) if ex.messages is not None else ex.completion or ""


def with_reply(ex: Example, text: str, open_end: bool) -> Example:
    """A completed eval item with its completion (or last assistant turn) replaced by ``text``."""
    new = dataclasses.replace(ex, open_end=open_end)
    if ex.messages is not None:
        new.messages = [*ex.messages[:-1], {"role": "assistant", "content": text}]
    else:
        new.completion = text
    return new
