"""Detect each raw row's format and normalize it into an :class:`Example`.

Accepted row formats (the keys a row must have):

- ``prompt_completion``: ``prompt`` + ``completion`` strings (TRL standard prompt-completion).
- ``conversational_prompt_completion``: ``prompt`` + ``completion`` lists of messages (TRL conversational
  prompt-completion); stored as ``messages`` with ``n_prompt_messages``.
- ``messages``: ``messages`` (or ``conversations``) list of ``{"role", "content"}`` (system/user/assistant/tool).
- ``sharegpt``: ``conversations`` list of ``{"from", "value"}``; human->user, gpt->assistant, system->system,
  tool/function/observation->tool, function_call->assistant (LLaMA-Factory), user/assistant kept.
- ``alpaca``: ``instruction`` + ``output`` (+ optional ``input``), rendered with the Stanford Alpaca / Axolotl
  template into prompt/completion; ``response`` in place of ``output`` is GPTeacher's layout (Axolotl's
  ``type: gpteacher``, the same template).
- ``question_answer``: ``question`` + ``answer`` (GSM8K style), mapped to prompt=question, completion=answer
  with no template (the file's own text is what a TRL prompt/completion export of it would contain).
- ``text``: ``text`` string (language modeling, full loss); another column with ``text_field`` (TRL
  ``dataset_text_field``), checked after the prompt/completion and chat keys, as TRL does.

A *layout* is the finer name above; ``Example.format`` is the coarser :data:`RowFormat`. One file must use one
layout; a row with another layout is a problem (mixed formats).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gradian.data.types import Example, RowFormat

ALPACA_PROMPT_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
)
ALPACA_PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:\n"
)

ROLES = ("system", "user", "assistant", "tool")
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "function_call": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
}
ID_KEYS = ("id", "_id", "uid")

ACCEPTED_FORMATS = (
    "prompt+completion (strings or lists of messages), messages (role/content), "
    "conversations (role/content or ShareGPT from/value), text, instruction+output (Alpaca), question+answer"
)
# Column names that identify a known format (for CSV/Parquet headers).
FORMAT_KEYS = frozenset(
    {"prompt", "completion", "messages", "conversations", "text", "instruction", "output", "question", "answer"}
)

LAYOUT_FORMAT: dict[str, RowFormat] = {
    "prompt_completion": "prompt_completion",
    "conversational_prompt_completion": "prompt_completion",
    "question_answer": "prompt_completion",
    "alpaca": "alpaca",
    "messages": "messages",
    "sharegpt": "sharegpt",
    "text": "text",
}


@dataclass
class RowProblem:
    """A row that could not be loaded: its 0-based index, the key at fault (None: the whole row) and why.

    ``where`` names file and row (``train.jsonl line 7``), ``fix`` what to do; ``one_line()`` renders it like a
    :class:`~gradian.errors.GradianError`.
    """

    index: int
    key: str | None
    message: str
    where: str = ""
    fix: str | None = None

    def one_line(self) -> str:
        from gradian.errors import GradianError

        return GradianError(self.message, where=self.where or None, fix=self.fix).one_line()

    def to_error(self):
        from gradian.errors import GradianError

        return GradianError(self.message, where=self.where or None, fix=self.fix)


class RowError(Exception):
    """Raised by :func:`normalize_row`; the reader adds file and row and turns it into a RowProblem/GradianError."""

    def __init__(self, key: str | None, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.message = message
        self.fix = fix


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def detect_layout(raw: dict[str, Any], text_field: str = "text") -> str:
    """The row's layout name (see module docstring), from its keys alone; raises RowError when none fits."""
    if "messages" in raw:
        return "messages"
    if "conversations" in raw:
        conv = raw["conversations"]
        if isinstance(conv, list) and conv and isinstance(conv[0], dict) and ("from" in conv[0] or "value" in conv[0]):
            return "sharegpt"
        return "messages"
    if "prompt" in raw or "completion" in raw:
        p, c = raw.get("prompt"), raw.get("completion")
        if isinstance(p, list) or isinstance(c, list):
            return "conversational_prompt_completion"
        return "prompt_completion"
    if text_field != "text" and text_field in raw:
        return "text"
    if "instruction" in raw or "output" in raw:
        return "alpaca"
    if "question" in raw and "answer" in raw:
        return "question_answer"
    if "text" in raw:
        return "text"
    keys = ", ".join(repr(k) for k in raw) or "none"
    fix = f"use one of: {ACCEPTED_FORMATS}"
    if text_field != "text":
        fix += f" (or the text column '{text_field}' the config names in dataset_text_field)"
    raise RowError(None, f"unknown row format (keys: {keys})", fix)


def _require_str(raw: dict[str, Any], key: str, layout_desc: str, *, optional: bool = False) -> str:
    if key not in raw or (optional and raw[key] is None):
        if optional:
            return ""
        raise RowError(key, f"{layout_desc} row without '{key}'", f"add a '{key}' string to every {layout_desc} row")
    value = raw[key]
    if not isinstance(value, str):
        raise RowError(
            key,
            f"'{key}' is {_type_name(value)}, expected a string",
            f"make '{key}' a string (quote numbers, join lists)",
        )
    return value


def _check_messages(value: Any, key: str, *, sharegpt: bool = False) -> list[dict[str, Any]]:
    """Validate a list of messages and return normalized ``{"role", "content", ...}`` dicts."""
    shape = '{"from", "value"}' if sharegpt else '{"role", "content"}'
    if not isinstance(value, list):
        raise RowError(
            key, f"'{key}' is {_type_name(value)}, expected a list of {shape} objects", f"make '{key}' a list"
        )
    if not value:
        raise RowError(key, f"'{key}' is an empty list", f"give every row at least one {shape} message")
    out: list[dict[str, Any]] = []
    role_key, content_key = ("from", "value") if sharegpt else ("role", "content")
    for i, msg in enumerate(value):
        at = f"'{key}'[{i}]"
        if not isinstance(msg, dict):
            raise RowError(key, f"{at} is {_type_name(msg)}, expected a {shape} object", f"make each message a {shape}")
        if role_key not in msg or msg[role_key] is None:
            raise RowError(key, f"{at} has no '{role_key}'", f"give every message a '{role_key}'")
        role = msg[role_key]
        if sharegpt:
            if role not in SHAREGPT_ROLES:
                raise RowError(
                    key,
                    f"{at} has unknown 'from' value {role!r}",
                    "use human, gpt, system, tool, function, function_call or observation",
                )
            role = SHAREGPT_ROLES[role]
        elif role not in ROLES:
            raise RowError(key, f"{at} has unknown role {role!r}", "use one of system, user, assistant, tool")
        has_tool_calls = bool(msg.get("tool_calls"))
        if content_key not in msg:
            raise RowError(key, f"{at} has no '{content_key}'", f"give every message a '{content_key}' string")
        if msg[content_key] is None and not has_tool_calls:
            raise RowError(
                key,
                f"{at} '{content_key}' is null",
                f"give every message a '{content_key}' string"
                + ("" if sharegpt else " (null is allowed only with tool_calls)"),
            )
        content = msg[content_key]
        if content is not None and not isinstance(content, str):
            raise RowError(
                key,
                f"{at} '{content_key}' is {_type_name(content)}, expected a string",
                f"make every '{content_key}' a string",
            )
        new: dict[str, Any] = {"role": role, "content": content}
        if not sharegpt:
            # Parquet/Arrow fill missing struct fields with None; TRL drops them (remove_none_values), so do we.
            for k, v in msg.items():
                if k not in ("role", "content") and v is not None:
                    new[k] = v
        out.append(new)
    return out


def _row_id(raw: dict[str, Any]) -> str | None:
    for k in ID_KEYS:
        if k in raw and raw[k] is not None:
            return str(raw[k])
    return None


def _no_completion(raw: dict[str, Any], key: str) -> bool:
    return raw.get(key) is None


def normalize_row(
    raw: Any, *, index: int, source: str, prompt_only: bool = False, text_field: str = "text"
) -> tuple[Example, str]:
    """Turn one raw row into an :class:`Example`; returns it with its layout name. Raises :class:`RowError`.

    ``prompt_only`` (eval files): a row with a prompt and no completion is accepted and marked ``prompt_only``
    (prompt/completion or Alpaca without the completion, messages or ShareGPT ending in a user turn).
    ``text_field``: the column of language-modeling rows (TRL ``dataset_text_field``)."""
    if not isinstance(raw, dict):
        raise RowError(None, f"row is {_type_name(raw)}, expected a JSON object", "write one JSON object per row")
    layout = detect_layout(raw, text_field)
    ex = Example(index=index, source=source, format=LAYOUT_FORMAT[layout], id=_row_id(raw), raw=raw)
    if layout == "prompt_completion":
        ex.prompt = _require_str(raw, "prompt", "prompt/completion")
        if prompt_only and _no_completion(raw, "completion"):
            ex.prompt_only = True
        else:
            ex.completion = _require_str(raw, "completion", "prompt/completion")
    elif layout == "conversational_prompt_completion" and prompt_only and _no_completion(raw, "completion"):
        ex.messages = _check_messages(raw.get("prompt"), "prompt")
        ex.n_prompt_messages = len(ex.messages)
        ex.prompt_only = True
    elif layout == "conversational_prompt_completion":
        for key in ("prompt", "completion"):
            if key not in raw:
                raise RowError(
                    key, f"prompt/completion row without '{key}'", f"add a '{key}' list of messages to every row"
                )
            if not isinstance(raw[key], list):
                raise RowError(
                    key,
                    f"'{key}' is {_type_name(raw[key])} but the other half is a list of messages",
                    "make both 'prompt' and 'completion' strings, or both lists of messages",
                )
        prompt = _check_messages(raw["prompt"], "prompt")
        completion = _check_messages(raw["completion"], "completion")
        ex.messages = prompt + completion
        ex.n_prompt_messages = len(prompt)
    elif layout == "messages":
        key = "messages" if "messages" in raw else "conversations"
        ex.messages = _check_messages(raw[key], key)
    elif layout == "sharegpt":
        ex.messages = _check_messages(raw["conversations"], "conversations", sharegpt=True)
    elif layout == "alpaca":
        instruction = _require_str(raw, "instruction", "Alpaca")
        out_key = "response" if "output" not in raw and "response" in raw else "output"  # GPTeacher's name for it
        ex.prompt_only = prompt_only and _no_completion(raw, out_key)
        output = "" if ex.prompt_only else _require_str(raw, out_key, "Alpaca")
        inp = _require_str(raw, "input", "Alpaca", optional=True)
        template = ALPACA_PROMPT_INPUT if inp else ALPACA_PROMPT_NO_INPUT
        ex.prompt = template.format(instruction=instruction, input=inp)
        ex.completion = None if ex.prompt_only else output
    elif layout == "question_answer":
        ex.prompt = _require_str(raw, "question", "question/answer")
        ex.completion = _require_str(raw, "answer", "question/answer")
    else:  # text
        ex.text = _require_str(raw, text_field if text_field in raw else "text", "text")
    if prompt_only and ex.messages is not None and not ex.prompt_only and ex.messages[-1]["role"] == "user":
        ex.prompt_only = True  # a conversation ending in a user turn: the assistant's answer is to be generated
        ex.n_prompt_messages = len(ex.messages)
    return ex, layout
