"""The default projection against exact gradients on a real chat model: ``refusals_s0`` and ``overrefusal_s0``
attributed as a user runs it, once with the default ``--proj-dim`` (auto) and once with ``--proj-dim 0`` (exact), from
prompts.

    gradian attribute --run W/run --base examples/smollm2/model --train W/train.jsonl --eval W/eval_prompts.jsonl \\
        --out W/attr_prompts_proj0 --proj-dim 0
    python bench/realmodel/projdim.py      # bench/results/realmodel_projdim.{json,md}

where W = bench/work/realmodel/refusals_s0 or overrefusal_s0 (``bench/realmodel/suite.py``; its ``attr_prompts`` is
the default run).
"""

from __future__ import annotations

import json
from pathlib import Path

from suite import RESULTS, WORK, _auc

RUNS = [WORK / "refusals_s0", WORK / "overrefusal_s0"]


def one(attr: Path) -> dict:
    rep = json.loads((attr / "report.json").read_text())
    planted = set(json.loads((attr.parent / "planted.json").read_text())["rows"])
    scores = {int(e["index"]): float(e["score"] or 0.0) for e in rep["examples"]}
    v = rep["verdict"]
    named = set(v.get("drop_rows") or [])
    t = rep.get("timings") or {}
    return {
        "attribution": f"{attr.parent.name}/{attr.name}", "proj_dim": rep["settings"].get("proj_dim"),
        "auc": _auc(scores, planted),
        "verdict": v.get("kind"), "cause": v.get("cause"), "named": len(named), "named_planted": len(named & planted),
        "precision": len(named & planted) / len(named) if named else None,
        "recall": len(named & planted) / len(planted),
        "expected_recovery": v.get("expected_recovery"), "seconds": sum(float(x) for x in t.values()),
    }  # fmt: skip


def main() -> None:
    attrs = [r / a for r in RUNS for a in ("attr_prompts", "attr_prompts_proj0")]
    rows = [one(a) for a in attrs if (a / "report.json").is_file()]
    (RESULTS / "realmodel_projdim.json").write_text(json.dumps(rows, indent=1))
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |"
              for r in rows]  # fmt: skip
    (RESULTS / "realmodel_projdim.md").write_text(
        "# The default projection against exact gradients on the refusal runs\n\nProduced by `python "
        "bench/realmodel/projdim.py` (its docstring has the commands). seconds: the attribution's timed stages.\n\n"
        + "\n".join(lines)
        + "\n"
    )
    print((RESULTS / "realmodel_projdim.md").read_text())


if __name__ == "__main__":
    main()
