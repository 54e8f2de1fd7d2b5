"""Training gradients recorded during training (:class:`gradian.integrations.GradianCallback`) and read back here.

Layout under the trainer's output dir: ``gradian-record/record.json`` (the manifest: blocks, projection, which
steps the gradients were taken at, one store key per training rank) and ``gradian-record/grads/<key>/``, one
:class:`~gradian.attribute.store.GradientStore` per training rank (same shards, checksums and resume as the pass's
store). Rows are in the order that rank's trainer saw them; each shard's record lists the content hash of every row
(:func:`row_hash` of its tokens and label mask), so `gradian attribute` maps them to its own formatted rows by
content, whatever the shuffle or the world size. A row of the training file the record lacks makes the whole record
unused (one pass instead, and a note says why)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gradian.attribute.source import GradSource, Stats
from gradian.dist import SINGLE, Dist

RECORD_DIR = "gradian-record"
MANIFEST = "record.json"
SCHEMA = "gradian.record/1"


def row_hash(input_ids: Sequence[int] | np.ndarray | torch.Tensor, loss_mask: Sequence[Any] | np.ndarray | torch.Tensor
             ) -> str:  # fmt: skip
    """Content hash of one row as the trainer saw it: its tokens and which of them are labels."""
    ids = np.asarray(input_ids, dtype=np.int64)
    mask = np.asarray(loss_mask, dtype=np.uint8)
    return hashlib.blake2b(ids.tobytes() + b"|" + mask.tobytes(), digest_size=12).hexdigest()


def record_dir(run_dir: str | Path) -> Path | None:
    """The record folder of a run's output dir, when a finished record is there."""
    d = Path(run_dir) / RECORD_DIR
    return d if (d / MANIFEST).is_file() else None


def read_manifest(rec: Path) -> dict[str, Any]:
    return json.loads((rec / MANIFEST).read_text("utf-8"))


def weights_note(m: dict[str, Any]) -> str:
    """Which weights the recorded gradients were taken at."""
    a, b, last = m["first_step"], m["last_step"], m["max_steps"]
    return (
        f"training gradients and curvature recorded by GradianCallback during epoch {m['epoch']} of {m['epochs']} "
        f"(steps {a}-{b} of {last}): each row's gradient is taken at the adapter of the step that trained on it, "
        f"before that step's update, not at the final adapter; the query gradients are at the final adapter"
        + (f"; the curvature's covariance sums are from one micro-batch in {m['covariance_every']} of that epoch"
           if m.get("covariance_every", 1) > 1 else "")
        + (f"; the recorded gradients carry the training forward's noise ({_noise_words(noise)}), which the pass "
           "leaves out"
           if (noise := m.get("training_noise")) else "")
    )  # fmt: skip


def _noise_words(noise: dict[str, float]) -> str:
    names = {"lora_dropout": "LoRA dropout", "neftune_noise_alpha": "NEFTune noise alpha"}
    return ", ".join(f"{names.get(k, k)} {v:g}" for k, v in noise.items())


def weight_norms(blocks: Sequence[Any]) -> dict[str, float]:
    """Each LoRA block's squared weight norm: which adapter a record belongs to (a retrained one differs)."""
    return {b.name: float(b.module.weight.detach().double().pow(2).sum()) for b in blocks}


def same_adapter(recorded: dict[str, float], blocks: Sequence[Any], rtol: float = 1e-2) -> bool:
    """Whether the loaded adapter is the one the record ended with (up to the saved precision)."""
    now = weight_norms(blocks)
    return all(abs(now.get(k, 0.0) - v) <= rtol * max(abs(v), 1e-12) for k, v in recorded.items())


class RecordedSource(GradSource):
    """The recorded rows of this process's share of the shards, mapped to training-row positions."""

    def __init__(self, parts: list[tuple[Any, int, torch.Tensor, torch.Tensor]], names: list[str], dist: Dist,
                 cache_bytes: int) -> None:  # fmt: skip
        self.parts = parts  # (store, shard, rows within the shard, their positions)
        self.names = list(names)
        self.dist = dist
        self.cache_bytes = cache_bytes
        self._cache: dict[int, dict[str, torch.Tensor]] = {}
        self._cached = 0
        self.positions = torch.cat([p[3] for p in parts]) if parts else torch.zeros(0, dtype=torch.long)

    def _read(self, j: int) -> dict[str, torch.Tensor]:
        if j in self._cache:
            return self._cache[j]
        store, i, _, _ = self.parts[j]
        return self._remember(j, store.read_shard(i, self.names).G)

    def _remember(self, j: int, G: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Part ``j``'s rows of its shard, cached while the cache has room."""
        if j in self._cache:
            return self._cache[j]
        G = {k: v.index_select(0, self.parts[j][2]) for k, v in G.items()}
        size = sum(v.numel() * v.element_size() for v in G.values())
        if self._cached + size <= self.cache_bytes:
            self._cache[j], self._cached = G, self._cached + size
        return G

    def chunks(self) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
        off = 0
        for j, part in enumerate(self.parts):
            n = int(part[2].numel())
            if n:
                yield off, self._read(j)
            off += n

    def stats(self) -> Stats:
        """Covariance sums of this process's shards (read once each)."""
        total = Stats.empty()
        for j, (store, i, _, _) in enumerate(self.parts):
            sh = store.read_shard(i, self.names)
            self._remember(j, sh.G)
            total.add(sh.A, sh.S, sh.n_tokens, sh.n_examples)
        return total


def open_record(rec: Path, blocks: Sequence[Any], run_key: dict[str, Any], train_fx: Sequence, dist: Dist = SINGLE,
                cache_bytes: int = 1 << 30) -> tuple[RecordedSource | None, list[tuple[int, str]], str]:  # fmt: skip
    """This process's share of a record as a source over ``train_fx``'s positions, the skipped rows, and a note: what
    was used, or why the record was not (then the source is None)."""
    from gradian.attribute.store import GradientStore

    m = read_manifest(rec)
    want = [[b.name, list(b.shape)] for b in blocks]
    if m.get("schema") != SCHEMA:
        return None, [], f"recorded gradients in {rec} not used: unknown schema {m.get('schema')!r}"
    if m["blocks"] != want or m["proj_dim"] != run_key["proj_dim"] or m["proj_seed"] != run_key["proj_seed"]:
        why = (f"their LoRA blocks or projection (proj_dim {m['proj_dim']}, seed {m['proj_seed']}) differ from this "
               f"run's (proj_dim {run_key['proj_dim']}, seed {run_key['proj_seed']})")  # fmt: skip
        return None, [], f"recorded gradients in {rec} not used: {why}"
    if "weight_norms" in m and not same_adapter(m["weight_norms"], blocks):
        why = "the adapter is not the one the record ended with (trained again without the callback?)"
        return None, [], f"recorded gradients in {rec} not used: {why}"
    at: dict[str, list[int]] = {}
    for q in range(len(train_fx)):
        f = train_fx[q]
        at.setdefault(row_hash(f.input_ids, f.loss_mask), []).append(q)
    shards: list[tuple[Any, int, list[int], list[int], list[tuple[int, str]]]] = []
    taken: set[str] = set()
    for key in m["stores"]:
        # read_shard checks each shard's checksum on the bytes it loads; hashing them on open too read them twice
        store = GradientStore(rec / "grads", key, _meta(rec / "grads" / key), hash_on_open=False)
        if not store.complete:
            return None, [], f"recorded gradients in {store.dir} not used: the record is incomplete"
        for i in store.shards:
            rows: list[int] = []
            pos: list[int] = []
            skipped: list[tuple[int, str]] = []
            skip = {p - store.rows(i)[0]: why for p, why in store.records[i].get("skipped", [])}
            for j, h in enumerate(store.records[i]["row_hashes"]):
                if h in taken or h not in at:  # a row seen twice (a padded distributed epoch), or not in this file
                    continue
                taken.add(h)
                for q in at[h]:
                    if j in skip:
                        skipped.append((q, skip[j]))
                    else:
                        rows.append(j)
                        pos.append(q)
            shards.append((store, i, rows, pos, skipped))
    missing = sum(len(v) for h, v in at.items() if h not in taken)
    if missing:
        why = (f"{missing} of {len(train_fx)} training rows are not in the record (another training file, or tokens "
               "formatted differently from the trainer's)")  # fmt: skip
        return None, [], f"recorded gradients in {rec} not used: {why}"
    mine = [shards[i] for i in dist.mine(len(shards))]
    parts = [(s, i, torch.tensor(r, dtype=torch.long), torch.tensor(p, dtype=torch.long)) for s, i, r, p, _ in mine]
    skipped_mine = sorted(x for sh in mine for x in sh[4])
    return RecordedSource(parts, [b.name for b in blocks], dist, cache_bytes), skipped_mine, weights_note(m)


def _meta(store_dir: Path) -> dict[str, Any]:
    """A store's meta.json as written (the fields :class:`GradientStore` compares)."""
    meta = json.loads((store_dir / "meta.json").read_text("utf-8"))
    return {k: v for k, v in meta.items() if k not in ("schema", "key")}
