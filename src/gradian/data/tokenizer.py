"""Load the tokenizer the trainer used, from a local folder; never runs remote code unless asked."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gradian.errors import GradianError

_GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")


def load_tokenizer(
    name_or_path: str | Path, *, trust_remote_code: bool = False, chat_template: str | Path | None = None
) -> Any:
    """``AutoTokenizer.from_pretrained`` for a local folder (or a model already in the local HF cache).

    ``chat_template`` is a Jinja file (``--chat-template FILE``) that replaces the tokenizer's own template. Nothing
    is downloaded: a name that is not a local folder is only looked up in the local cache.
    """
    import os

    from transformers import AutoTokenizer

    p = Path(name_or_path)
    local = p.exists()
    if local and not p.is_dir():
        raise GradianError(
            "tokenizer path is a file, expected a folder",
            where=str(name_or_path),
            fix="pass the model/tokenizer folder",
        )
    if local and not any((p / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise GradianError(
            "folder has no tokenizer files (tokenizer.json, tokenizer_config.json or tokenizer.model)",
            where=str(name_or_path),
            fix="pass the base model folder, or the adapter folder if the tokenizer was saved with it",
        )
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if not local:
        kwargs["local_files_only"] = True
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        tok = AutoTokenizer.from_pretrained(str(name_or_path), **kwargs)
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        if not local:
            raise GradianError(
                "tokenizer not found locally (gradian does not download)",
                where=str(name_or_path),
                fix="pass the local folder of the base model",
            ) from None
        if "trust_remote_code" in str(e):
            raise GradianError(
                "tokenizer needs custom code from the model folder",
                where=str(name_or_path),
                fix="re-run with --trust-remote-code if you trust that folder",
            ) from None
        raise GradianError(
            f"cannot load tokenizer ({first[:200]})", where=str(name_or_path), fix="check the tokenizer files"
        ) from None
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old
    if chat_template is not None:
        set_chat_template(tok, chat_template)
    return tok


def set_chat_template(tokenizer: Any, chat_template: str | Path) -> None:
    """Replace the tokenizer's chat template with the one in a ``.jinja`` file (or a ``tokenizer_config.json``)."""
    p = Path(chat_template)
    if not p.is_file():
        raise GradianError("chat template file not found", where=str(chat_template), fix="check the path")
    try:
        text = p.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise GradianError(f"cannot read chat template ({e})", where=str(chat_template), fix="check the file") from None
    if p.suffix == ".json":
        try:
            text = json.loads(text)["chat_template"]
        except (ValueError, KeyError, TypeError):
            raise GradianError(
                "JSON file has no 'chat_template' string", where=str(chat_template), fix="pass a .jinja template file"
            ) from None
    tokenizer.chat_template = text


def chat_template_text(tokenizer: Any) -> str | None:
    """The tokenizer's default chat template as text, or None when it has none."""
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, dict):
        tpl = tpl.get("default") or next(iter(tpl.values()), None)
    return tpl or None


def has_generation_markers(tokenizer: Any) -> bool:
    """Whether the chat template marks assistant output with ``{% generation %}`` (needed for assistant-only loss)."""
    tpl = chat_template_text(tokenizer)
    return bool(tpl and _GENERATION_RE.search(tpl))


def tokenizer_name(tokenizer: Any) -> str:
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
