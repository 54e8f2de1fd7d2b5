"""The record's writing side (:mod:`gradian.attribute.recorded` reads it): one training rank's rows, in the order it
saw them, into a :class:`~gradian.attribute.store.GradientStore` (checksummed shards, each with its rows' content
hashes); rank 0 writes the manifest at the end."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from gradian.attribute.recorded import MANIFEST, RECORD_DIR, SCHEMA, row_hash
from gradian.attribute.source import Stats
from gradian.attribute.store import STORE_DTYPES, GradientStore, store_key
from gradian.integrations.capture import Batch


def store_parts(blocks: list[Any], proj: dict[str, Any], dtype: str, epoch: int, world: int, rank: int,
                n_rows: int) -> dict[str, Any]:  # fmt: skip
    """What identifies one rank's store: the blocks, the projection, the epoch and the rank's rows."""
    from gradian.attribute.collector import PROJ_SCHEME

    return {"source": "callback", "blocks": [[b.name, list(b.shape)] for b in blocks], **proj,
            "proj_scheme": PROJ_SCHEME, "dtype": dtype, "epoch": epoch, "world": world, "rank": rank,
            "n_rows": n_rows}  # fmt: skip


class RankWriter:
    """Buffers one rank's rows and writes a shard every ``shard`` rows. A shard already recorded (a resumed run)
    is kept, not written again; the rows buffered at a checkpoint are saved beside the store (:meth:`save_pending`)
    and taken up again by a run resumed from that checkpoint."""

    def __init__(self, root: Path, parts: dict[str, Any], n_rows: int, shard: int, dtype: str, first_row: int = 0):
        meta = {"n_examples": n_rows, "shard_size": shard, "dtype": dtype, "parts": parts,
                "blocks": [{"name": n, "shape": s} for n, s in parts["blocks"]]}  # fmt: skip
        self.store = GradientStore(root / "grads", store_key(parts), meta)
        self.shard, self.dtype = shard, STORE_DTYPES[dtype]
        self.next_row = first_row - first_row % shard  # rows before it, in a shard not recorded, are lost
        self.rows = first_row - self.next_row
        self._clear()
        if self.rows:
            self._load_pending(first_row)

    def _clear(self) -> None:
        self.G: dict[str, list[torch.Tensor]] = {}
        self.hashes: list[str] = []
        self.skipped: list[tuple[int, str]] = []
        self.stats = Stats.empty()

    def add(self, b: Batch) -> None:
        for r in range(b.input_ids.shape[0]):
            keep = b.attention_mask[r]
            self.hashes.append(row_hash(b.input_ids[r][keep], b.labels[r][keep]))
            if not bool(b.finite[r]):
                self.skipped.append((self.next_row + self.rows + len(self.hashes) - 1, "non-finite gradient"))
        finite = bool(b.finite.all())
        for k, v in b.G.items():
            if not finite:  # a non-finite row is stored as zeros (and listed as skipped)
                v = torch.where(b.finite[:, None, None], v, torch.zeros_like(v))
            self.G.setdefault(k, []).append(v.to(self.dtype))
        if finite:
            self.stats.add(b.A, b.S, b.n_tokens, b.n_examples)
        while len(self.hashes) >= self.shard - self.rows:
            self._write(self.shard - self.rows)

    def _write(self, n: int) -> None:
        i = self.next_row // self.shard
        G = {k: torch.cat(v) for k, v in self.G.items()}
        if i not in self.store.records and self.rows == 0:
            self.store.write_shard(i, G, self.stats.A_sum, self.stats.S_sum, self.stats.n_tokens,
                                   self.stats.n_examples, self.skipped, {"row_hashes": self.hashes})  # fmt: skip
        rest = {k: v[n:] for k, v in G.items()}
        hashes = self.hashes[n:]
        self._clear()
        self.G, self.hashes = {k: [v] for k, v in rest.items()}, hashes
        self.next_row, self.rows = self.next_row + self.rows + n, 0
        # rows carried over have no covariance sums of their own: shards are whole batches, so none are

    def discard(self) -> None:
        """Drop this rank's store (shards written, rows buffered): the gradients are not the ones to record."""
        import shutil

        self._clear()
        shutil.rmtree(self.store.dir, ignore_errors=True)

    @property
    def _pending(self) -> Path:
        return self.store.dir / "pending.safetensors"

    def save_pending(self) -> None:
        """Save the rows buffered since the last shard (at a checkpoint: a run resumed from it goes on from them)."""
        from safetensors.torch import save_file

        tensors = {f"g.{k}": torch.cat(v) for k, v in self.G.items()}
        tensors |= {f"A.{k}": v.clone() for k, v in self.stats.A_sum.items()}
        tensors |= {f"S.{k}": v.clone() for k, v in self.stats.S_sum.items()}
        info = {"next_row": self.next_row, "rows": self.rows, "hashes": self.hashes, "skipped": self.skipped,
                "n_tokens": self.stats.n_tokens, "n_examples": self.stats.n_examples}  # fmt: skip
        tmp = self._pending.with_name(f"pending.{os.getpid()}.tmp")
        save_file(tensors, str(tmp), metadata={"gradian": json.dumps(info)})
        os.replace(tmp, self._pending)

    def _load_pending(self, first_row: int) -> None:
        """Take up the rows a checkpoint saved, when they end where this run starts."""
        from safetensors import safe_open

        if not self._pending.is_file():
            return
        with safe_open(str(self._pending), "pt") as f:
            info = json.loads((f.metadata() or {})["gradian"])
            t = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
        if info["rows"] or info["next_row"] != self.next_row or info["next_row"] + len(info["hashes"]) != first_row:
            return
        self.rows, self.hashes, self.skipped = 0, list(info["hashes"]), [tuple(x) for x in info["skipped"]]
        self.G = {k[2:]: [v] for k, v in t.items() if k.startswith("g.")}
        A = {k[2:]: v for k, v in t.items() if k.startswith("A.")}
        self.stats.add(A, {k[2:]: v for k, v in t.items() if k.startswith("S.")}, info["n_tokens"], info["n_examples"])

    def finish(self) -> int:
        """Write the last (short) shard; the store's row count becomes the rows seen. Returns it."""
        n = self.next_row + self.rows + len(self.hashes)
        if n and n != self.store.meta["n_examples"]:  # before the last shard: its row range reads the count
            self.store.set_rows(n)
        if self.hashes:
            self._write(len(self.hashes))
        self._pending.unlink(missing_ok=True)
        return n


def write_manifest(root: Path, info: dict[str, Any]) -> Path:
    """``record.json`` (atomically): the record is finished and `gradian attribute --run` may use it."""
    path = root / MANIFEST
    tmp = path.with_name(f"{MANIFEST}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"schema": SCHEMA, **info}, indent=1), "utf-8")
    os.replace(tmp, path)
    return path


def record_root(out_dir: str | Path) -> Path:
    return Path(out_dir) / RECORD_DIR
