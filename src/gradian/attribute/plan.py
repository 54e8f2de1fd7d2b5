"""Memory plan for `gradian attribute`: what the gradient store, the curvature factors and the scoring will need,
computed before the training pass, and a one-line refusal (with a ``--proj-dim`` that fits) when it will not fit.

Shapes come from the loaded LoRA blocks (:func:`gradian.attribute.collector.find_lora_blocks`) or, without loading
the model, from ``adapter_config.json`` and the base ``config.json`` of a Llama-like model
(:func:`shapes_from_configs`). Every size follows the code that allocates it:

* store (:mod:`gradian.attribute.store`): per shard, ``g.<block>`` (rows, out, in) in the store dtype and
  ``A.<block>`` / ``S.<block>`` covariance sums (in x in, out x out) in fp64, a safetensors header and a JSON
  record; one meta.json. Shard rows as ``api.shard_size`` picks them.
* factors (:func:`gradian.attribute.scores.precondition`, EK-FAC / K-FAC only): per block A and S in fp64, their
  eigenvectors and the (out x in) eigenvalues, on the scoring device.
* scoring, streamed from the store (:mod:`gradian.attribute.source`): on the device, the query rows in and out and
  one block of a shard in fp64; in RAM, the shard being read, the shard cache, the whitened shard and the subspace
  of the clustering embedding (fp64), and the (queries x rows) scores.
* ``exact``: the N x N fp64 kernel and every training gradient in fp64 at once on the device (no streaming), and
  every gradient in RAM.

The store must fit in :data:`USABLE` of the free disk of its directory (no store directory: in RAM); the device
part in :data:`USABLE` of the device's free memory (CUDA: free plus cached-but-unused), the RAM part in
:data:`USABLE` of the available RAM. On a CPU (or MPS) device both parts are RAM. Only probing a CUDA device
imports torch.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gradian.errors import GradianError
from gradian.options import DEFAULTS

USABLE = 0.9  # fraction of free disk / memory a plan may use
MIN_PROJ_DIM = 8
ITEMSIZE = {"fp32": 4, "bf16": 2, "fp16": 2}
from gradian.options.attribute import FACTOR_METHODS  # noqa: E402 - methods that build Kronecker factors

MEMORY_CHUNK_ROWS = 1024  # rows per chunk of gradients held in memory (source.MemorySource)
CACHE_BYTES = 1 << 30  # shards kept in RAM between scoring passes (source.StoreSource)
EMBED_DIM = 32  # gradient_embedding's default dim
EMBED_CACHE_BYTES = 512 << 20  # training rows in the eigenbases (fp64), kept for scores and embedding if they fit
MAX_SHARD_ROWS = 4096  # as api.shard_size
SHARD_TARGET_BYTES = 256 << 20
DEFAULT_NAME_LEN = 56  # len("base_model.model.model.layers.31.self_attn.q_proj.lora_A")

# Llama-like module names -> (d_in, d_out) as functions of the base config
LLAMA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_PARENT = {m: "self_attn" if m in LLAMA_MODULES[:4] else "mlp" for m in LLAMA_MODULES}


@dataclass(frozen=True)
class Shape:
    """One LoRA block's unprojected shape: ``kind`` "A" (d_in wide, d_out = r) or "B" (d_in = r, d_out wide)."""

    kind: str
    d_in: int
    d_out: int
    name: str = ""

    def projected(self, proj_dim: int) -> tuple[int, int]:
        """(out, in) of the stored gradient, as ``collector.attach_projections`` + ``Block.shape`` give it."""
        if self.kind == "A":
            return (self.d_out, proj_dim if 0 < proj_dim < self.d_in else self.d_in)
        return (proj_dim if 0 < proj_dim < self.d_out else self.d_out, self.d_in)

    @property
    def wide(self) -> int:
        return self.d_in if self.kind == "A" else self.d_out


def block_shapes(blocks: Sequence[Any]) -> list[Shape]:
    """Unprojected shapes of ``blocks``: :class:`~gradian.attribute.collector.Block` objects (any projection
    attached is ignored), :class:`Shape` or ``(kind, d_in, d_out)`` tuples as :func:`shapes_from_configs` returns."""
    out = []
    for b in blocks:
        if isinstance(b, Shape):
            out.append(b)
        elif isinstance(b, tuple | list):
            out.append(Shape(str(b[0]), int(b[1]), int(b[2]), str(b[3]) if len(b) > 3 else ""))
        else:
            out.append(Shape(b.kind, int(b.d_in), int(b.d_out), b.name))
    if any(s.kind not in ("A", "B") for s in out):
        raise ValueError("block kind must be 'A' or 'B'")
    return out


def human_bytes(n: float | None) -> str:
    """``1536`` -> ``"1.5 KiB"``: three significant digits, binary units (as `gradian doctor` prints GiB)."""
    if n is None:
        return "unknown"
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    i = 0
    while abs(n) >= 1000 and i < len(units) - 1:
        n /= 1024
        i += 1
    return f"{int(n)} B" if i == 0 else f"{n:.3g} {units[i]}"


def shard_rows(floats_per_row: int, batch_size: int = DEFAULTS.batch_size, fixed: int | None = None) -> int:
    """Rows per store shard, as ``api.shard_size`` chooses them: ``fixed`` (or ``GRADIAN_SHARD_ROWS``) rounded down
    to the batch size, else ~256 MiB of fp32 gradients (whatever the store dtype), at most 4,096 rows, a multiple
    of the batch size."""
    fixed = fixed or int(os.environ.get("GRADIAN_SHARD_ROWS", "0") or 0)
    if fixed:
        return max(1, fixed // batch_size) * batch_size
    per_row = 4 * floats_per_row
    return max(1, min(MAX_SHARD_ROWS, SHARD_TARGET_BYTES // max(per_row, 1)) // batch_size) * batch_size


def cache_bytes() -> int:
    """Shards the streamed scoring keeps in RAM between passes (:class:`~gradian.attribute.source.StoreSource`);
    ``GRADIAN_CACHE_BYTES`` overrides."""
    return int(os.environ.get("GRADIAN_CACHE_BYTES") or CACHE_BYTES)


@dataclass
class MemoryPlan:
    """Sizes in bytes of what an attribution run will need, and the budgets it is checked against.

    Where each part lives: the store on disk (in RAM when there is no store dir); the factors, the device side of
    the scoring and ``exact``'s kernel on the scoring device; the rest of the scoring (the shard being read, the
    shard cache, the clustering embedding, the score matrix) in RAM. On a CPU (or MPS) device both are RAM."""

    n_rows: int
    n_blocks: int
    proj_dim: int
    store_dtype: str  # "fp32" | "bf16"
    floats_per_row: int  # sum of Block.numel (projected shapes)
    store_bytes: int  # shards: gradients + per-shard covariance sums + headers + JSON records
    factor_bytes: int  # fp64 A, S, their eigenvectors and eigenvalues, all blocks (0 without K-FAC/EK-FAC)
    scoring_bytes: int  # working set of the streamed scoring (host + device parts)
    exact_bytes: int | None  # method "exact": N x N kernel + all G in fp64, on the device
    disk_free: int | None
    ram_available: int | None
    device_free: int | None
    scoring_host_bytes: int = 0  # the part of scoring_bytes in RAM
    method: str = DEFAULTS.method
    device: str = "cpu"
    store_dir: str | None = None  # None: no store, the gradients stay in RAM
    n_queries: int = 1
    n_shards: int = 1
    shard_rows: int = 1
    stored_bytes: int = 0  # already on disk and reusable (not needed again)
    batch_size: int = DEFAULTS.batch_size
    shard_size: int | None = None  # the run's shard_rows override, if any
    shapes: list[Shape] = field(default_factory=list, repr=False)

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def device_bytes(self) -> int:
        """Needed on the scoring device: factors, the device side of the scoring, exact's kernel."""
        return self.factor_bytes + self.scoring_bytes - self.scoring_host_bytes + (self.exact_bytes or 0)

    @property
    def ram_bytes(self) -> int:
        """Needed in RAM: the host side of the scoring, the gradients when there is no store, exact's copy of all
        gradients, and on a CPU device everything on the device too."""
        need = self.scoring_host_bytes
        if self.store_dir is None:
            need += self.store_bytes
        if self.exact_bytes is not None and self.on_gpu:  # materialized in RAM, then copied to the device
            need += self.n_rows * self.floats_per_row * ITEMSIZE[self.store_dtype]
        return need + (0 if self.on_gpu else self.device_bytes)

    def lines(self) -> list[str]:
        """Two to four short human lines for the terminal."""
        rows = f"{self.n_rows:,} rows x {self.floats_per_row:,} floats ({self.store_dtype}"
        rows += f", proj-dim {self.proj_dim})" if self.proj_dim else ", no projection)"
        if self.store_dir is not None:
            free = f" ({human_bytes(self.disk_free)} free)" if self.disk_free is not None else ""
            where = f"on disk in {self.store_dir}{free}"
        else:
            where = "in RAM (no store dir)"
        out = [f"gradient store: {rows} = {human_bytes(self.store_bytes)} {where}"]
        factors = (
            f"curvature factors {human_bytes(self.factor_bytes)} (fp64, {self.n_blocks} blocks) + "
            if self.method in FACTOR_METHODS
            else ""
        )
        exact = f" + exact kernel and gradients {human_bytes(self.exact_bytes)}" if self.exact_bytes is not None else ""
        ram = f" ({human_bytes(self.ram_available)} available)" if self.ram_available is not None else ""
        if self.on_gpu:
            free = f" ({human_bytes(self.device_free)} free)" if self.device_free is not None else ""
            dev = human_bytes(self.scoring_bytes - self.scoring_host_bytes)
            out.append(f"on {self.device}: {factors}scoring {dev}{exact} = {human_bytes(self.device_bytes)}{free}")
            out.append(f"in RAM: scoring {human_bytes(self.ram_bytes)}{ram}")
        else:
            scoring = human_bytes(self.scoring_bytes)
            out.append(
                f"in RAM ({self.device}): {factors}scoring {scoring}{exact} = {human_bytes(self.ram_bytes)}{ram}"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("shapes")
        d |= {"device_bytes": self.device_bytes, "ram_bytes": self.ram_bytes}
        return d

    def problems(self) -> list[tuple[str, str]]:
        """``(where, what)`` for everything that will not fit; empty when the plan fits."""
        out = []
        cap = f"a run uses at most {USABLE:.0%}"
        need = max(self.store_bytes - self.stored_bytes, 0)
        if self.store_dir is not None and self.disk_free is not None and need > USABLE * self.disk_free:
            out.append(
                (
                    self.store_dir,
                    f"the gradient store needs {human_bytes(need)} ({self.n_rows:,} rows x "
                    f"{self.floats_per_row:,} floats, {self.store_dtype}) but only "
                    f"{human_bytes(self.disk_free)} is free on disk ({cap})",
                )
            )
        parts = []
        if self.factor_bytes:
            parts.append(f"curvature factors {human_bytes(self.factor_bytes)}")
        if self.exact_bytes is not None:
            parts.append(
                f"exact's {self.n_rows:,} x {self.n_rows:,} kernel and gradients {human_bytes(self.exact_bytes)}"
            )
        if self.on_gpu and self.device_free is not None and self.device_bytes > USABLE * self.device_free:
            on_device = ", ".join([*parts, f"scoring {human_bytes(self.scoring_bytes - self.scoring_host_bytes)}"])
            out.append(
                (
                    self.device,
                    f"scoring needs {human_bytes(self.device_bytes)} on {self.device} ({on_device}) but only "
                    f"{human_bytes(self.device_free)} is free ({cap})",
                )
            )
        if self.ram_available is not None and self.ram_bytes > USABLE * self.ram_available:
            what = [f"scoring {human_bytes(self.scoring_bytes if not self.on_gpu else self.scoring_host_bytes)}"]
            if self.store_dir is None:
                what.append(f"all training gradients {human_bytes(self.store_bytes)} (no store dir)")
            what = (parts if not self.on_gpu else []) + what
            out.append(
                (
                    "RAM",
                    f"scoring needs {human_bytes(self.ram_bytes)} of RAM ({', '.join(what)}) but only "
                    f"{human_bytes(self.ram_available)} is available ({cap})",
                )
            )
        return out

    def fits(self) -> bool:
        return not self.problems()


def _factor_bytes(shapes: Sequence[Shape], proj_dim: int) -> int:
    total = 0
    for s in shapes:
        o, i = s.projected(proj_dim)
        total += 8 * (2 * i * i + 2 * o * o + o * i)  # A, QA, S, QS, eigenvalues
    return total


def _shard_overhead(shapes: Sequence[Shape], dims: Sequence[tuple[int, int]], rows: int, shard_bytes: int) -> int:
    """Upper estimate of one shard's safetensors header (a JSON entry per tensor: name, dtype, shape, offsets) and
    its JSON record (sha256, rows, skipped rows)."""
    offsets = 2 * len(str(shard_bytes)) + 1
    total = 512  # length prefix, metadata, n_tokens / n_examples, padding; the record
    for s, (o, i) in zip(shapes, dims, strict=True):
        name = (len(s.name) if s.name else DEFAULT_NAME_LEN) + 2  # "g." / "A." / "S."
        total += 3 * (name + 48 + offsets) + len(f"{rows},{o},{i}") + len(f"{i},{i}") + len(f"{o},{o}")
    return total


def _meta_bytes(shapes: Sequence[Shape]) -> int:
    """Upper estimate of the store's meta.json (indented; its block list twice, and the fingerprints)."""
    return 1024 + sum(2 * (len(s.name) if s.name else DEFAULT_NAME_LEN) + 128 for s in shapes)


def estimate(
    blocks: Sequence[Any],
    n_rows: int,
    *,
    proj_dim: int,
    store_dtype: str = "fp32",
    method: str = DEFAULTS.method,
    n_queries: int = 1,
    batch_size: int = DEFAULTS.batch_size,
    shard_size: int | None = None,
    store: bool = True,
) -> dict[str, int | None]:
    """The sizes of a plan, without probing the machine (see :func:`make_plan`)."""
    if store_dtype not in ITEMSIZE:
        raise GradianError(f"unknown store dtype {store_dtype!r}", fix="use " + " or ".join(ITEMSIZE))
    shapes = block_shapes(blocks)
    item = ITEMSIZE[store_dtype]
    dims = [s.projected(proj_dim) for s in shapes]
    F = sum(o * i for o, i in dims)
    widest = max((o * i for o, i in dims), default=0)
    cov = sum(8 * (o * o + i * i) for o, i in dims)
    rows_per_shard = shard_rows(F, batch_size, shard_size)
    n_shards = max(1, math.ceil(n_rows / rows_per_shard))
    grads = n_rows * F * item

    def shard_bytes(rows: int) -> int:
        body = rows * F * item + cov + 16
        return body + _shard_overhead(shapes, dims, rows, body)

    last = n_rows - (n_shards - 1) * rows_per_shard
    store_bytes = (n_shards - 1) * shard_bytes(rows_per_shard) + shard_bytes(last) + _meta_bytes(shapes)
    M = n_queries + 1  # the query items and their weighted sum
    N = n_rows
    k = min(N, EMBED_DIM + 10)
    if store:  # StoreSource: one shard at a time (file bytes + tensors), plus the shard cache
        chunk = min(rows_per_shard, N)
        host = 2 * chunk * F * item + min(cache_bytes(), grads)
    else:  # MemorySource: 1024-row slices of gradients already in RAM (counted as the store)
        chunk = min(MEMORY_CHUNK_ROWS, N)
        host = 0
    host += 8 * (chunk * F + M * F + M * N + 2 * N + 3 * F * k + N * k)  # whitened chunk, harm, embedding
    host += 8 * N * F if 8 * N * F <= EMBED_CACHE_BYTES else 0  # the rotated rows (scores, embedding), when they fit
    device = 8 * (2 * M * F + 2 * chunk * widest)  # query rows in and out, one block of a chunk in fp64 (rotated)
    factors = _factor_bytes(shapes, proj_dim) if method in FACTOR_METHODS else 0
    exact = 8 * (N * N + N * F + N * M) if method == "exact" else None
    return {
        "floats_per_row": F,
        "store_bytes": store_bytes,
        "factor_bytes": factors,
        "scoring_bytes": host + device,
        "scoring_host_bytes": host,
        "exact_bytes": exact,
        "n_shards": n_shards,
        "shard_rows": rows_per_shard,
    }


def probe_disk_free(path: str | Path) -> int | None:
    """Free bytes on the filesystem of ``path`` (or of its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return int(shutil.disk_usage(p).free)
    except OSError:
        return None


def probe_ram_available() -> int | None:
    """Available RAM in bytes: psutil when installed, else ``MemAvailable`` of /proc/meminfo, else None."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def probe_device_free(device: Any) -> int | None:
    """Free memory of a CUDA device (free plus what torch has cached but not allocated); None for others."""
    dev = str(device)
    if not dev.startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    d = torch.device(dev)
    free, _ = torch.cuda.mem_get_info(d)
    return int(free + torch.cuda.memory_reserved(d) - torch.cuda.memory_allocated(d))


_UNSET: Any = object()


@dataclass(frozen=True)
class Budgets:
    """Free disk / RAM / device memory a plan is checked against: each probed unless given (None: skip that check)."""

    disk_free: int | None = _UNSET
    ram_available: int | None = _UNSET
    device_free: int | None = _UNSET

    def resolved(self, out_dir: str | Path | None, device: Any) -> tuple[int | None, int | None, int | None]:
        disk = self.disk_free
        if disk is _UNSET:
            disk = probe_disk_free(out_dir) if out_dir is not None else None
        ram = probe_ram_available() if self.ram_available is _UNSET else self.ram_available
        dev = probe_device_free(device) if self.device_free is _UNSET else self.device_free
        return disk, ram, dev


AUTO_PROJECT_ABOVE = 1 << 16  # LoRA parameters per example; above this, project by default
AUTO_PROJ_DIM = 32


def auto_proj_dim(blocks: Sequence[Any]) -> int:
    """The ``--proj-dim`` a run picks when none is given (``AUTO_PROJ_DIM`` above ``AUTO_PROJECT_ABOVE`` LoRA
    parameters, else 0): the one home of that rule."""
    n_params = sum(s.d_in * s.d_out for s in block_shapes(blocks))
    return AUTO_PROJ_DIM if n_params > AUTO_PROJECT_ABOVE else 0


def make_plan(
    blocks: Sequence[Any],
    n_rows: int,
    *,
    proj_dim: int | None,
    store_dtype: str = "fp32",
    method: str = DEFAULTS.method,
    out_dir: str | Path | None = None,
    device: Any = "cpu",
    n_queries: int = 1,
    batch_size: int = DEFAULTS.batch_size,
    shard_size: int | None = None,
    stored_bytes: int = 0,
    budgets: Budgets | None = None,
) -> MemoryPlan:
    """The memory plan of attributing ``n_rows`` training rows over ``blocks`` (Blocks or shapes, see
    :func:`block_shapes`) with ``proj_dim`` (0: none; None: the run's default, :func:`auto_proj_dim`; the
    projection attached to the blocks is ignored).

    ``out_dir``: the store directory (``<out>/grads``; None: no store, the gradients stay in RAM). ``device``: the
    model's (scoring) device. ``n_queries``: query items (before the eval pass, the number of eval items is an upper
    bound). ``shard_size``: the run's ``shard_rows`` override. ``stored_bytes``: what an existing store already holds
    for this run (reused, so not needed again). ``budgets``: free disk / RAM / device memory, probed unless given."""
    shapes = block_shapes(blocks)
    if proj_dim is None:
        proj_dim = auto_proj_dim(shapes)
    est = estimate(
        shapes,
        n_rows,
        proj_dim=proj_dim,
        store_dtype=store_dtype,
        method=method,
        n_queries=n_queries,
        batch_size=batch_size,
        shard_size=shard_size,
        store=out_dir is not None,
    )
    disk_free, ram_available, device_free = (budgets or Budgets()).resolved(out_dir, device)
    return MemoryPlan(
        n_rows=n_rows,
        n_blocks=len(shapes),
        proj_dim=proj_dim,
        store_dtype=store_dtype,
        floats_per_row=int(est["floats_per_row"] or 0),
        store_bytes=int(est["store_bytes"] or 0),
        factor_bytes=int(est["factor_bytes"] or 0),
        scoring_bytes=int(est["scoring_bytes"] or 0),
        exact_bytes=est["exact_bytes"],
        disk_free=disk_free,
        ram_available=ram_available,
        device_free=device_free,
        scoring_host_bytes=int(est["scoring_host_bytes"] or 0),
        method=method,
        device=str(device),
        store_dir=str(out_dir) if out_dir is not None else None,
        n_queries=n_queries,
        n_shards=int(est["n_shards"] or 1),
        shard_rows=int(est["shard_rows"] or 1),
        stored_bytes=stored_bytes,
        batch_size=batch_size,
        shard_size=shard_size,
        shapes=shapes,
    )


def replan(plan: MemoryPlan, proj_dim: int) -> MemoryPlan:
    """The same run with another ``proj_dim`` (same budgets; nothing stored is reusable)."""
    return make_plan(
        plan.shapes,
        plan.n_rows,
        proj_dim=proj_dim,
        store_dtype=plan.store_dtype,
        method=plan.method,
        out_dir=plan.store_dir,
        device=plan.device,
        n_queries=plan.n_queries,
        batch_size=plan.batch_size,
        shard_size=plan.shard_size,
        budgets=Budgets(plan.disk_free, plan.ram_available, plan.device_free),
    )


def suggest_proj_dim(plan: MemoryPlan) -> int | None:
    """The largest power of two >= 8 below ``plan``'s ``proj_dim`` (below its widest block side when unprojected)
    with which everything fits, or None when even 8 does not."""
    widest = max((s.wide for s in plan.shapes), default=0)
    top = plan.proj_dim if 0 < plan.proj_dim < widest else widest
    k = 1 << max(math.ceil(math.log2(max(top, 1))) - 1, 0)  # the largest power of two < top
    while k >= MIN_PROJ_DIM:
        if replan(plan, k).fits():
            return k
        k //= 2
    return None


def check_plan(plan: MemoryPlan) -> None:
    """Raise a one-line :class:`GradianError` naming the sizes and the fix when something will not fit."""
    problems = plan.problems()
    if not problems:
        return
    wheres = {w for w, _ in problems}
    fixes = []
    k = suggest_proj_dim(plan)
    if k is not None:
        p = replan(plan, k)
        fixes.append(f"pass --proj-dim {k} (store {human_bytes(p.store_bytes)})")
    if plan.store_dir is not None and plan.store_dir in wheres:
        fixes.append(f"free disk in {plan.store_dir} or pass another --out")
    if wheres - {plan.store_dir}:
        if plan.method == "exact":
            fixes.append("use --method ekfac (it streams the gradients; exact holds an N x N kernel)")
        elif plan.store_dir is None:
            fixes.append("pass --out so the gradients go to a store on disk")
        else:
            fixes.append("use a machine with more memory or attribute fewer training rows")
    raise GradianError("; ".join(p for _, p in problems), where=problems[0][0], fix="; or ".join(fixes))


# --- shapes without loading the model ------------------------------------------------------------------------------


def _text_config(base_cfg: dict[str, Any]) -> dict[str, Any]:
    if "hidden_size" not in base_cfg and isinstance(base_cfg.get("text_config"), dict):
        return base_cfg["text_config"]
    return base_cfg


def _pattern_key(keys: Sequence[str], name: str) -> str | None:
    """PEFT's rule for rank_pattern / alpha_pattern keys: the key, as a regex, matches a dotted suffix of the name."""
    for key in keys:
        if key == name or re.match(rf"(^|.*\.){key}$", name):
            return key
    return None


def _targeted(name: str, spec: Any) -> bool:
    """PEFT's target_modules / exclude_modules matching: a str is a full regex match, a list suffix names."""
    if spec is None:
        return False
    if isinstance(spec, str):
        return spec == "all-linear" or re.fullmatch(spec, name) is not None
    return any(name == t or name.endswith("." + t) for t in spec)


def shapes_from_configs(adapter_cfg: dict[str, Any], base_cfg: dict[str, Any]) -> list[tuple[str, int, int]]:
    """The LoRA blocks ``(kind, d_in, d_out)`` of a Llama-like model (Llama, Mistral, Qwen2, Gemma: q/k/v/o and
    gate/up/down projections), in the loader's block order, from ``adapter_config.json`` (r, target_modules,
    layers_to_transform, rank_pattern, exclude_modules) and the base ``config.json`` (hidden_size,
    intermediate_size, num_attention_heads, num_key_value_heads, head_dim, num_hidden_layers)."""
    cfg = _text_config(base_cfg)
    try:
        hidden = int(cfg["hidden_size"])
        inter = int(cfg["intermediate_size"])
        heads = int(cfg["num_attention_heads"])
        layers = int(cfg["num_hidden_layers"])
    except (KeyError, TypeError, ValueError) as e:
        raise GradianError(
            f"base config.json lacks {e} (not a Llama-like config)", fix="load the model to plan from its blocks"
        ) from e
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    io = {
        "q_proj": (hidden, heads * head_dim),
        "k_proj": (hidden, kv * head_dim),
        "v_proj": (hidden, kv * head_dim),
        "o_proj": (heads * head_dim, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }
    r = int(adapter_cfg.get("r") or 8)
    targets = adapter_cfg.get("target_modules")
    if targets is None:
        raise GradianError("adapter_config.json has no target_modules", fix="load the model to plan from its blocks")
    if not isinstance(targets, str):
        targets = list(targets)
        known = set(LLAMA_MODULES)
        for t in targets:
            leaf = t.rsplit(".", 1)[-1]
            if leaf not in known and "embed" not in leaf and "lm_head" not in leaf:
                raise GradianError(
                    f"target module {t!r} is not a Llama projection ({', '.join(LLAMA_MODULES)})",
                    where="adapter_config.json",
                    fix="load the model to plan from its blocks",
                )
    only = adapter_cfg.get("layers_to_transform")
    only_layers = None if only is None else {int(only)} if isinstance(only, int) else {int(x) for x in only}
    ranks = adapter_cfg.get("rank_pattern") or {}
    exclude = adapter_cfg.get("exclude_modules")
    out: list[tuple[str, int, int]] = []
    for layer in range(layers):
        if only_layers is not None and layer not in only_layers:
            continue
        for m in LLAMA_MODULES:
            name = f"model.layers.{layer}.{_PARENT[m]}.{m}"
            if not _targeted(name, targets) or _targeted(name, exclude):
                continue
            key = _pattern_key(list(ranks), name)
            rank = int(ranks[key]) if key is not None else r
            d_in, d_out = io[m]
            out.append(("A", d_in, rank))
            out.append(("B", rank, d_out))
    return out


def shapes_from_dirs(adapter_dir: str | Path, base_dir: str | Path) -> list[tuple[str, int, int]]:
    """:func:`shapes_from_configs` from a local adapter dir and base model dir (their JSON configs only)."""
    cfgs = []
    for path in (Path(adapter_dir) / "adapter_config.json", Path(base_dir) / "config.json"):
        try:
            cfgs.append(json.loads(path.read_text()))
        except FileNotFoundError as e:
            raise GradianError("file not found", where=str(path)) from e
        except json.JSONDecodeError as e:
            raise GradianError(f"invalid JSON ({e.msg}, line {e.lineno})", where=str(path)) from e
    return shapes_from_configs(cfgs[0], cfgs[1])
