"""Golden fixtures from Axolotl's real preprocessing: run in a venv with Axolotl installed (docs/how-to/trainers.md).

    VENV/bin/python bench/frameworks/make_golden_axolotl.py --smollm2 DIR

For each case (dataset type x train_on_inputs x tokenizer) every row goes alone through ``axolotl.cli.config.load_cfg``
and ``axolotl.common.datasets.load_datasets``, as ``axolotl preprocess`` runs them: the prompt strategy, the
``sequence_len`` filter and any other filter. A row that comes out as no sample is recorded as dropped; a row that
comes out as several (``type: completion`` splits long texts) keeps them all. Writes
tests/fixtures/golden/axolotl_<version>_preprocess.json, which tests/test_golden_frameworks.py checks Gradian against.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

# datasets 5 runs num_proc=1 work in spawned workers, which import this script first and then unpickle Axolotl
# objects; importing axolotl.utils.data here first avoids Axolotl 0.21's circular import when a worker starts from
# axolotl.datasets ("cannot import name 'TokenizedPromptDataset' from partially initialized module").
import axolotl.utils.data  # noqa: F401, E402
import yaml

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
    text_rows,
    write_fixture,
)

BASE_CFG = {
    "adapter": "lora",
    "lora_r": 4,
    "lora_alpha": 8,
    "lora_target_linear": True,
    "micro_batch_size": 1,
    "num_epochs": 1,
    "learning_rate": 1e-4,
    "dataset_num_proc": 1,
    "shuffle_merged_datasets": False,
}


def cases() -> list[dict[str, Any]]:
    chat_ds = {"type": "chat_template"}
    share_ds = {
        "type": "chat_template",
        "field_messages": "conversations",
        "message_property_mappings": {"role": "from", "content": "value"},
    }
    return [
        {"name": "alpaca", "tokenizer": "stories260K", "rows": alpaca_rows(),
         "config": {"sequence_len": 256, "train_on_inputs": False, "datasets": [{"type": "alpaca"}]}},
        {"name": "alpaca_train_on_inputs", "tokenizer": "stories260K", "rows": alpaca_rows(),
         "config": {"sequence_len": 256, "train_on_inputs": True, "datasets": [{"type": "alpaca"}]}},
        {"name": "alpaca_truncate", "tokenizer": "stories260K", "rows": alpaca_rows(),
         "config": {"sequence_len": 128, "excess_length_strategy": "truncate", "datasets": [{"type": "alpaca"}]}},
        {"name": "alpaca_smollm2", "tokenizer": "smollm2", "rows": alpaca_rows(),
         "config": {"sequence_len": 96, "train_on_inputs": False, "datasets": [{"type": "alpaca"}]}},
        {"name": "chat_template", "tokenizer": "smollm2", "rows": chat_rows(),
         "config": {"sequence_len": 96, "train_on_inputs": False, "chat_template": "tokenizer_default",
                    "datasets": [chat_ds]}},
        {"name": "chat_template_train_on_inputs", "tokenizer": "smollm2", "rows": chat_rows(),
         "config": {"sequence_len": 96, "train_on_inputs": True, "chat_template": "tokenizer_default",
                    "datasets": [chat_ds]}},
        {"name": "chat_template_sharegpt", "tokenizer": "smollm2", "rows": sharegpt_rows(),
         "config": {"sequence_len": 96, "train_on_inputs": False, "chat_template": "tokenizer_default",
                    "datasets": [share_ds]}},
        {"name": "completion", "tokenizer": "stories260K", "rows": text_rows(),
         "config": {"sequence_len": 64, "datasets": [{"type": "completion"}]}},
    ]  # fmt: skip


def run_case(case: dict[str, Any], tok_dirs: dict[str, Path], work: Path) -> list[dict[str, Any]]:
    from axolotl.cli.config import load_cfg
    from axolotl.common.datasets import load_datasets

    cdir = work / case["name"]
    cdir.mkdir()
    cfg_doc = {**BASE_CFG, **copy.deepcopy(case["config"])}
    cfg_doc["base_model"] = str(STORIES)
    cfg_doc["tokenizer_config"] = str(tok_dirs[case["tokenizer"]])
    cfg_doc["output_dir"] = str(cdir / "out")
    cfg_doc["dataset_prepared_path"] = str(cdir / "prepared")
    first = cdir / "row0.jsonl"
    cfg_doc["datasets"][0].update(path=str(first), ds_type="json")
    (cdir / "config.yml").write_text(yaml.safe_dump(cfg_doc))
    cfg = load_cfg(str(cdir / "config.yml"))
    out = []
    for i, row in enumerate(case["rows"]):
        path = cdir / f"row{i}.jsonl"
        path.write_text(json.dumps(row) + "\n")
        cfg.datasets[0]["path"] = str(path)
        try:
            ds = load_datasets(cfg=cfg).train_dataset
            samples = [{"input_ids": list(s["input_ids"]), "labels": list(s["labels"])} for s in ds]
        except ValueError as e:  # Axolotl raises when every sample of a dataset was filtered out
            if "no samples left" not in str(e):
                raise
            samples = []
        out.append({"row": i, "dropped": not samples, "samples": samples})
        print(case["name"], i, "dropped" if not samples else [len(s["input_ids"]) for s in samples], flush=True)
    return out


def main() -> None:
    args = golden_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")
    logging.disable(logging.WARNING)
    tok_dirs = {"stories260K": STORIES, "smollm2": args.smollm2}
    doc = fixture_doc(
        "axolotl",
        ("axolotl", "transformers", "tokenizers", "datasets", "trl", "torch"),
        "each row alone through axolotl.cli.config.load_cfg + axolotl.common.datasets.load_datasets "
        "(bench/frameworks/make_golden_axolotl.py)",
        tok_dirs,
    )
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases():
            if args.only and case["name"] != args.only:
                continue
            results = run_case(case, tok_dirs, Path(tmp))
            doc["cases"].append({**case, "results": results})
    OUT.mkdir(parents=True, exist_ok=True)
    dest = OUT / f"axolotl_{doc['versions']['axolotl']}_preprocess.json"
    write_fixture(dest, merge_cases(dest, doc, args.only))
    print("wrote", dest)


if __name__ == "__main__":
    main()
