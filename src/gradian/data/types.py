"""The row types every layer shares: a loaded training/eval row, and the row as the trainer saw it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gradian.options.train import TRL_MAX_LENGTH

RowFormat = Literal["prompt_completion", "messages", "text", "alpaca", "sharegpt"]
MaskMode = Literal["completion_only", "assistant_only", "full"]
TruncationMode = Literal["keep_start", "keep_end"]
SharegptRoles = Literal["keep", "map"]
Trainer = Literal["trl", "axolotl", "llamafactory"]


@dataclass
class Example:
    """One row of a train or eval file, normalized but not tokenized.

    Exactly one representation is filled in: ``prompt``/``completion`` (prompt/completion and Alpaca rows; Alpaca is
    rendered with its standard template), ``messages`` (chat rows and ShareGPT, as ``{"role", "content"}`` dicts with
    roles system/user/assistant/tool), or ``text``. For a conversational prompt/completion row, ``messages`` holds the
    whole conversation and ``n_prompt_messages`` how many of them are the prompt.

    ``prompt_only``: an eval row read with ``prompt_only=True`` that has a prompt and no completion (a prompt/completion
    or Alpaca row without one, or messages ending in a user turn); ``gradian attribute`` has the base model write it.

    ``open_end``: the completion written for it stops where the base model's reply goes on (cut where the fine-tune
    departs, or at ``max_new_tokens``), so it is formatted without the EOS or end of turn a finished reply carries.
    """

    index: int  # 0-based position in its source file
    source: str  # the file it came from
    format: RowFormat
    id: str | None = None
    prompt: str | None = None
    completion: str | None = None
    messages: list[dict[str, Any]] | None = None
    n_prompt_messages: int | None = None
    text: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    prompt_only: bool = False
    open_end: bool = False  # a generated completion the base model had not finished: scored without an end of turn

    def plain_text(self) -> str:
        """All of the row's text in one string (for overlap, duplicates, labels and display)."""
        if self.text is not None:
            return self.text
        if self.messages is not None:
            return "\n".join(str(m.get("content") or "") for m in self.messages)
        return (self.prompt or "") + (self.completion or "")

    def target_text(self) -> str:
        """The part the loss is meant for: completion, assistant turns, or the whole text."""
        if self.text is not None:
            return self.text
        if self.messages is not None:
            return "\n".join(self.assistant_turns())
        return self.completion or ""

    def assistant_turns(self) -> list[str]:
        """The contents of a conversation's assistant turns after its prompt messages (none for other rows)."""
        start = self.n_prompt_messages or 0
        return [str(m.get("content") or "") for m in (self.messages or [])[start:] if m.get("role") == "assistant"]


@dataclass
class FormatSettings:
    """How the user's trainer turned rows into tokens. Defaults follow TRL >= 0.16 SFTTrainer."""

    max_length: int | None = TRL_MAX_LENGTH  # None: no truncation
    mask: MaskMode = "completion_only"  # for prompt/completion rows; text rows always get full loss
    assistant_only: bool = False  # for messages rows: loss only on assistant turns (TRL assistant_only_loss)
    add_eos: bool = True  # append EOS when the formatted row does not end with it (TRL >= 0.16)
    drop_long: bool = False  # drop over-long rows instead of truncating them (Axolotl)
    truncation_mode: TruncationMode = "keep_start"  # TRL truncation_mode: keep the first or the last max_length tokens
    drop_unlabeled: bool = True  # drop rows left with no label token after truncation (TRL, Axolotl)
    text_field: str = "text"  # the column of language-modeling rows (TRL dataset_text_field)
    eos_token: str | None = None  # the EOS appended instead of the tokenizer's (TRL SFTConfig.eos_token)
    sharegpt_roles: SharegptRoles = "keep"  # ShareGPT "from" values: kept as roles (TRL) or mapped to user/assistant
    trainer: Trainer = "trl"  # whose tokenization rules apply where trainers differ (gradian.data.axolotl, ...)
    template: str | None = None  # LLaMA-Factory's ``template`` name (gradian.data.llamafactory)
    packing: str | None = None  # TRL packing_strategy when packing ("bfd", "bfd_split", "wrapped"); None: no packing
    sources: dict[str, str] = field(default_factory=dict)  # setting -> where its value came from


@dataclass
class FormattedExample:
    """A row tokenized exactly as the trainer would, with every formatting decision recorded."""

    index: int
    input_ids: list[int]
    loss_mask: list[bool]  # per position of input_ids: True where that token is a label (HF labels != -100)
    n_tokens_before_truncation: int
    n_prompt_tokens: int  # tokens before the first label token (after truncation)
    n_label_tokens: int
    truncated: bool = False
    cut_in_completion: bool = False  # the truncation removed label tokens (the end of the completion)
    dropped: bool = False  # the trainer drops this row (Axolotl over-long rows; no label left after truncation)
    eos_appended: bool = False
    ends_with_eos: bool = False  # the last label token is EOS (or the template's end-of-turn)
    prefix_mismatch: bool = False  # tokens(prompt) is not a prefix of tokens(prompt + completion)
    decisions: list[str] = field(default_factory=list)  # human-readable record of what was done

    def labels(self) -> list[int]:
        """HF-style labels: the token id where it counts toward the loss, -100 elsewhere."""
        return [t if m else -100 for t, m in zip(self.input_ids, self.loss_mask, strict=True)]
