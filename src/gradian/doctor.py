"""`gradian doctor`: is this machine, and are these inputs, ready for a run?

Checks the dependency window, the device, free disk for the gradient store and, when inputs are given, that the
adapter fits the base (names and shapes), that the tokenizer has what training needed, and that data files parse.
Each problem names its fix. Exit code 1 when something blocks a run.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import typer

from gradian.errors import GradianError

# The supported dependency window: (minimum, newest tested). docs/reference/versions.md is generated from it.
WINDOW: dict[str, tuple[str, str]] = {
    "torch": ("2.3", "2.13.0"),
    "transformers": ("4.45", "5.24.0"),
    "peft": ("0.13", "0.21.2"),
    "safetensors": ("0.4", "0.8.0"),
    "numpy": ("1.24", "2.4.6"),
    "tokenizers": ("0.19", "0.23.3"),
    "py3langid": ("0.4", "0.4.0"),  # diagnose D134 language_mix (offline language ID; an .npz model, no pickle)
}
MIN_FREE_DISK_GB = 1.0


@dataclass
class Check:
    name: str
    status: str  # "ok" | "warn" | "error" | "skip"
    detail: str
    fix: str = ""


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


def check_versions() -> list[Check]:
    out = [
        Check(
            "python",
            "ok" if sys.version_info >= (3, 10) else "error",
            platform.python_version(),
            "" if sys.version_info >= (3, 10) else "use Python 3.10 or newer",
        )
    ]
    for pkg, (minimum, tested) in WINDOW.items():
        try:
            have = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out.append(Check(pkg, "error", "not installed", f"pip install '{pkg}>={minimum}'"))
            continue
        if _version_tuple(have) < _version_tuple(minimum):
            out.append(Check(pkg, "error", f"{have} < minimum {minimum}", f"pip install -U '{pkg}>={minimum}'"))
        elif _version_tuple(have) > _version_tuple(tested):
            out.append(Check(pkg, "warn", f"{have} is newer than the newest tested ({tested})", ""))
        else:
            out.append(Check(pkg, "ok", f"{have} (window {minimum} – {tested})"))
    return out


def check_device() -> list[Check]:
    import torch

    if torch.cuda.is_available():
        out = []
        for i in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(i)
            bf16 = torch.cuda.is_bf16_supported()
            out.append(
                Check(
                    f"device cuda:{i}",
                    "ok",
                    f"{torch.cuda.get_device_name(i)}, {free / 2**30:.1f} of {total / 2**30:.1f} GiB free, "
                    f"bf16 {'yes' if bf16 else 'no (fp32 will be used)'}",
                )
            )
        return out
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return [Check("device", "ok", "Apple MPS")]
    return [
        Check(
            "device",
            "ok",
            f"CPU only ({torch.get_num_threads()} threads, fp32); fine for small models, slow for 1B+",
        )
    ]


def check_disk(out_dir: Path) -> Check:
    probe = out_dir
    if probe.exists() and not probe.is_dir():
        return Check("disk", "error", f"{probe} is a file; the gradient store needs a folder", "pass another --out")
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return Check("disk", "error", f"{out_dir} is under the file {probe}", "pass another --out")
    free_gb = shutil.disk_usage(probe).free / 2**30
    if free_gb < MIN_FREE_DISK_GB:
        return Check("disk", "error", f"{free_gb:.1f} GiB free at {probe}", "free disk space or pass another --out")
    return Check("disk", "ok", f"{free_gb:.1f} GiB free at {probe} for the gradient store")


def check_adapter_vs_base(adapter_dir: Path, weights: Path | None, base: str, trust_remote_code: bool) -> list[Check]:
    """Does every LoRA tensor name a Linear in the base, with matching shapes? Builds the base on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from gradian.attribute.loading import adapter_misfits, adapter_shapes

    try:
        config = AutoConfig.from_pretrained(base, trust_remote_code=trust_remote_code)
    except Exception as exc:  # transformers raises several types for a missing/invalid model
        return [Check("base model", "error", f"{base}: {str(exc).splitlines()[0][:160]}", "pass --base DIR")]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    modules = dict(model.named_modules())
    bad_weights = _unreadable_weights(base)
    if bad_weights:
        return [Check("base model", "error", bad_weights, "copy or download the base model again")]
    out = [
        Check(
            "base model", "ok", f"{base} ({config.model_type}, {sum(p.numel() for p in model.parameters()):,} params)"
        )
    ]
    if weights is None:
        out.append(
            Check("adapter weights", "error", f"no adapter_model.safetensors in {adapter_dir}", "pass --adapter DIR")
        )
        return out
    n, bad = adapter_misfits(adapter_shapes(weights), modules)
    if bad:
        out.append(
            Check(
                "adapter ↔ base",
                "error",
                f"{len(bad)} LoRA tensors do not fit {base}: {bad[0]}",
                "pass the base model the adapter was trained on (adapter_config.json: base_model_name_or_path)",
            )
        )
    else:
        out.append(Check("adapter ↔ base", "ok", f"{n} LoRA tensors match the base's Linear shapes"))
    return out


def _unreadable_weights(base: str) -> str | None:
    """A local base folder's safetensors weights whose header or size is broken (truncated copy), else None."""
    from gradian.attribute.loading import adapter_shapes

    p = Path(base)
    for f in sorted(p.glob("*.safetensors")) if p.is_dir() else []:
        try:
            adapter_shapes(f)
        except GradianError as err:
            return err.one_line()
    return None


def check_vocab_fits(tokenizer_path: str, base: str, trust_remote_code: bool) -> list[Check]:
    """A tokenizer with more tokens than the base embeds belongs to another model (its ids overflow the embedding)."""
    from transformers import AutoConfig

    from gradian.data import load_tokenizer

    try:
        n_emb = int(getattr(AutoConfig.from_pretrained(base, trust_remote_code=trust_remote_code), "vocab_size", 0))
    except Exception:  # the base check reports an unloadable base
        return []
    n_tok = len(load_tokenizer(tokenizer_path))
    if n_emb and n_tok > n_emb:
        return [
            Check(
                "tokenizer ↔ base",
                "error",
                f"{tokenizer_path} has {n_tok:,} tokens, the base {base} embeds {n_emb:,}: another model's tokenizer",
                "pass --tokenizer with the tokenizer the fine-tune used",
            )
        ]
    return []


def _pad_is_eos_check(setup: Any) -> Check:
    """pad == EOS only hurts where the collator masks padding by token id (transformers'
    DataCollatorForLanguageModeling, TRL < 0.16.1); TRL >= 0.16.1 labels EOS and pads the labels with -100 by
    position."""
    from gradian.run.versions import installed_version, parse_version

    fw = (getattr(setup, "framework", None) or "").lower()
    recorded = (getattr(setup, "versions", None) or {}).get("trl")
    trl = recorded or installed_version("trl")
    v = parse_version(trl)
    fix = "set a pad token distinct from EOS (e.g. add '<pad>'), or train with TRL >= 0.16.1, which labels EOS"
    if fw in ("trl", "") and v is not None and v >= (0, 16, 1):
        how = "recorded by the run" if recorded else "installed here"
        return Check("tokenizer pad", "ok", f"pad_token == eos_token; TRL {trl} ({how}) labels EOS and pads labels "
                     "with -100 by position, so EOS is trained")  # fmt: skip
    if fw == "transformers" or (v is not None and v < (0, 16, 1)):
        return Check("tokenizer pad", "warn", "pad_token == eos_token and the collator masks padding by id: EOS "
                     "never gets a label", fix)  # fmt: skip
    return Check("tokenizer pad", "warn", "pad_token == eos_token: EOS gets no label if your collator masks "
                 "padding by id (gradian diagnose C213 checks it against the run)", fix)  # fmt: skip


def check_tokenizer(path: str, setup: Any = None) -> list[Check]:
    from gradian.data import load_tokenizer

    tok = load_tokenizer(path)
    out = [Check("tokenizer", "ok", f"{path} ({len(tok)} tokens)")]
    if tok.eos_token is None:
        out.append(Check("tokenizer EOS", "error", "no eos_token", "set eos_token in tokenizer_config.json"))
    if tok.pad_token is None:
        out.append(Check("tokenizer pad", "warn", "no pad_token (Gradian pads with EOS and masks it)", ""))
    elif tok.pad_token_id == tok.eos_token_id:
        out.append(_pad_is_eos_check(setup))
    has_template = bool(getattr(tok, "chat_template", None))
    out.append(
        Check(
            "chat template",
            "ok" if has_template else "skip",
            "present" if has_template else "none: messages rows cannot be formatted with this tokenizer",
        )
    )
    return out


def check_data(label: str, path: Path, tokenizer_path: str | None) -> list[Check]:
    from gradian.data import load_examples, load_tokenizer

    examples = load_examples(path, prompt_only=label == "eval")
    formats = sorted({e.format for e in examples})
    n_prompts = sum(e.prompt_only for e in examples)
    gen = f"; {n_prompts} prompt-only rows, completed by the base model" if n_prompts else ""
    out = [Check(f"{label} data", "ok", f"{path}: {len(examples)} rows ({', '.join(formats)}){gen}")]
    n_chat = sum(e.messages is not None for e in examples)
    if n_chat and tokenizer_path and not getattr(load_tokenizer(tokenizer_path), "chat_template", None):
        out.append(
            Check(
                f"{label} data × tokenizer",
                "error",
                f"{n_chat} chat rows in {path.name}, but the tokenizer {tokenizer_path} has no chat template",
                "pass --tokenizer DIR of the chat model you trained (its tokenizer_config.json has chat_template)",
            )
        )
    return out


def run_doctor(
    *,
    run: Path | None = None,
    base: str | None = None,
    adapter: Path | None = None,
    train: Path | None = None,
    eval_path: Path | None = None,
    tokenizer: str | None = None,
    out: Path = Path("."),
    trust_remote_code: bool = False,
) -> list[Check]:
    checks = check_versions() + check_device() + [check_disk(out)]
    if not any([run, base, adapter, train, eval_path, tokenizer]):
        return checks
    from gradian.run import discover

    art = discover(run, adapter=adapter, base=base, train=train, eval=eval_path, tokenizer=tokenizer)

    def guarded(label: str, fn, *args) -> list[Check]:
        try:
            res = fn(*args)
        except GradianError as err:
            return [Check(label, "error", err.one_line(), err.fix or "")]
        return res if isinstance(res, list) else [res]

    if art.adapter_dir is not None:
        if art.base is None:
            checks.append(Check("base model", "error", "unknown", "pass --base (adapter_config.json names none)"))
        else:
            checks += guarded(
                "adapter ↔ base",
                check_adapter_vs_base,
                art.adapter_dir,
                art.adapter_weights,
                art.base,
                trust_remote_code,
            )
    tok_path = str(art.tokenizer_dir) if art.tokenizer_dir else art.base
    if tok_path:
        from gradian.run import load_setup

        try:
            setup = load_setup(art)
        except GradianError:
            setup = None
        checks += guarded("tokenizer", check_tokenizer, tok_path, setup)
        if art.base and tok_path != art.base:
            checks += guarded("tokenizer ↔ base", check_vocab_fits, tok_path, art.base, trust_remote_code)
    for label, path in (("train", art.train_file), ("eval", art.eval_file)):
        if path is not None:
            checks += guarded(f"{label} data", check_data, label, path, tok_path)
    checks += [Check("run", "skip", note) for note in art.notes]
    return checks


def render(checks: list[Check]) -> None:
    from rich.table import Table

    from gradian.console import make_console

    style = {"ok": "green", "warn": "yellow", "error": "bold red", "skip": "dim"}
    table = Table(title="gradian doctor", show_lines=False)
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")
    for c in checks:
        table.add_row(c.name, f"[{style[c.status]}]{c.status}[/]", c.detail, c.fix)
    make_console().print(table)


def doctor_command(
    run: Path | None = typer.Option(None, "--run", help="HF output dir or checkpoint-* dir of the fine-tune."),
    base: str | None = typer.Option(None, "--base", help="Base model dir (default: from adapter_config.json)."),
    adapter: Path | None = typer.Option(None, "--adapter", help="PEFT adapter dir (overrides --run discovery)."),
    train: Path | None = typer.Option(None, "--train", help="Training data file."),
    eval_path: Path | None = typer.Option(None, "--eval", help="Eval data file."),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="Tokenizer dir (default: run dir, then base)."),
    out: Path = typer.Option(Path("."), "--out", help="Where the gradient store will go (free-disk check)."),
    fmt: str = typer.Option("table", "--format", help="table or json."),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code", help="Allow the base's custom code."),
) -> None:
    """Check the environment (versions, device, disk) and, when given, the inputs of a run."""
    if fmt not in ("table", "json"):
        raise GradianError(f"unknown --format {fmt!r}", where="--format", fix="use table or json")
    checks = run_doctor(
        run=run,
        base=base,
        adapter=adapter,
        train=train,
        eval_path=eval_path,
        tokenizer=tokenizer,
        out=out,
        trust_remote_code=trust_remote_code,
    )
    if fmt == "json":
        typer.echo(json.dumps([asdict(c) for c in checks], indent=2))
    else:
        render(checks)
    if any(c.status == "error" for c in checks):
        raise typer.Exit(1)
