"""Golden fixtures from LLaMA-Factory's real preprocessing: run in a venv with LLaMA-Factory installed (see
docs/how-to/trainers.md), with bench/frameworks/stubs on the path (a torchaudio stand-in; the text path never calls it).

    PYTHONPATH=bench/frameworks/stubs VENV/bin/python bench/frameworks/make_golden_llamafactory.py --smollm2 DIR

For each case (dataset format x template x train_on_prompt x cutoff_len) every row goes alone through LLaMA-Factory's
own pipeline for ``stage: sft``: ``get_train_args``, ``load_tokenizer``, ``get_template_and_fix_tokenizer`` and
``get_dataset`` (its converter, template encoding, truncation and masking). A row that comes out as no sample is
recorded as dropped. The chat template LLaMA-Factory leaves on the tokenizer (what it saves into the run's output dir)
is recorded too, with the EOS and the stop words it adds: Gradian reads that tokenizer from a real run. Writes
tests/fixtures/golden/llamafactory_<version>_preprocess.json.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from golden_rows import (  # noqa: E402
    OUT,
    STORIES,
    alpaca_rows,
    chat_rows,
    fixture_doc,
    golden_args,
    merge_cases,
    sharegpt_rows,
    write_fixture,
)

MESSAGES_INFO = {
    "formatting": "sharegpt",
    "columns": {"messages": "messages"},
    "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
             "system_tag": "system"},
}  # fmt: skip
SHAREGPT_INFO = {"formatting": "sharegpt", "columns": {"messages": "conversations"}}
# Two user turns in a row: LLaMA-Factory skips the row ("Invalid role tag").
BROKEN = {"conversations": [{"from": "human", "value": "Hi"}, {"from": "human", "value": "Hello?"},
                            {"from": "gpt", "value": "Hi."}]}  # fmt: skip
ALPACA_INFO = {"columns": {"prompt": "instruction", "query": "input", "response": "output"}}


def cases() -> list[dict[str, Any]]:
    out = []
    for template in ("default", "alpaca"):
        for on_prompt in (False, True):
            out.append({"name": f"alpaca_{template}" + ("_train_on_prompt" if on_prompt else ""),
                        "tokenizer": "stories260K", "rows": alpaca_rows(), "dataset_info": ALPACA_INFO,
                        "config": {"template": template, "cutoff_len": 160, "train_on_prompt": on_prompt}})  # fmt: skip
    for on_prompt in (False, True):
        out.append({"name": "messages_chatml" + ("_train_on_prompt" if on_prompt else ""), "tokenizer": "smollm2",
                    "rows": chat_rows(), "dataset_info": MESSAGES_INFO,
                    "config": {"template": "chatml", "cutoff_len": 64, "train_on_prompt": on_prompt}})  # fmt: skip
    for template in ("empty", "vicuna"):
        out.append({"name": f"alpaca_{template}", "tokenizer": "stories260K", "rows": alpaca_rows(),
                    "dataset_info": ALPACA_INFO, "config": {"template": template, "cutoff_len": 160}})  # fmt: skip
    out.append({"name": "messages_llama3", "tokenizer": "stories260K", "rows": chat_rows(),
                "dataset_info": MESSAGES_INFO, "config": {"template": "llama3", "cutoff_len": 160}})  # fmt: skip
    out.append({"name": "alpaca_phi", "tokenizer": "smollm2", "rows": alpaca_rows(), "dataset_info": ALPACA_INFO,
                "config": {"template": "phi", "cutoff_len": 48, "train_on_prompt": True}})  # fmt: skip
    out.append({"name": "messages_qwen", "tokenizer": "smollm2", "rows": chat_rows(), "dataset_info": MESSAGES_INFO,
                "config": {"template": "qwen", "cutoff_len": 64}})  # fmt: skip
    out.append({"name": "messages_smollm2", "tokenizer": "smollm2", "rows": chat_rows(), "dataset_info": MESSAGES_INFO,
                "config": {"template": "smollm2", "cutoff_len": 64}})  # fmt: skip
    out.append({"name": "sharegpt_chatml", "tokenizer": "smollm2", "rows": [*sharegpt_rows(), BROKEN],
                "dataset_info": SHAREGPT_INFO, "config": {"template": "chatml", "cutoff_len": 64}})  # fmt: skip
    out.append({"name": "alpaca_chatml", "tokenizer": "smollm2", "rows": alpaca_rows(), "dataset_info": ALPACA_INFO,
                "config": {"template": "chatml", "cutoff_len": 48}})  # fmt: skip
    return out


def run_row(case: dict[str, Any], tok_dir: Path, row: dict[str, Any], work: Path) -> tuple[list[dict], dict]:
    """The row's samples, and what LLaMA-Factory changed on the tokenizer it saves into the run."""
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer
    from transformers import AutoTokenizer

    (work / "data.json").write_text(json.dumps([row]))
    (work / "dataset_info.json").write_text(json.dumps({"rows": {"file_name": "data.json", **case["dataset_info"]}}))
    args = {
        "stage": "sft",
        "do_train": True,
        "model_name_or_path": str(tok_dir),
        "finetuning_type": "lora",
        "dataset": "rows",
        "dataset_dir": str(work),
        "output_dir": str(work / "out"),
        "overwrite_cache": True,
        "preprocessing_num_workers": None,
        "report_to": "none",
        **case["config"],
    }
    model_args, data_args, training_args, _, _ = get_train_args(args)
    tok_module = load_tokenizer(model_args)
    template = get_template_and_fix_tokenizer(tok_module["tokenizer"], data_args)
    try:
        ds = get_dataset(template, model_args, data_args, training_args, stage="sft", **tok_module)["train_dataset"]
        samples = [{"input_ids": list(s["input_ids"]), "labels": list(s["labels"])} for s in ds]
    except RuntimeError as e:  # LLaMA-Factory raises when no valid sample is left
        if "Cannot find valid samples" not in str(e):
            raise
        samples = []
    tok = tok_module["tokenizer"]
    fresh = AutoTokenizer.from_pretrained(str(tok_dir))
    vocab = tok.get_added_vocab()
    added = sorted(set(vocab) - set(fresh.get_added_vocab()), key=vocab.__getitem__)  # in the order of their ids
    return samples, {"chat_template": tok.chat_template, "eos_token": tok.eos_token, "added_tokens": added}


def main() -> None:
    args = golden_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("DISABLE_VERSION_CHECK", "1")
    logging.disable(logging.WARNING)
    tok_dirs = {"stories260K": STORIES, "smollm2": args.smollm2}
    doc = fixture_doc(
        "llamafactory",
        ("llamafactory", "transformers", "tokenizers", "datasets", "torch"),
        "each row alone through llamafactory's get_train_args, load_tokenizer, get_template_and_fix_tokenizer "
        "and get_dataset(stage='sft') (bench/frameworks/make_golden_llamafactory.py); torchaudio stubbed "
        "(bench/frameworks/stubs)",
        tok_dirs,
    )
    for case in cases():
        if args.only and case["name"] != args.only:
            continue
        results, saved = [], {}
        keys = {k for row in case["rows"] for k in row}  # a whole file gives a missing column null in every row
        for i, row in enumerate(case["rows"]):
            full = {k: row.get(k) for k in sorted(keys)}
            with tempfile.TemporaryDirectory() as tmp:
                samples, saved = run_row(case, tok_dirs[case["tokenizer"]], full, Path(tmp))
            results.append({"row": i, "dropped": not samples, "samples": samples})
            print(case["name"], i, [len(s["input_ids"]) for s in samples], flush=True)
        doc["cases"].append({**case, "saved_tokenizer": saved, "results": results})
    OUT.mkdir(parents=True, exist_ok=True)
    dest = OUT / f"llamafactory_{doc['versions']['llamafactory']}_preprocess.json"
    write_fixture(dest, merge_cases(dest, doc, args.only))
    print("wrote", dest)


if __name__ == "__main__":
    main()
