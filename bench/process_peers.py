"""bergson's CLI inputs and the three processes' scores for bench_process.py.

bergson (2.5.1) takes its model as one folder: a PEFT adapter whose ``adapter_config.json`` names its base, and a
prompt/completion dataset is rendered through the tokenizer's chat template (loss on the completion's span only).
The bundled stories260K tokenizer has no chat template, so ``bergson_inputs`` writes a copy of it with one that
concatenates the turns (BOS, prompt, completion: the text Gradian formats), and a copy of the adapter that names the
base. Its CLI imports ``torchopt`` (for MAGIC, unused here), which ``pip install --no-deps`` left out: the role adds
``bench/work/bergson-extra`` (``pip install --no-deps --target bench/work/bergson-extra torchopt optree graphviz``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"


def bergson_inputs(work: Path) -> tuple[Path, Path]:
    """(adapter folder naming its base, tokenizer folder with a chat template) under ``work/bergson_in``."""
    dst = work / "bergson_in"
    adapter, tok = dst / "adapter", dst / "tokenizer"
    if (dst / "ready").is_file():
        return adapter, tok
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(work / "adapter", adapter)
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str((work / "base").resolve())
    (adapter / "adapter_config.json").write_text(json.dumps(cfg, indent=1))
    tok.mkdir(parents=True)
    for f in (work / "base").iterdir():
        if f.name.startswith("tok") or f.name == "special_tokens_map.json":
            shutil.copy(f, tok / f.name)
    tc = json.loads((tok / "tokenizer_config.json").read_text())
    (tok / "tokenizer_config.json").write_text(json.dumps(tc | {"chat_template": TEMPLATE}, indent=1))
    (dst / "ready").write_text("ok")
    return adapter, tok


def bergson_argv(py: str, work: Path) -> list[str]:
    """``python -m bergson ekfac`` as a user runs it: EK-FAC (kfac + eigenvalue correction), empirical Fisher (the
    dataset's labels, as Gradian and the kronfluence script), one score column per query, a token batch of 256 (the
    model's context: bergson refuses its default 2048 beyond it), everything else default."""
    adapter, tok = bergson_inputs(work)
    data = [
        "--data.dataset",
        str(work / "train.jsonl"),
        "--data.prompt_column",
        "prompt",
        "--data.completion_column",
        "completion",
    ]
    query = [
        "--query.dataset",
        str(work / "eval.jsonl"),
        "--query.prompt_column",
        "prompt",
        "--query.completion_column",
        "completion",
        "--query.aggregation",
        "none",
    ]
    return [py, "-m", "bergson", "ekfac", str(work / "bergson_run"), "--model", str(adapter), "--tokenizer", str(tok),
            *data, *query, "--method", "kfac", "--hessian_cfg.ev_correction", "true", "--use_dataset_labels", "true",
            "--token_batch_size", "256", "--overwrite", "true", "--nproc_per_node", "1"]  # fmt: skip


def bergson_scores(work: Path) -> np.ndarray:
    """bergson's scores, rows x queries (row i = training document i)."""
    path = work / "bergson_run" / "scores"
    info = json.loads((path / "info.json").read_text())
    dt = info["dtype"]
    dtype = np.dtype([tuple(f) for f in dt] if isinstance(dt, list) else dt)
    mm = np.memmap(path / "scores.bin", dtype=dtype, mode="r", shape=(info["num_rows"],))
    return np.stack([np.asarray(mm[f"score_{i}"], dtype=np.float64) for i in range(info["num_scores"])], axis=1)


def gradian_scores(out: Path, rows: int) -> np.ndarray:
    """Gradian's per-item scores from ``gradian attribute``'s output, rows x queries (training-row order; rows
    Gradian dropped are NaN), as influence: Gradian stores harm, ``-<X, G_i>``, the peers ``+<X, G_i>``."""
    S = -np.load(out / "item_scores.npy").astype(np.float64)  # items x columns
    idx_path = out / "embeddings_index.npy"
    idx = np.load(idx_path) if idx_path.is_file() else np.arange(S.shape[1])
    full = np.full((rows, S.shape[0]), np.nan)
    full[idx] = S.T
    return full


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation over the entries finite in both."""
    from scipy.stats import spearmanr

    ok = np.isfinite(a) & np.isfinite(b)
    return float(spearmanr(a[ok], b[ok]).statistic)


def agreement(scores: dict[str, np.ndarray]) -> dict:
    """Pairwise Spearman of per-row scores: of the query-mean score, and the mean over queries of each query's."""
    out: dict = {}
    names = sorted(scores)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            A, B = scores[a], scores[b]
            per_query = [spearman(A[:, q], B[:, q]) for q in range(min(A.shape[1], B.shape[1]))]
            out[f"{a}_vs_{b}"] = {"mean_score": spearman(A.mean(1), B.mean(1)),
                                  "per_query_mean": float(np.mean(per_query))}  # fmt: skip
    return out
