"""Axolotl's tokenization, where it differs from TRL's (checked against Axolotl 0.19.0's own preprocessing,
tests/fixtures/golden).

- Alpaca and other instruction rows (``InstructionPromptTokenizingStrategy``): the prompt and the response are
  tokenized apart, each truncated to ``sequence_len``; the response loses its BOS and gains the EOS *id* unless it
  already ends with it or fills ``sequence_len``; an empty response adds nothing (no EOS). The prompt is masked
  unless ``train_on_inputs``.
- ``type: chat_template`` (``ChatTemplateStrategy``): the conversation tokenized by the chat template; each trained
  turn (the assistant's, every turn with ``train_on_inputs``) is located by rendering it again with placeholder
  content and diffing the text, mapped to tokens through the offsets, and its content plus the first EOS/end-of-turn
  token at most three tokens after it carry the loss (``train_on_eos: turn``); template text around a turn does not.
- ``type: completion``: the text plus the EOS id, split into samples of ``sequence_len`` tokens (none dropped).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import Any

SENTINELS = ("[[dummy_message]]", "zzdummymessagezz")  # Axolotl's placeholders, with disjoint edge characters
EOS_REACH = 3  # Axolotl trains an EOS/EOT token found at most this many tokens after a turn's content


def _encode(tokenizer: Any, text: str, max_length: int | None) -> list[int]:
    if not text:
        return []
    if max_length is None:
        return list(tokenizer(text)["input_ids"])
    return list(tokenizer(text, truncation=True, max_length=max_length)["input_ids"])


def _with_eos(tokenizer: Any, ids: list[int], max_length: int | None) -> bool:
    """Append the EOS id as Axolotl's ``_tokenize`` does (not after EOS, not when full); whether it did."""
    eos = tokenizer.eos_token_id
    if ids and ids[-1] != eos and eos is not None and (max_length is None or len(ids) < max_length):
        ids.append(eos)
        return True
    return False


def text_ids(tokenizer: Any, text: str, max_length: int | None) -> tuple[list[int], bool]:
    """Ids of a ``type: completion`` row before Axolotl splits it, and whether EOS was appended."""
    ids = _encode(tokenizer, text, max_length)
    return ids, _with_eos(tokenizer, ids, max_length)


def instruction_ids(
    tokenizer: Any, prompt: str, response: str, max_length: int | None, train_on_inputs: bool
) -> tuple[list[int], list[bool], bool]:
    """Ids, loss mask and whether EOS was appended, for one prompt/response row as Axolotl tokenizes it."""
    p = _encode(tokenizer, prompt, max_length)
    r = _encode(tokenizer, response, max_length)
    appended = _with_eos(tokenizer, r, max_length)
    if r and r[0] == tokenizer.bos_token_id:
        r = r[1:]
    return p + r, [train_on_inputs] * len(p) + [True] * len(r), appended


def _diff_span(full: str, dummy: str) -> tuple[int, int]:
    """The char span of ``full`` that differs from ``dummy`` (prefix first, the suffix bounded by it)."""
    limit = min(len(full), len(dummy))
    start = 0
    while start < limit and full[start] == dummy[start]:
        start += 1
    end = 0
    while end < limit - start and full[-1 - end] == dummy[-1 - end]:
        end += 1
    return start, len(full) - end


def turn_mask(
    tokenizer: Any,
    render: Callable[[list[dict[str, Any]]], str],
    messages: Sequence[dict[str, Any]],
    ids: list[int],
    trained: Callable[[dict[str, Any]], bool],
    end_ids: set[int],
) -> list[bool] | None:
    """The loss mask Axolotl's chat_template strategy gives ``ids``; None when the rendered text does not
    re-tokenize to ``ids`` (Axolotl then falls back to a token diff, which this does not reproduce)."""
    text = render(list(messages))
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) != list(ids):
        return None
    starts = [s for s, _ in enc["offset_mapping"]]
    ends = [e for _, e in enc["offset_mapping"]]
    mask = [False] * len(ids)
    for i, message in enumerate(messages):
        if not trained(message):
            continue
        spans = []
        for sentinel in SENTINELS:
            dummy = [*messages[:i], {**message, "content": sentinel}, *messages[i + 1 :]]
            spans.append(_diff_span(text, render(dummy)))
        lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
        if hi <= lo:
            continue
        first, last = bisect_right(ends, lo), bisect_left(starts, hi)
        for k in range(first, min(last, len(ids))):
            mask[k] = True
        after = next((k for k in range(last, len(ids)) if ids[k] in end_ids), -1)
        if after != -1 and after - last <= EOS_REACH:
            mask[after] = True
    return mask
