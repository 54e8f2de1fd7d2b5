"""Tokenize rows exactly as the trainer did (TRL SFTTrainer semantics, checked against TRL 1.16), recording every
decision.

- String prompt/completion rows (also Alpaca, rendered by its template, and question/answer rows): with
  ``add_eos`` the EOS token *text* is appended to the completion unless it already ends with it (TRL's ``add_eos``);
  ``ids = tok(prompt + completion)``, and the prompt is the part where ``tok(prompt)`` and ``ids`` agree (TRL's
  ``common_prefix_length``: a token merged across the boundary belongs to the completion). With
  ``mask="completion_only"`` (TRL ``completion_only_loss``, the default) only the rest carries loss; with
  ``mask="full"`` every token does. When ``tok(prompt)`` is not a prefix of ``ids`` the row is flagged
  ``prefix_mismatch``.
- Text rows (the ``text_field`` column, TRL ``dataset_text_field``): EOS text appended as above; loss on every token.
- Chat rows (messages, ShareGPT): ``tokenizer.apply_chat_template`` (which tokenizes without adding special tokens,
  so a template that writes BOS gets exactly one). ShareGPT ``from`` values stay the roles (``human``/``gpt``), as
  TRL renames only the keys, unless ``sharegpt_roles="map"``. TRL adds no EOS to conversational rows. Loss on every
  token, or with ``assistant_only`` on the tokens the template wraps in ``{% generation %}``; a template without
  those markers is swapped for the training variant TRL uses (:mod:`gradian.data.templates`); when there is none,
  TRL refuses the run, which is recorded and the loss falls back to every token.
- Conversational prompt/completion rows: the prompt messages with ``add_generation_prompt=True`` give the prompt
  (common prefix as above); the whole conversation gives the ids. The completion mask applies with
  ``mask="completion_only"``, the assistant mask with ``assistant_only``; both can apply (TRL).
- Truncation keeps the first ``max_length`` tokens (``truncation_mode="keep_start"``) or the last (``"keep_end"``);
  a row left with no label token is dropped (TRL "Dropping fully masked examples"); ``drop_long`` instead marks
  over-long rows dropped (Axolotl drops rows longer than ``sequence_len``) and leaves them untruncated.
- Packing (``packing``, TRL's ``packing_strategy``): with ``"bfd"`` each row keeps its first ``max_length`` tokens
  and nothing is dropped (TRL packs whole rows, best-fit decreasing, and its padding-free attention keeps them
  apart, so a row's loss is its own); ``"bfd_split"`` and ``"wrapped"`` cut rows across packed sequences, which no
  per-row view reproduces: rows are left untruncated and the decision says so.
- Axolotl and LLaMA-Factory runs (``settings.trainer``) follow their own rules where they differ from TRL's:
  :mod:`gradian.data.axolotl` (instruction rows tokenized apart, chat_template turn spans, completion splits) and
  :mod:`gradian.data.llamafactory` (its template slots, ``infer_seqlen`` truncation, per-turn masks).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from gradian.data import axolotl, llamafactory
from gradian.data.templates import END_OF_TURN_TOKENS, training_chat_template
from gradian.data.tokenizer import chat_template_text, has_generation_markers, tokenizer_name
from gradian.data.types import Example, FormatSettings, FormattedExample
from gradian.errors import GradianError
from gradian.gcpause import gc_paused


def _encode_texts(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """``tokenizer(texts)["input_ids"]``, through the Rust batch encoder when it gives the same ids (much faster)."""
    if not texts:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        # encode_batch_fast (tokenizers >= 0.21) skips the character offsets nobody here reads: the same ids
        encode = getattr(backend, "encode_batch_fast", None) or backend.encode_batch
        try:
            fast = [e.ids for e in encode(texts, add_special_tokens=True)]
        except Exception:
            fast = None
        if fast is not None:
            probe = list(range(min(2, len(texts)))) + ([len(texts) - 1] if len(texts) > 2 else [])
            slow = tokenizer([texts[i] for i in probe])["input_ids"]
            if all(fast[i] == list(s) for i, s in zip(probe, slow, strict=True)):
                return fast
    return [list(x) for x in tokenizer(texts)["input_ids"]]


def _end_ids(tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    for t in END_OF_TURN_TOKENS:
        if t in vocab:
            ids.add(vocab[t])
    return ids


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share (TRL's ``common_prefix_length``)."""
    if len(a) <= len(b) and b[: len(a)] == a:  # the usual case, compared in C
        return len(a)
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _where(ex: Example) -> str:
    return f"{ex.source} row index {ex.index}"


def _finalize(
    ex: Example,
    ids: list[int],
    mask: list[bool],
    settings: FormatSettings,
    decisions: list[str],
    *,
    end_ids: set[int],
    bos_id: int | None,
    chat: bool,
    eos_appended: bool = False,
    prefix_mismatch: bool = False,
    uncut: str | None = None,
) -> FormattedExample:
    """Truncate or drop by the settings (not when ``uncut`` says why the row stays whole) and record the outcome."""
    n_before = len(ids)
    truncated = cut = dropped = False
    max_len = settings.max_length
    if bos_id is not None and len(ids) >= 2 and ids[0] == bos_id and ids[1] == bos_id:
        decisions.append("starts with two BOS tokens (the text or template writes one and the tokenizer adds one)")
    packing = settings.packing
    if packing and packing != "bfd":
        decisions.append(
            f"packed with packing_strategy {packing}: rows are cut at sequence boundaries, so this is the row "
            "before packing, untruncated"
        )
        max_len = None  # no per-row truncation to reproduce
    if uncut is not None and max_len is not None and n_before > max_len:
        decisions.append(uncut)
        max_len = None
    if max_len is not None and n_before > max_len:
        if settings.drop_long:
            dropped = True
            decisions.append(f"dropped: {n_before} tokens > max_length {max_len} (Axolotl drops over-long rows)")
        else:
            truncated = True
            keep_end = settings.truncation_mode == "keep_end" and not packing  # BFD packing keeps the start
            lost = sum(mask[: n_before - max_len]) if keep_end else sum(mask[max_len:])
            cut = lost > 0
            ids, mask = (ids[-max_len:], mask[-max_len:]) if keep_end else (ids[:max_len], mask[:max_len])
            decisions.append(
                f"truncated from {n_before} to {max_len} tokens "
                + ("(keep the end: truncation_mode keep_end)" if keep_end else "(keep the start, as TRL does)")
                + (f"; {lost} label tokens cut" if cut else "")
            )
    n_label = sum(mask)
    try:
        n_prompt = mask.index(True)
    except ValueError:
        n_prompt = len(ids)
    ends = False
    if n_label:
        last = max(i for i, m in enumerate(mask) if m) if mask[-1] is not True else len(mask) - 1
        tail = [ids[last]]
        if chat and last > 0 and mask[last - 1]:
            tail.append(ids[last - 1])  # ChatML-style templates end a turn with "<|im_end|>\n"
        ends = any(t in end_ids for t in tail)
    else:
        decisions.append("no tokens carry loss")
        if not dropped and settings.drop_unlabeled and max_len is not None and not packing:
            dropped = True
            decisions.append("dropped: no label token left (TRL drops fully masked examples)")
    return FormattedExample(
        index=ex.index,
        input_ids=ids,
        loss_mask=mask,
        n_tokens_before_truncation=n_before,
        n_prompt_tokens=n_prompt,
        n_label_tokens=n_label,
        truncated=truncated,
        cut_in_completion=cut,
        dropped=dropped,
        eos_appended=eos_appended,
        ends_with_eos=ends,
        prefix_mismatch=prefix_mismatch,
        decisions=decisions,
    )


def _source_decision(ex: Example) -> str | None:
    if ex.format == "alpaca":
        has_input = bool(ex.raw.get("input"))
        return f"Alpaca row rendered with the standard Alpaca template ({'with' if has_input else 'no'}-input variant)"
    if "question" in ex.raw and "prompt" not in ex.raw and ex.prompt is not None:
        return "question/answer row: prompt = question, completion = answer, no template"
    return None


def _call_template(tokenizer: Any, ex: Example, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    """``tokenizer.apply_chat_template`` with the row's tools and template kwargs; a failure names the row."""
    tools = ex.raw.get("tools")
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except ValueError:
            tools = None
    extra = ex.raw.get("chat_template_kwargs") or {}
    try:
        return tokenizer.apply_chat_template(messages, tools=tools or None, **extra, **kwargs)
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise GradianError(
            f"the chat template failed on this row ({first[:200]})",
            where=_where(ex),
            fix="fix the row's messages, or pass --tokenizer DIR of a chat model whose template accepts them",
        ) from None


def _apply_template(
    tokenizer: Any, ex: Example, messages: list[dict[str, Any]], template: str | None, **kwargs: Any
) -> dict[str, Any]:
    if template is not None:
        kwargs["chat_template"] = template
    out = _call_template(tokenizer, ex, messages, tokenize=True, return_dict=True, **kwargs)
    return {k: list(v) for k, v in out.items()}


def _render(tokenizer: Any, ex: Example, messages: list[dict[str, Any]]) -> str:
    """The conversation as text, through the tokenizer's own chat template."""
    return str(_call_template(tokenizer, ex, messages, tokenize=False))


def _messages(ex: Example, settings: FormatSettings) -> list[dict[str, Any]]:
    """The messages the template renders: ShareGPT ``from``/``value`` become ``role``/``content`` with the ``from``
    value kept as the role (TRL's maybe_convert_to_chatml), unless ``sharegpt_roles="map"``."""
    assert ex.messages is not None
    conv = ex.raw.get("conversations")
    if ex.format != "sharegpt" or settings.sharegpt_roles != "keep" or not isinstance(conv, list):
        return ex.messages
    out = []
    for m in conv:
        new = {k: v for k, v in m.items() if k not in ("from", "value")}
        out.append({"role": m.get("from"), "content": m.get("value"), **new})
    return out


def _format_chat(
    ex: Example,
    tokenizer: Any,
    settings: FormatSettings,
    end_ids: set[int],
    assistant_only: bool,
    template: str | None,
    template_note: str | None,
) -> FormattedExample:
    assert ex.messages is not None
    if settings.trainer == "axolotl":
        return _format_chat_axolotl(ex, tokenizer, settings)
    decisions = [_source_decision(ex) or "chat template applied (TRL adds no EOS to conversational rows)"]
    messages = _messages(ex, settings)
    if messages is not ex.messages:
        decisions.append("ShareGPT from/value renamed to role/content, roles kept as written (TRL)")
        if assistant_only:
            decisions.append(
                "TRL refuses assistant_only_loss for ShareGPT rows (it looks for role/content rows before it "
                "converts from/value); convert the file to messages"
            )
    if template_note:
        decisions.append(template_note)
    use_markers = assistant_only and (template is not None or has_generation_markers(tokenizer))
    completion_only = settings.mask != "full"
    prefix_mismatch = False
    if ex.n_prompt_messages:
        prompt_ids = _apply_template(
            tokenizer, ex, messages[: ex.n_prompt_messages], template, add_generation_prompt=True
        )["input_ids"]
        out = _apply_template(tokenizer, ex, messages, template, return_assistant_tokens_mask=use_markers)
        ids = out["input_ids"]
        n_p = common_prefix_length(prompt_ids, ids)
        prefix_mismatch = n_p < len(prompt_ids)
        if completion_only:
            mask = [False] * n_p + [True] * (len(ids) - n_p)
            decisions.append("conversational prompt/completion: loss on the completion only (TRL)")
        else:
            mask = [True] * len(ids)
            decisions.append("conversational prompt/completion: no completion mask (completion_only_loss off)")
        if prefix_mismatch:
            decisions.append(
                "the templated prompt is not a prefix of the templated conversation; the completion starts where "
                "they differ (TRL)"
            )
    else:
        out = _apply_template(tokenizer, ex, messages, template, return_assistant_tokens_mask=use_markers)
        ids = out["input_ids"]
        mask = [True] * len(ids)
        if not use_markers:
            decisions.append("loss on every token of the conversation")
    if use_markers:
        am = out.get("assistant_masks") or [0] * len(ids)
        mask = [bool(m) and a == 1 for m, a in zip(mask, am, strict=False)]
        decisions.append("assistant-only loss from the template's {% generation %} markers")
        if not any(am):
            decisions.append("no assistant tokens marked; TRL raises an error for such a row")
    return _finalize(
        ex,
        ids,
        mask,
        settings,
        decisions,
        end_ids=end_ids,
        bos_id=tokenizer.bos_token_id,
        chat=True,
        prefix_mismatch=prefix_mismatch,
    )


def _format_chat_axolotl(ex: Example, tokenizer: Any, settings: FormatSettings) -> FormattedExample:
    """Axolotl's ``type: chat_template``: content (+ the EOS after it) of each trained turn carries the loss."""
    messages = _messages(ex, settings)
    ids = _apply_template(tokenizer, ex, messages, None)["input_ids"]
    on_inputs = settings.mask == "full"
    decisions = [
        "Axolotl chat_template: loss on the content and the following EOS of "
        + ("every turn (train_on_inputs)" if on_inputs else "each assistant turn")
    ]

    render = partial(_render, tokenizer, ex)
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    mask = axolotl.turn_mask(tokenizer, render, messages, ids, lambda m: on_inputs or m["role"] == "assistant", eos)
    if mask is None:
        mask = [True] * len(ids)
        decisions.append(
            "the rendered conversation does not re-tokenize to the same ids; Axolotl then locates turns by a token "
            "diff, not reproduced here: loss on every token"
        )
    return _finalize(ex, ids, mask, settings, decisions, end_ids=eos, bos_id=tokenizer.bos_token_id, chat=True)


def _format_llamafactory(ex: Example, tokenizer: Any, settings: FormatSettings, name: str) -> FormattedExample:
    """A chat or Alpaca row through LLaMA-Factory's template ``name`` (:mod:`gradian.data.llamafactory`)."""
    template = llamafactory.TEMPLATES[name]
    on_prompt = settings.mask == "full"
    decisions = [
        f"LLaMA-Factory template {name}: each slot tokenized on its own; loss on "
        + ("every token (train_on_prompt)" if on_prompt else "every response, the prompts masked")
    ]
    conv = llamafactory.conversation(ex.raw, None if ex.format == "alpaca" else ex.messages)
    if conv is None:
        decisions.append("dropped: LLaMA-Factory skips rows whose turns do not alternate user/assistant")
        return FormattedExample(ex.index, [], [], 0, 0, 0, dropped=True, decisions=decisions)
    ids, labels, n_full, cut = llamafactory.encode(tokenizer, template, *conv, settings.max_length, on_prompt)
    eos = llamafactory.eos_id(tokenizer, template)
    mask = [label != llamafactory.IGNORE for label in labels]
    end_ids = {eos} if eos is not None else set()
    fx = _finalize(ex, ids, mask, settings, decisions, end_ids=end_ids, bos_id=tokenizer.bos_token_id, chat=True)
    if n_full > len(ids):
        fx.truncated, fx.cut_in_completion, fx.n_tokens_before_truncation = True, cut, n_full
        decisions.append(
            f"truncated from {n_full} to {len(ids)} tokens by LLaMA-Factory's infer_seqlen (each turn's prompt and "
            "response shortened to fit cutoff_len)"
        )
    return fx


def _llamafactory_template(tokenizer: Any, settings: FormatSettings) -> str | None:
    """The modelled LLaMA-Factory template to format with, or None (not a LLaMA-Factory run, or not modelled)."""
    if settings.trainer != "llamafactory":
        return None
    name = settings.template
    if name is None and chat_template_text(tokenizer) is None:
        name = "empty"  # LLaMA-Factory's choice without a template or a chat template
    return name if name in llamafactory.TEMPLATES else None


def _chat_template_choice(tokenizer: Any, assistant_only: bool) -> tuple[str | None, str | None]:
    """The template to render chat rows with (None: the tokenizer's own) and the decision to record."""
    if not assistant_only or has_generation_markers(tokenizer):
        return None, None
    choice = training_chat_template(tokenizer)
    if choice.template is None:
        return None, (
            f"assistant-only loss requested but the chat template has no {{% generation %}} markers and "
            f"{choice.how}; loss falls back to every token"
        )
    return choice.template, f"assistant-only loss: rendered with {choice.how}"


def format_examples(
    examples: Sequence[Example], tokenizer: Any, settings: FormatSettings | None = None
) -> list[FormattedExample]:
    """Tokenize many rows as the trainer would; string rows go through one batched tokenizer call.

    Raises :class:`GradianError` when a chat row meets a tokenizer without a chat template, or the template fails.
    """
    settings = settings or FormatSettings()
    old_eos = tokenizer.eos_token
    if settings.eos_token is not None and settings.eos_token != old_eos:
        tokenizer.eos_token = settings.eos_token  # TRL sets it on the tokenizer (templates may read it); restored below
    try:
        with gc_paused():  # 100k rows of token lists: the collector's rescans cost more than the encoding
            return _format_all(examples, tokenizer, settings)
    finally:
        if tokenizer.eos_token != old_eos:
            tokenizer.eos_token = old_eos


def _format_all(examples: Sequence[Example], tokenizer: Any, settings: FormatSettings) -> list[FormattedExample]:
    end_ids = _end_ids(tokenizer)
    results: list[FormattedExample | None] = [None] * len(examples)
    string_notes: list[str] = []  # decisions every string row shares
    assistant_only = settings.assistant_only or settings.mask == "assistant_only"

    lf_name = _llamafactory_template(tokenizer, settings)
    lf_note = None
    if lf_name is None and settings.trainer == "llamafactory":
        lf_note = (
            f"LLaMA-Factory template {settings.template} is not one Gradian models "
            if settings.template
            else "the LLaMA-Factory run does not record its template (pass --config with its training YAML) and "
            "none was given "
        ) + (
            f"(Gradian models {', '.join(llamafactory.TEMPLATES)}): rows rendered the generic way, ids and masks "
            "may differ from the run's"
        )
        string_notes.append(lf_note)
    elif lf_name is not None:
        for i, ex in enumerate(examples):
            if ex.messages is not None or ex.format == "alpaca":
                results[i] = _format_llamafactory(ex, tokenizer, settings, lf_name)
    chat_idx = [i for i, ex in enumerate(examples) if ex.messages is not None and results[i] is None]
    if chat_idx:
        if chat_template_text(tokenizer) is None:
            ex = examples[chat_idx[0]]
            raise GradianError(
                f"tokenizer {tokenizer_name(tokenizer)} has no chat template, needed for chat rows",
                where=ex.source,
                fix="pass --tokenizer DIR of the chat model you trained (its tokenizer_config.json has chat_template)",
            )
        template, note = _chat_template_choice(tokenizer, assistant_only)
        note = "; ".join(n for n in (note, lf_note) if n) or None
        for i in chat_idx:
            results[i] = _format_chat(examples[i], tokenizer, settings, end_ids, assistant_only, template, note)

    # String rows: prompt/completion (incl. Alpaca, question/answer) and text.
    pc_idx = [i for i, ex in enumerate(examples) if ex.messages is None and ex.text is None and results[i] is None]
    text_idx = [i for i, ex in enumerate(examples) if ex.messages is None and ex.text is not None]
    if assistant_only and (pc_idx or text_idx):
        string_notes.append("assistant-only loss applies to chat rows only (TRL refuses it for other rows)")
    strings = _StringRows(tokenizer, settings, end_ids, string_notes)
    if pc_idx:
        for i, fx in zip(pc_idx, strings.prompt_completion([examples[i] for i in pc_idx]), strict=True):
            results[i] = fx
    if text_idx:
        for i, fx in zip(text_idx, strings.text([examples[i] for i in text_idx]), strict=True):
            results[i] = fx
    for ex, done in zip(examples, results, strict=True):
        if ex.open_end and done is not None:
            _leave_open(done, end_ids)
    return [r for r in results if r is not None]


def _leave_open(fx: FormattedExample, end_ids: set[int]) -> None:
    """An unfinished generated completion (``Example.open_end``) ends on its own last token: the EOS or end of turn
    a template or ``add_eos`` wrote after it (and what follows it, e.g. ChatML's newline) is removed, since the base
    model did not write it there and scoring it would measure the stop, not the reply."""
    labels = [p for p, m in enumerate(fx.loss_mask) if m]
    ends = [p for p in labels[-3:] if fx.input_ids[p] in end_ids]
    if not ends or ends[0] == labels[0]:
        return
    cut = ends[0]
    fx.input_ids, fx.loss_mask = fx.input_ids[:cut], fx.loss_mask[:cut]
    fx.n_label_tokens = sum(fx.loss_mask)
    fx.ends_with_eos = fx.eos_appended = False
    fx.decisions.append("generated completion left open: no end of turn after it (the base model's reply goes on)")


@dataclass
class _StringRows:
    """Formats string rows (prompt/completion and text) as TRL does, EOS included (appended by TRL >= 0.16)."""

    tokenizer: Any
    settings: FormatSettings
    end_ids: set[int]
    notes: list[str]  # decisions every string row shares

    def __post_init__(self) -> None:
        self.eos: str | None = self.tokenizer.eos_token
        self.bos_id: int | None = self.tokenizer.bos_token_id  # read once: a transformers lookup per call

    def prompt_completion(self, rows: Sequence[Example]) -> list[FormattedExample]:
        """The completion starts where the tokens of prompt and of prompt+completion part (TRL)."""
        if self.settings.trainer == "axolotl":
            return [self._axolotl_instruction(ex) for ex in rows]
        prompts = [ex.prompt or "" for ex in rows]
        completions = [self._with_eos(ex.completion or "") for ex in rows]
        p_ids = _encode_texts(self.tokenizer, prompts)
        f_ids = _encode_texts(self.tokenizer, [p + c for p, (c, _) in zip(prompts, completions, strict=True)])
        completion_only = self.settings.mask != "full"
        mask_note = (
            "loss on the completion only (TRL completion_only_loss)"
            if completion_only
            else "loss on every token (completion_only_loss off)"
        )
        out = []
        for k, ex in enumerate(rows):
            pids, ids = p_ids[k], f_ids[k]
            appended = completions[k][1]
            n_p = common_prefix_length(pids, ids)
            mismatch = n_p < len(pids)
            decisions = []
            src = _source_decision(ex)
            if src:
                decisions.append(src)
            decisions += [mask_note, *self.notes, self._eos_decision(appended, "completion")]
            if mismatch:
                decisions.append(
                    f"tokens of the prompt are not a prefix of the tokens of prompt+completion; the completion starts "
                    f"at token {n_p}, where they differ (TRL), not at the prompt's {len(pids)} tokens"
                )
            mask = [False] * n_p + [True] * (len(ids) - n_p) if completion_only else [True] * len(ids)
            out.append(self._finalize(ex, ids, mask, decisions, appended, prefix_mismatch=mismatch))
        return out

    def _axolotl_instruction(self, ex: Example) -> FormattedExample:
        """Axolotl: prompt and response tokenized apart (:func:`gradian.data.axolotl.instruction_ids`)."""
        on_inputs = self.settings.mask == "full"
        ids, mask, appended = axolotl.instruction_ids(
            self.tokenizer, ex.prompt or "", ex.completion or "", self.settings.max_length, on_inputs
        )
        decisions = [d for d in (_source_decision(ex),) if d]
        decisions.append(
            "Axolotl: prompt and response tokenized apart, loss on "
            + ("every token (train_on_inputs)" if on_inputs else "the response only")
        )
        decisions.append("EOS id appended to the response (Axolotl)" if appended else "no EOS appended (Axolotl)")
        return self._finalize(ex, ids, mask, decisions, appended)

    def text(self, rows: Sequence[Example]) -> list[FormattedExample]:
        """Loss on every token."""
        if self.settings.trainer == "axolotl":
            return [self._axolotl_completion(ex) for ex in rows]
        texts = [self._with_eos(ex.text or "") for ex in rows]
        t_ids = _encode_texts(self.tokenizer, [t for t, _ in texts])
        out = []
        for k, ex in enumerate(rows):
            appended = texts[k][1]
            decisions = ["text row: loss on every token", *self.notes, self._eos_decision(appended, "text")]
            ids = t_ids[k]
            out.append(self._finalize(ex, ids, [True] * len(ids), decisions, appended))
        return out

    def _axolotl_completion(self, ex: Example) -> FormattedExample:
        """Axolotl ``type: completion``: the text plus the EOS id, split into pieces of sequence_len tokens."""
        max_len = self.settings.max_length
        ids, appended = axolotl.text_ids(self.tokenizer, ex.text or "", None if max_len is None else max_len * 64)
        mask = [True] * len(ids)
        decisions = ["Axolotl completion row: loss on every token", "EOS id appended" if appended else "no EOS"]
        pieces = -(-len(ids) // max_len) if max_len else 1
        uncut = f"Axolotl splits it into {pieces} samples of at most {max_len} tokens; shown whole, not dropped"
        return self._finalize(ex, ids, mask, decisions, appended, uncut=uncut)

    def _finalize(
        self,
        ex: Example,
        ids: list[int],
        mask: list[bool],
        decisions: list[str],
        eos_appended: bool,
        prefix_mismatch: bool = False,
        uncut: str | None = None,
    ) -> FormattedExample:
        return _finalize(
            ex,
            ids,
            mask,
            self.settings,
            decisions,
            end_ids=self.end_ids,
            bos_id=self.bos_id,
            chat=False,
            eos_appended=eos_appended,
            prefix_mismatch=prefix_mismatch,
            uncut=uncut,
        )

    def _with_eos(self, s: str) -> tuple[str, bool]:
        """``s`` with EOS appended when the settings want it and it is not there yet; and whether it was."""
        eos = self.eos
        if self.settings.add_eos and eos and not s.endswith(eos):
            return s + eos, True
        return s, False

    def _eos_decision(self, appended: bool, what: str) -> str:
        """The decision line for one row's EOS."""
        eos = self.eos
        if appended:
            return f"EOS {eos!r} appended to the {what} (TRL >= 0.16)"
        if self.settings.add_eos and eos is None:
            return "the tokenizer has no EOS token; none appended"
        if not self.settings.add_eos:
            why = self.settings.sources.get("add_eos")
            return f"no EOS appended ({why})" if why else "no EOS appended (add_eos off)"
        return f"the {what} already ends with EOS"


def format_example(ex: Example, tokenizer: Any, settings: FormatSettings | None = None) -> FormattedExample:
    """Tokenize one row as the trainer would (see :func:`format_examples`)."""
    return format_examples([ex], tokenizer, settings)[0]
