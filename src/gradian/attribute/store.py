"""On-disk store of per-example training gradients and covariance sums: safetensors shards + JSON metadata.

Layout: ``<out>/grads/<key>/meta.json`` and ``shard_00000.safetensors``, ... Each shard holds the (possibly projected)
per-example gradients ``g.<block>`` (n, out, in) in fp32 for a contiguous range of training rows, and that range's
covariance sums ``A.<block>`` / ``S.<block>`` (fp64) and token count, so the curvature never needs a second pass.
Shards are written to a temporary name, fsynced and renamed, then listed in ``meta.json`` (also replaced atomically)
with the sha256 of the file: an interrupted run (even by SIGKILL) recomputes only the shards not listed, and a listed
shard whose bytes no longer match its checksum (flipped bytes, truncation) is recomputed, never used; :meth:`load`
checks every shard's checksum again as it reads it. Rows skipped for non-finite gradients (see
:mod:`gradian.attribute.robust`) are stored as zeros and listed per shard. ``key`` is a content hash of the base
model (config plus a fingerprint of its weight files), the adapter files, the formatted training tokens and masks,
and the settings that change the gradients (dtype, projection); eval items and the method are not in it, so a rerun
with other eval items or another method reuses the gradients.
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
from gradian.errors import GradianError

SCHEMA = "gradian.gradstore/2"


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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
        self.meta = {"schema": SCHEMA, "key": key, **meta, "complete": [], "sha256": {}, "skipped": {}}
        self.rejected: list[tuple[int, str]] = []  # (shard, why) listed as complete but not usable
        if self.meta_path.is_file():
            try:
                old = json.loads(self.meta_path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                old = {}
            if (
                isinstance(old, dict)
                and old.get("schema") == SCHEMA
                and old.get("key") == key
                and old.get("shard_size") == meta.get("shard_size")
                and old.get("n_examples") == meta.get("n_examples")
            ):
                sums, skipped = old.get("sha256") or {}, old.get("skipped") or {}
                for s in sorted(int(x) for x in old.get("complete", [])):
                    why = self._check(s, sums.get(str(s)))
                    if why is None:
                        self.meta["complete"].append(s)
                        self.meta["sha256"][str(s)] = sums[str(s)]
                        self.meta["skipped"][str(s)] = skipped.get(str(s), [])
                    else:
                        self.rejected.append((s, why))

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

    def _check(self, i: int, want: str | None) -> str | None:
        """Why shard ``i`` cannot be used (None when its file matches checksum ``want``)."""
        path = self.dir / self.shard_name(i)
        if not want:
            return "no checksum recorded"
        if not path.is_file():
            return "file missing"
        if sha256_file(path) != want:
            return "checksum mismatch (corrupted or truncated)"
        return None

    def rows(self, i: int) -> tuple[int, int]:
        """Training rows [start, end) of shard ``i``."""
        s, n = self.meta["shard_size"], self.meta["n_examples"]
        return min(i * s, n), min((i + 1) * s, n)

    def missing(self) -> list[int]:
        """Shards still to compute, in order."""
        done = set(self.meta["complete"])
        return [i for i in range(self.n_shards) if i not in done]

    def resume_from(self) -> int:
        """Index of the first training row not yet stored."""
        miss = self.missing()
        return self.rows(miss[0])[0] if miss else self.meta["n_examples"]

    @property
    def skipped(self) -> list[tuple[int, str]]:
        """(training row position, reason) of every stored row left out for a non-finite gradient."""
        return sorted((int(p), why) for v in self.meta["skipped"].values() for p, why in v)

    def write_shard(
        self,
        i: int,
        G: dict[str, torch.Tensor],
        A: dict[str, torch.Tensor],
        S: dict[str, torch.Tensor],
        n_tok: int,
        n_examples: int | None = None,
        skipped: list[tuple[int, str]] | None = None,
    ) -> None:
        """Write shard ``i`` (``skipped``: (training row position, reason) of rows stored as zeros)."""
        from safetensors.torch import save_file

        self.dir.mkdir(parents=True, exist_ok=True)
        lo, hi = self.rows(i)
        tensors = {f"g.{k}": v.to(torch.float32).contiguous() for k, v in G.items()}
        tensors |= {f"A.{k}": v.to(torch.float64).contiguous() for k, v in A.items()}
        tensors |= {f"S.{k}": v.to(torch.float64).contiguous() for k, v in S.items()}
        tensors["n_tokens"] = torch.tensor([n_tok], dtype=torch.int64)
        tensors["n_examples"] = torch.tensor([hi - lo if n_examples is None else n_examples], dtype=torch.int64)
        skipped = [[int(p), str(why)] for p, why in (skipped or [])]
        tmp = self.dir / (self.shard_name(i) + ".tmp")
        # one metadata entry: safetensors writes a metadata map in no fixed order; shard bytes should be reproducible
        info = json.dumps({"key": self.key, "shard": i, "skipped": skipped}, sort_keys=True)
        save_file(tensors, str(tmp), metadata={"gradian": info})
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        digest = sha256_file(tmp)
        os.replace(tmp, self.dir / self.shard_name(i))
        self.meta["complete"] = sorted(set(self.meta["complete"]) | {i})
        self.meta["sha256"][str(i)] = digest
        self.meta["skipped"][str(i)] = skipped
        self._write_meta()

    def _write_meta(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.meta_path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(self.meta, indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.meta_path)

    def load(self, blocks: list[str]) -> Loaded:
        """All shards, each checked against its checksum as it is read (a mismatch is an error, never used)."""
        from safetensors.torch import load as load_bytes

        G: dict[str, list[torch.Tensor]] = {b: [] for b in blocks}
        A: dict[str, torch.Tensor] = {}
        S: dict[str, torch.Tensor] = {}
        n_tok = 0
        n_ex = 0
        for i in range(self.n_shards):
            path = self.dir / self.shard_name(i)
            data = path.read_bytes() if path.is_file() else b""
            if hashlib.sha256(data).hexdigest() != self.meta["sha256"].get(str(i)):
                raise GradianError(
                    f"gradient store shard {i} changed on disk while in use (checksum mismatch)",
                    where=str(path),
                    fix=f"delete {self.dir} and rerun",
                )
            t = load_bytes(data)
            del data
            for b in blocks:
                G[b].append(t[f"g.{b}"])
                A[b] = A[b] + t[f"A.{b}"] if b in A else t[f"A.{b}"]
                S[b] = S[b] + t[f"S.{b}"] if b in S else t[f"S.{b}"]
            n_tok += int(t["n_tokens"][0])
            n_ex += int(t["n_examples"][0])
        Gc = {b: torch.cat(v) for b, v in G.items()}
        return Loaded(Gc, A, S, n_tok, n_ex)
