"""GradianCallback inside the real Axolotl and LLaMA-Factory, as their users add it (the plugin and the ``run_exp``
callback of docs/how-to/callback.md), each on the first 32 rows of the real-model suite's refusal subset
(bench/realmodel/axolotl_run.py and llamafactory.py: SmolLM2-135M-Instruct, LoRA r=16, 1 epoch): with each tool's
defaults (LLaMA-Factory's reentrant gradient checkpointing included) and with its packing (Axolotl's
``sample_packing``, LLaMA-Factory's ``neat_packing``: a 4D block-diagonal mask). Then `gradian attribute --run` as a
user types it (Axolotl: the run dir alone; LLaMA-Factory: with ``--config``, which holds the template) and what it
says of the record. Needs the two tools' venvs (bench/frameworks/make_venvs.sh; VENV_AXO, VENV_LF).

    python bench/callback_frameworks.py     # bench/results/callback_frameworks.{json,md}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work" / "callback_frameworks"
AXO = ROOT / "bench/work/realmodel/axo_refusals_s0"  # python bench/realmodel/axolotl_run.py data
LF = ROOT / "bench/work/realmodel/lf_refusals_s0"  # python bench/realmodel/llamafactory.py data
EVAL = ROOT / "bench/work/realmodel/refusals_s0/eval_prompts.jsonl"
MODEL = ROOT / "examples/smollm2/model"
VENV_AXO = Path(os.environ.get("VENV_AXO", "/work/venv-axo"))
VENV_LF = Path(os.environ.get("VENV_LF", "/work/venv-lf"))
PLUGIN = """from axolotl.integrations.base import BasePlugin
from gradian.integrations import GradianCallback


class GradianPlugin(BasePlugin):
    def add_callbacks_post_trainer(self, cfg, trainer):
        return [GradianCallback()]
"""
LF_RUN = """import sys, yaml
from llamafactory.train.tuner import run_exp
from gradian.integrations import GradianCallback
run_exp(yaml.safe_load(open(sys.argv[1])), callbacks=[GradianCallback()])
"""


def _env(*paths: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": ":".join(str(p) for p in paths), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2",
            "CUDA_VISIBLE_DEVICES": "", "AXOLOTL_DO_NOT_TRACK": "1"}  # fmt: skip


def _setup(name: str, src: Path, script: tuple[str, str]) -> tuple[Path, dict]:
    """The case's folder: its helper script, the first 32 training rows and the source run's YAML to change."""
    w = WORK / name
    w.mkdir(parents=True, exist_ok=True)
    (w / script[0]).write_text(script[1])
    (w / "train.jsonl").write_text("".join((src / "train.jsonl").read_text("utf-8").splitlines(True)[:32]))
    return w, yaml.safe_load((src / "config.yaml").read_text())


def _run(w: Path, cfg: dict, cmd: list[str], env: dict[str, str]) -> str:
    (w / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    got = subprocess.run([*cmd, str(w / "config.yaml")], env=env, cwd=w, capture_output=True, text=True)
    return got.stdout + got.stderr


def _axolotl(name: str, extra: dict) -> tuple[Path, str, list[str]]:
    w, cfg = _setup(name, AXO, ("gradian_axo.py", PLUGIN))
    cfg.update(num_epochs=1, output_dir=str(w / "run"), dataset_prepared_path=str(w / "prepared"),
               plugins=["gradian_axo.GradianPlugin"], **extra)  # fmt: skip
    cfg["datasets"][0]["path"] = str(w / "train.jsonl")
    env = {**_env(w, ROOT / "src"), "PATH": f"{VENV_AXO / 'bin'}:{os.environ['PATH']}"}
    return w, _run(w, cfg, [str(VENV_AXO / "bin/axolotl"), "train"], env), []


def _llamafactory(name: str, extra: dict) -> tuple[Path, str, list[str]]:
    w, cfg = _setup(name, LF, ("run_lf.py", LF_RUN))
    cfg.update(num_train_epochs=1, max_samples=32, output_dir=str(w / "run"), **extra)
    log = _run(w, cfg, [str(VENV_LF / "bin/python"), str(w / "run_lf.py")],
               _env(ROOT / "src", ROOT / "bench/frameworks/stubs"))  # fmt: skip
    return w, log, ["--config", str(w / "config.yaml"), "--train", str(w / "train.jsonl")]


CASES = {
    "axolotl": (_axolotl, {}),
    "axolotl_sample_packing": (_axolotl, {"sample_packing": True, "pad_to_sequence_len": True}),
    "llamafactory": (_llamafactory, {}),
    "llamafactory_neat_packing": (_llamafactory, {"packing": True, "neat_packing": True}),
}


def main() -> None:
    rows = []
    for name, (trained, extra) in CASES.items():
        w, log, args = trained(name, extra)
        said = [x.split("GradianCallback", 1)[1].strip(" :") for x in log.splitlines() if "GradianCallback" in x]
        row = {"case": name, "trained": (w / "run" / "adapter_model.safetensors").is_file(),
               "record": (w / "run" / "gradian-record" / "record.json").is_file(), "callback_said": said}  # fmt: skip
        if row["trained"]:
            cmd = [str(ROOT / ".venv/bin/gradian"), "attribute", "--run", str(w / "run"), "--base", str(MODEL),
                   "--eval", str(EVAL), "--out", str(w / "attr"), *args]  # fmt: skip
            subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "2"}, capture_output=True, text=True)
            rep = json.loads((w / "attr" / "report.json").read_text())
            row["gradient_source"] = rep["settings"].get("gradient_source")
        rows.append(row)
        print(row, flush=True)
    res = {"command": "python bench/callback_frameworks.py", "cases": rows}
    out = ROOT / "bench" / "results" / "callback_frameworks.json"
    out.write_text(json.dumps(res, indent=1))
    lines = ["# GradianCallback in the real Axolotl and LLaMA-Factory", "", f"`{res['command']}`", "",
             "| case | trained | record written | gradian attribute --run: gradient_source | the callback said |",
             "|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['case']} | {r['trained']} | {r['record']} | {r.get('gradient_source', '-')} "
                     f"| {'; '.join(r['callback_said']) or '-'} |")  # fmt: skip
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
