"""LLaMA-Factory's supervised encoding (``stage: sft``), checked against LLaMA-Factory 0.9.5's own preprocessing
(tests/fixtures/golden).

LLaMA-Factory does not tokenize a rendered chat template: its ``template`` is a list of slots per role, and each
string slot is tokenized on its own (``add_special_tokens=False``), so a slot boundary is a token boundary. Alpaca rows
become one user turn (``instruction`` and ``input`` joined by a newline) and one assistant turn; ShareGPT/messages rows
must alternate user/assistant after an optional system turn, or the row is dropped. Each (user, assistant) pair is cut
to what is left of ``cutoff_len`` by ``infer_seqlen`` (the longer side gives way first), pairs past the cutoff are
left out, and the user side of every pair is masked unless ``train_on_prompt``. Rows without labels are kept.

Only the templates below are modelled (copied from LLaMA-Factory 0.9.5, Apache-2.0); any other name keeps Gradian's
generic chat-template path, and the decision says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

IGNORE = -100
Slot = str | tuple[str]  # a string (tokenized alone) or ("bos_token",) / ("eos_token",)
BOS: tuple[str] = ("bos_token",)
EOS: tuple[str] = ("eos_token",)


@dataclass(frozen=True)
class Template:
    """One LLaMA-Factory template: the slots of each part, ``{{content}}`` standing for the message."""

    user: tuple[Slot, ...] = ("{{content}}",)
    assistant: tuple[Slot, ...] = ("{{content}}", EOS)
    system: tuple[Slot, ...] = ("{{content}}",)
    prefix: tuple[Slot, ...] = ()
    default_system: str = ""
    stop_words: tuple[str, ...] = ()
    replace_eos: bool = False


_CHATML_USER = "<|im_start|>user\n{{content}}<|im_end|>\n<|im_start|>assistant\n"
_L3_USER = (
    "<|start_header_id|>user<|end_header_id|>\n\n{{content}}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
)
_SMOLLM = Template(  # ChatML's slots without its EOS replacement
    user=(_CHATML_USER,),
    assistant=("{{content}}<|im_end|>\n",),
    system=("<|im_start|>system\n{{content}}<|im_end|>\n",),
    stop_words=("<|im_end|>",),
)
TEMPLATES: dict[str, Template] = {
    "empty": Template(assistant=("{{content}}",)),
    "default": Template(
        user=("Human: {{content}}", EOS, "\nAssistant:"),
        assistant=("{{content}}", EOS, "\n"),
        system=("System: {{content}}", EOS, "\n"),
    ),
    "alpaca": Template(
        user=("### Instruction:\n{{content}}\n\n### Response:\n",),
        assistant=("{{content}}", EOS, "\n\n"),
        default_system="Below is an instruction that describes a task. Write a response that appropriately "
        "completes the request.\n\n",
    ),
    "vicuna": Template(
        user=("USER: {{content}} ASSISTANT:",),
        default_system="A chat between a curious user and an artificial intelligence assistant. The assistant gives "
        "helpful, detailed, and polite answers to the user's questions.",
    ),
    "chatml": Template(
        user=(_CHATML_USER,),
        assistant=("{{content}}<|im_end|>\n",),
        system=("<|im_start|>system\n{{content}}<|im_end|>\n",),
        stop_words=("<|im_end|>", "<|im_start|>"),
        replace_eos=True,
    ),
    "qwen": Template(
        user=(_CHATML_USER,),
        assistant=("{{content}}<|im_end|>\n",),
        system=("<|im_start|>system\n{{content}}<|im_end|>\n",),
        default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
        stop_words=("<|im_end|>",),
        replace_eos=True,
    ),
    "smollm": _SMOLLM,
    "smollm2": replace(_SMOLLM, default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face."),
    "llama3": Template(
        user=(_L3_USER,),
        assistant=("{{content}}<|eot_id|>",),
        system=("<|start_header_id|>system<|end_header_id|>\n\n{{content}}<|eot_id|>",),
        prefix=(BOS,),
        stop_words=("<|eot_id|>", "<|eom_id|>"),
        replace_eos=True,
    ),
    "phi": Template(
        user=("<|user|>\n{{content}}<|end|>\n<|assistant|>\n",),
        assistant=("{{content}}<|end|>\n",),
        system=("<|system|>\n{{content}}<|end|>\n",),
        stop_words=("<|end|>",),
        replace_eos=True,
    ),
}


def infer_seqlen(source_len: int, target_len: int, cutoff_len: int) -> tuple[int, int]:
    """LLaMA-Factory's split of ``cutoff_len`` between a prompt and its response."""
    if target_len * 2 < cutoff_len:
        max_target_len = cutoff_len
    elif source_len * 2 < cutoff_len:
        max_target_len = cutoff_len - source_len
    else:
        max_target_len = int(cutoff_len * (target_len / (source_len + target_len)))
    new_target_len = min(max_target_len, target_len)
    new_source_len = min(max(cutoff_len - new_target_len, 0), source_len)
    return new_source_len, new_target_len


def conversation(row: dict[str, Any], messages: list[dict[str, Any]] | None) -> tuple[str, list[str]] | None:
    """(system, [user, assistant, user, assistant, ...]) as LLaMA-Factory's converters give them; None when it
    drops the row (roles not alternating user/assistant after an optional system turn)."""
    if messages is None:  # Alpaca
        query = [row[k] for k in ("instruction", "input") if row.get(k)]
        return str(row.get("system") or ""), ["\n".join(query), str(row.get("output") or "")]
    system = ""
    if messages and messages[0].get("role") == "system":
        system, messages = str(messages[0].get("content") or ""), messages[1:]
    roles = [m.get("role") for m in messages]
    if len(roles) % 2 or any(r != ("user" if i % 2 == 0 else "assistant") for i, r in enumerate(roles)):
        return None
    return system, [str(m.get("content") or "") for m in messages]


def _ids(tokenizer: Any, slots: Sequence[Slot], content: str, eos_id: int | None) -> list[int]:
    out: list[int] = []
    for slot in slots:
        if isinstance(slot, str):
            text = slot.replace("{{content}}", content, 1)
            if text:
                out += tokenizer.encode(text, add_special_tokens=False)
        elif slot == BOS and tokenizer.bos_token_id is not None:
            out.append(tokenizer.bos_token_id)
        elif slot == EOS and eos_id is not None:
            out.append(eos_id)
    return out


def eos_id(tokenizer: Any, template: Template) -> int | None:
    """The EOS LLaMA-Factory writes: the template's first stop word where it replaces the tokenizer's."""
    if template.replace_eos and template.stop_words:
        return int(tokenizer.convert_tokens_to_ids(template.stop_words[0]))
    return tokenizer.eos_token_id


def encode(
    tokenizer: Any, template: Template, system: str, turns: list[str], cutoff_len: int | None, train_on_prompt: bool
) -> tuple[list[int], list[int], int, bool]:
    """Input ids, labels (-100 masked), the untruncated length and whether a response was cut, as
    ``SupervisedDatasetProcessor`` builds them."""
    eos = eos_id(tokenizer, template)
    system = system or template.default_system
    parts = []
    for i, content in enumerate(turns):
        ids = []
        if i == 0:  # turn 0: prefix + system + query
            ids = _ids(tokenizer, template.prefix, "", eos)
            ids += _ids(tokenizer, template.system, system, eos) if system else []
        ids += _ids(tokenizer, template.user if i % 2 == 0 else template.assistant, content, eos)
        parts.append(ids)
    limit = cutoff_len if cutoff_len is not None else sum(map(len, parts))
    input_ids: list[int] = []
    labels: list[int] = []
    cut = False
    for k in range(0, len(parts), 2):
        if len(input_ids) >= limit:
            cut = True
            break
        n_src, n_tgt = infer_seqlen(len(parts[k]), len(parts[k + 1]), limit - len(input_ids))
        src, tgt = parts[k][:n_src], parts[k + 1][:n_tgt]
        cut = cut or n_tgt < len(parts[k + 1])
        input_ids += src + tgt
        labels += (src if train_on_prompt else [IGNORE] * n_src) + tgt
    return input_ids, labels, sum(map(len, parts)), cut
