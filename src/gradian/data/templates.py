"""The chat template TRL's SFTTrainer swaps in for ``assistant_only_loss`` when the tokenizer's has no
``{% generation %}`` markers.

TRL (``trl.chat_template_utils.get_training_chat_template``) recognises a few model families by their exact template
text (Qwen2.5, Qwen3, Llama-3, Gemma, Phi-3 and more) and tokenizes with a training variant that marks the assistant
output; any other template without markers makes TRL refuse the run. With TRL installed, Gradian asks TRL itself;
without it, it uses the copies of five families in ``gradian/data/chat_templates`` (TRL 1.16.0, Apache-2.0, see
NOTICE.md there).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gradian.data.tokenizer import chat_template_text

_DIR = Path(__file__).parent / "chat_templates"
VENDORED = ("qwen2_5", "qwen3", "llama3", "gemma", "phi3")
VENDORED_FROM = "TRL 1.16.0"
# Tokens that end a turn in the common chat templates (ChatML, Llama 3, Gemma, Phi-3, ...): a turn's last label.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "<|eom_id|>")


@dataclass(frozen=True)
class TrainingTemplate:
    """What TRL tokenizes with under ``assistant_only_loss``: ``template`` (None: TRL refuses the run) and why."""

    template: str | None
    how: str


@cache
def _vendored() -> dict[str, str]:
    """Original template text -> training template text, for the copied families."""
    out = {}
    for name in VENDORED:
        out[(_DIR / f"{name}.jinja").read_text("utf-8")] = (_DIR / f"{name}_training.jinja").read_text("utf-8")
    return out


def _installed_trl() -> tuple[Any, str] | None:
    try:
        from importlib.metadata import version

        from trl.chat_template_utils import get_training_chat_template
    except Exception:  # noqa: BLE001 - TRL absent or broken: use the copies
        return None
    return get_training_chat_template, version("trl")


def training_chat_template(tokenizer: Any) -> TrainingTemplate:
    """The template TRL tokenizes chat rows with for ``assistant_only_loss=True`` when the tokenizer's own template
    has no generation markers."""
    text = chat_template_text(tokenizer)
    if text is None:
        return TrainingTemplate(None, "the tokenizer has no chat template")
    trl = _installed_trl()
    if trl is not None:
        get, version = trl
        try:
            patched = get(tokenizer)
        except ValueError:
            return TrainingTemplate(
                None, f"TRL {version} has no training variant of this chat template and refuses assistant_only_loss"
            )
        except Exception as e:  # noqa: BLE001 - a TRL internal failing on an odd tokenizer: fall back to the copies
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
            trl = None
            note = f" (TRL's own lookup failed: {first})"
        else:
            if patched is None:
                return TrainingTemplate(None, f"TRL {version} uses the tokenizer's own template")
            return TrainingTemplate(patched, f"the training variant TRL {version} swaps in for this chat template")
    else:
        note = ""
    patched = _vendored().get(text)
    if patched is None:
        return TrainingTemplate(
            None, f"no training variant of this chat template (TRL refuses assistant_only_loss with it){note}"
        )
    return TrainingTemplate(patched, f"the training variant {VENDORED_FROM} swaps in for this chat template{note}")
