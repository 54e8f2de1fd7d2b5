"""On-disk store of per-example training gradients and covariance sums: safetensors shards + JSON records.

Layout: ``<out>/grads/<key>/meta.json``, ``shard_00000.safetensors`` + ``shard_00000.json``, ... Each shard holds the
(possibly projected) per-example gradients ``g.<block>`` (n, out, in) in fp32 (or bf16, ``--store-dtype``) for a
contiguous range of training rows, and that range's covariance sums ``A.<block>`` / ``S.<block>`` (fp64) and token
count, so the curvature never needs a second pass. A shard is written to a temporary name, fsynced and renamed; then
its record ``shard_NNNNN.json`` (sha256 of the file, row range, skipped rows) is written the same way. An interrupted
run (even by SIGKILL) recomputes only the shards without a record, and a recorded shard whose bytes no longer match
its checksum (flipped bytes, truncation) is recomputed, never used; every read checks the checksum again. Per-shard
records let torchrun ranks write their own shards into one folder without a shared index to race on. Rows skipped
for non-finite gradients (see :mod:`gradian.attribute.robust`) are stored as zeros and listed in their shard's record.
``key`` is a content hash of the base model (config plus a fingerprint of its weight files), the adapter files, the
formatted training tokens and masks, and the settings that change the gradients (dtype, projection); eval items and
the method are not in it, so a rerun with other eval items or another method reuses the gradients. Scoring streams
the shards (:mod:`gradian.attribute.source`), so the store need not fit in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gradian.errors import GradianError

SCHEMA = "gradian.gradstore/3"


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


def data_fingerprint(fxs) -> str:
    """Content hash of formatted rows (index, tokens, mask): a list of :class:`FormattedExample`, or rows on disk
    (:class:`gradian.data.TokenizedRows`, hashed from its files without building Python lists)."""
    if hasattr(fxs, "content_sha256"):
        return "tokens:" + fxs.content_sha256()
    h = hashlib.sha256()
    for f in fxs:
        h.update(json.dumps([f.index, f.input_ids, [int(m) for m in f.loss_mask]]).encode())
    return h.hexdigest()


def store_key(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


@dataclass
class Shard:
    """One shard as read back (checksum verified): gradients of rows [lo, hi) and their covariance sums."""

    lo: int
    hi: int
    G: dict[str, torch.Tensor]
    A: dict[str, torch.Tensor]
    S: dict[str, torch.Tensor]
    n_tokens: int
    n_examples: int
    skipped: list[tuple[int, str]]  # (training row position, reason): stored as zeros, not scored


STORE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class GradientStore:
    """The store of one (base, adapter, data, projection) combination. Safe with several writers (torchrun ranks
    writing their own shards into one folder): ``meta.json`` is the same for every writer, and each shard's
    completion record is its own sidecar ``shard_NNNNN.json`` (sha256, rows, skipped rows), written after the shard.

    ``shards``: the shards this process will use (default all); only they are checked on open. ``hash_on_open``:
    whether opening reads every shard to check its checksum (so a bad one is recomputed); a reader that reads every
    shard anyway passes False and relies on :meth:`read_shard`'s check of the same bytes."""

    def __init__(self, root: str | Path, key: str, meta: dict[str, Any], shards: list[int] | None = None,
                 hash_on_open: bool = True):  # fmt: skip
        self.hash_on_open = hash_on_open
        self.dir = Path(root) / key
        self.key = key
        self.meta_path = self.dir / "meta.json"
        self.meta = {"schema": SCHEMA, "key": key, "dtype": "fp32", **meta}
        if self.meta["dtype"] not in STORE_DTYPES:
            raise GradianError(f"unknown store dtype {self.meta['dtype']!r}", fix="use fp32 or bf16")
        self.shards = list(range(self.n_shards)) if shards is None else list(shards)
        self.records: dict[int, dict[str, Any]] = {}  # shard -> its verified sidecar
        self.rejected: list[tuple[int, str]] = []  # (shard, why) recorded as complete but not usable
        old = self._read_json(self.meta_path)
        same = isinstance(old, dict) and all(
            old.get(k) == self.meta.get(k) for k in ("schema", "key", "shard_size", "n_examples", "dtype")
        )
        if same:
            for s in self.shards:
                rec = self._read_json(self._sidecar(s))
                if rec is None:
                    continue
                why = self._check(s, rec.get("sha256") if isinstance(rec, dict) else None)
                if why is None:
                    self.records[s] = rec
                else:
                    self.rejected.append((s, why))
        elif self.dir.is_dir():  # another layout under the same key (older schema): its shards are never used
            for f in self.dir.glob("shard_*"):
                f.unlink(missing_ok=True)
        self._write_json(self.meta_path, self.meta)

    @staticmethod
    def _read_json(path: Path) -> Any:
        try:
            return json.loads(path.read_text()) if path.is_file() else None
        except (json.JSONDecodeError, UnicodeDecodeError, OSError):
            return None

    def _write_json(self, path: Path, data: Any) -> None:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # one name per writer: ranks may write together
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w") as f:
                f.write(json.dumps(data, indent=1, sort_keys=True))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            raise self._write_error(e) from e

    def _write_error(self, e: OSError) -> GradianError:
        return GradianError(
            f"cannot write the gradient store ({e.strerror or e})",
            where=str(e.filename2 or e.filename or self.dir),
            fix="free disk space, or pass an --out folder you can write to",
        )

    def set_rows(self, n: int) -> None:
        """Set the row count (of a store written as rows came, by a training callback) before its last shard."""
        self.meta["n_examples"] = n
        self._write_json(self.meta_path, self.meta)

    @staticmethod
    def shard_name(i: int) -> str:
        return f"shard_{i:05d}.safetensors"

    def _sidecar(self, i: int) -> Path:
        return self.dir / f"shard_{i:05d}.json"

    @property
    def n_shards(self) -> int:
        n, s = self.meta["n_examples"], self.meta["shard_size"]
        return max(1, -(-n // s))

    @property
    def complete(self) -> bool:
        return all(s in self.records for s in self.shards)

    def _check(self, i: int, want: str | None) -> str | None:
        """Why shard ``i`` cannot be used (None when its file matches checksum ``want``)."""
        path = self.dir / self.shard_name(i)
        if not want:
            return "no checksum recorded"
        if not path.is_file():
            return "file missing"
        if self.hash_on_open and sha256_file(path) != want:
            return "checksum mismatch (corrupted or truncated)"
        return None

    def rows(self, i: int) -> tuple[int, int]:
        """Training rows [start, end) of shard ``i``."""
        s, n = self.meta["shard_size"], self.meta["n_examples"]
        return min(i * s, n), min((i + 1) * s, n)

    def missing(self) -> list[int]:
        """This process's shards still to compute, in order."""
        return [i for i in self.shards if i not in self.records]

    def resume_from(self) -> int:
        """Index of the first of this process's training rows not yet stored."""
        miss = self.missing()
        return self.rows(miss[0])[0] if miss else self.meta["n_examples"]

    @property
    def skipped(self) -> list[tuple[int, str]]:
        """(training row position, reason) of every stored row (of this process's shards) left out."""
        return sorted((int(p), why) for s in self.shards for p, why in self.records.get(s, {}).get("skipped", []))

    def write_shard(
        self,
        i: int,
        G: dict[str, torch.Tensor],
        A: dict[str, torch.Tensor],
        S: dict[str, torch.Tensor],
        n_tok: int,
        n_examples: int | None = None,
        skipped: list[tuple[int, str]] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Write shard ``i`` (``skipped``: (training row position, reason) of rows stored as zeros; ``extra``: more
        fields for its record, e.g. the content hash of each row a training callback saw)."""
        from safetensors.torch import save_file

        lo, hi = self.rows(i)
        gdt = STORE_DTYPES[self.meta["dtype"]]
        tensors = {f"g.{k}": v.to(gdt).contiguous() for k, v in G.items()}
        # sums of blocks that share an input are one tensor in memory; safetensors stores each on its own: clone
        tensors |= {f"A.{k}": v.to(torch.float64).clone(memory_format=torch.contiguous_format) for k, v in A.items()}
        tensors |= {f"S.{k}": v.to(torch.float64).clone(memory_format=torch.contiguous_format) for k, v in S.items()}
        tensors["n_tokens"] = torch.tensor([n_tok], dtype=torch.int64)
        tensors["n_examples"] = torch.tensor([hi - lo if n_examples is None else n_examples], dtype=torch.int64)
        skipped_rows = [[int(p), str(why)] for p, why in (skipped or [])]
        tmp = self.dir / f"{self.shard_name(i)}.{os.getpid()}.tmp"
        # one metadata entry: safetensors writes a metadata map in no fixed order; shard bytes should be reproducible
        info = json.dumps({"key": self.key, "shard": i, "skipped": skipped_rows}, sort_keys=True)
        try:
            save_file(tensors, str(tmp), metadata={"gradian": info})
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            digest = sha256_file(tmp)
            os.replace(tmp, self.dir / self.shard_name(i))
        except OSError as e:
            raise self._write_error(e) from e
        rec = {**(extra or {}), "sha256": digest, "rows": [lo, hi], "skipped": skipped_rows}
        self._write_json(self._sidecar(i), rec)
        self.records[i] = rec

    def read_shard(self, i: int, blocks: list[str]) -> Shard:
        """Shard ``i``, checked against its checksum as it is read (a mismatch is an error, never used)."""
        from safetensors.torch import load as load_bytes

        path = self.dir / self.shard_name(i)
        data = path.read_bytes() if path.is_file() else b""
        rec = self.records.get(i) or {}
        if hashlib.sha256(data).hexdigest() != rec.get("sha256"):
            raise GradianError(
                f"gradient store shard {i} does not match its checksum (changed or corrupted on disk)",
                where=str(path),
                fix=f"delete {self.dir} and rerun",
            )
        t = load_bytes(data)
        del data
        lo, hi = self.rows(i)
        return Shard(
            lo,
            hi,
            {b: t[f"g.{b}"] for b in blocks},
            # no sums when none of its batches entered them (all skipped, or a callback's covariance subsample)
            {b: t[f"A.{b}"] for b in blocks if f"A.{b}" in t},
            {b: t[f"S.{b}"] for b in blocks if f"S.{b}" in t},
            int(t["n_tokens"][0]),
            int(t["n_examples"][0]),
            [(int(p), str(w)) for p, w in rec.get("skipped", [])],
        )
