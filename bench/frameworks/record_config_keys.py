"""The config keys a trainer accepts, read from its own schema: run in the trainer's venv (make_venvs.sh).

    /work/venv-axo/bin/python bench/frameworks/record_config_keys.py axolotl
    /work/venv-lf/bin/python bench/frameworks/record_config_keys.py llamafactory

Axolotl: the fields (and aliases) of ``AxolotlInputConfig`` and of every bundled plugin's input args (the keys a
plugin adds to the YAML; a plugin whose import fails here is named in ``skipped``). LLaMA-Factory: the fields of the
dataclasses ``llamafactory-cli train`` parses a YAML into (model, data, training, finetuning, generating arguments).
Writes tests/fixtures/golden/<framework>_<version>_config_keys.json; tests/test_golden_frameworks.py checks that
Gradian knows each key (an unknown key is a C222 warning).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import pkgutil
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "golden"


def _pydantic_keys(model: Any) -> set[str]:
    return {k for name, f in model.model_fields.items() for k in (name, f.alias) if k}


def axolotl_keys() -> dict[str, Any]:
    os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")
    import axolotl.integrations as integrations
    from axolotl.integrations.base import BasePlugin
    from axolotl.utils.schemas.config import AxolotlInputConfig

    keys, plugins, skipped = _pydantic_keys(AxolotlInputConfig), {}, []
    for m in pkgutil.iter_modules(integrations.__path__):
        try:
            mod = importlib.import_module(f"axolotl.integrations.{m.name}")
        except ImportError as err:  # an optional dependency of one plugin
            skipped.append(f"{m.name}: {err}")
            continue
        for cls in list(vars(mod).values()):
            if inspect.isclass(cls) and issubclass(cls, BasePlugin) and cls is not BasePlugin:
                path = cls().get_input_args()
                if path:
                    module, _, name = path.rpartition(".")
                    plugins[m.name] = sorted(_pydantic_keys(getattr(importlib.import_module(module), name)))
    return {"schema": "AxolotlInputConfig", "keys": sorted(keys), "plugins": plugins, "skipped": skipped}


def llamafactory_keys() -> dict[str, Any]:
    os.environ.setdefault("DISABLE_VERSION_CHECK", "1")
    from llamafactory.hparams import (
        DataArguments,
        FinetuningArguments,
        GeneratingArguments,
        ModelArguments,
        TrainingArguments,
    )

    classes = (ModelArguments, DataArguments, TrainingArguments, FinetuningArguments, GeneratingArguments)
    keys = {f.name for c in classes for f in dataclasses.fields(c)}
    return {"schema": ", ".join(c.__name__ for c in classes), "keys": sorted(keys), "plugins": {}, "skipped": []}


READERS = {"axolotl": axolotl_keys, "llamafactory": llamafactory_keys}


def main() -> None:
    framework = sys.argv[1]
    doc = {"framework": framework, "version": version(framework), **READERS[framework](),
           "produced_by": f"bench/frameworks/record_config_keys.py {framework}"}  # fmt: skip
    dest = OUT / f"{framework}_{doc['version']}_config_keys.json"
    dest.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print("wrote", dest, len(doc["keys"]), "keys,", sum(len(v) for v in doc["plugins"].values()), "plugin keys")


if __name__ == "__main__":
    main()
