"""On-disk store of per-example training gradients and covariance sums: safetensors shards + JSON metadata.

Layout: ``<out>/grads/<key>/meta.json`` and ``shard_00000.safetensors``, ... Each shard holds the (possibly projected)
per-example gradients ``g.<block>`` (n, out, in) in fp32 for a contiguous range of training rows, and that range's
covariance sums ``A.<block>`` / ``S.<block>`` (fp64) and token count, so the curvature never needs a second pass.
Shards are written to a temporary name and renamed, then listed in ``meta.json`` (also replaced atomically): an
interrupted run resumes after the last complete shard. ``key`` is a content hash of the base model (config plus a
fingerprint of its weight files), the adapter files, the formatted training tokens and masks, and the settings that
change the gradients (dtype, projection); eval items and the method are not in it, so a rerun with other eval items
or another method reuses the gradients.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gradian.data.types import FormattedExample

SCHEMA = "gradian.gradstore/1"


def _sha_file(path: Path, h: Any, head_tail: int | None = None) -> None:
    size = path.stat().st_size
    h.update(f"{path.name}:{size}".encode())
    with open(path, "rb") as f:
        if head_tail is None or size <= 2 * head_tail:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        else:
            h.update(f.read(head_tail))
            f.seek(size - head_tail)
            h.update(f.read(head_tail))


def base_fingerprint(base: str) -> str:
    """config.json and, per weight file, its size and first/last 4 MiB (hashing a multi-GB base in full on every
    run would cost more than the attribution); a hub id stands for itself."""
    h = hashlib.sha256()
    p = Path(base)
    if p.is_dir():
        for f in sorted(p.iterdir()):
            if f.name == "config.json":
                _sha_file(f, h)
            elif f.suffix in (".safetensors", ".bin", ".pt", ".gguf"):
                _sha_file(f, h, head_tail=4 << 20)
    else:
        h.update(base.encode())
    return h.hexdigest()


def adapter_fingerprint(adapter_dir: str | Path) -> str:
    h = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        f = Path(adapter_dir) / name
        if f.is_file():
            _sha_file(f, h)
    return h.hexdigest()


def data_fingerprint(fxs: list[FormattedExample]) -> str:
    h = hashlib.sha256()
    for f in fxs:
        h.update(json.dumps([f.index, f.input_ids, [int(m) for m in f.loss_mask]]).encode())
    return h.hexdigest()


def store_key(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


@dataclass
class Loaded:
    G: dict[str, torch.Tensor]
    A_sum: dict[str, torch.Tensor]
    S_sum: dict[str, torch.Tensor]
    n_tokens: int
    n_examples: int


class GradientStore:
    def __init__(self, root: str | Path, key: str, meta: dict[str, Any]):
        self.dir = Path(root) / key
        self.key = key
        self.meta_path = self.dir / "meta.json"
        self.meta = {"schema": SCHEMA, "key": key, **meta, "complete": []}
        if self.meta_path.is_file():
            try:
                old = json.loads(self.meta_path.read_text())
            except json.JSONDecodeError:
                old = {}
            if old.get("key") == key and old.get("shard_size") == meta.get("shard_size"):
                done = [s for s in old.get("complete", []) if (self.dir / self.shard_name(s)).is_file()]
                self.meta["complete"] = sorted(done)

    @staticmethod
    def shard_name(i: int) -> str:
        return f"shard_{i:05d}.safetensors"

    @property
    def n_shards(self) -> int:
        n, s = self.meta["n_examples"], self.meta["shard_size"]
        return max(1, -(-n // s))

    @property
    def complete(self) -> bool:
        return len(self.meta["complete"]) == self.n_shards

    def resume_from(self) -> int:
        """Index of the first training row not yet stored (shards are complete in order)."""
        done = set(self.meta["complete"])
        i = 0
        while i in done:
            i += 1
        return min(i * self.meta["shard_size"], self.meta["n_examples"])

    def write_shard(
        self, i: int, G: dict[str, torch.Tensor], A: dict[str, torch.Tensor], S: dict[str, torch.Tensor], n_tok: int
    ) -> None:
        from safetensors.torch import save_file

        self.dir.mkdir(parents=True, exist_ok=True)
        tensors = {f"g.{k}": v.to(torch.float32).contiguous() for k, v in G.items()}
        tensors |= {f"A.{k}": v.to(torch.float64).contiguous() for k, v in A.items()}
        tensors |= {f"S.{k}": v.to(torch.float64).contiguous() for k, v in S.items()}
        tensors["n_tokens"] = torch.tensor([n_tok], dtype=torch.int64)
        tmp = self.dir / (self.shard_name(i) + ".tmp")
        save_file(tensors, str(tmp), metadata={"key": self.key, "shard": str(i)})
        os.replace(tmp, self.dir / self.shard_name(i))
        self.meta["complete"] = sorted(set(self.meta["complete"]) | {i})
        self._write_meta()

    def _write_meta(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.meta_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.meta, indent=1))
        os.replace(tmp, self.meta_path)

    def load(self, blocks: list[str]) -> Loaded:
        from safetensors.torch import load_file

        G: dict[str, list[torch.Tensor]] = {b: [] for b in blocks}
        A: dict[str, torch.Tensor] = {}
        S: dict[str, torch.Tensor] = {}
        n_tok = 0
        for i in range(self.n_shards):
            t = load_file(str(self.dir / self.shard_name(i)))
            for b in blocks:
                G[b].append(t[f"g.{b}"])
                A[b] = A[b] + t[f"A.{b}"] if b in A else t[f"A.{b}"]
                S[b] = S[b] + t[f"S.{b}"] if b in S else t[f"S.{b}"]
            n_tok += int(t["n_tokens"][0])
        Gc = {b: torch.cat(v) for b, v in G.items()}
        return Loaded(Gc, A, S, n_tok, self.meta["n_examples"])
