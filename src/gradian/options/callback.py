"""The options of :class:`gradian.integrations.GradianCallback`: what it records during training and where."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gradian.options.base import Options, option


@dataclass(frozen=True)
class CallbackOptions(Options):
    """What :class:`gradian.integrations.GradianCallback` records. The projection must be the one `gradian attribute`
    will use (its defaults: ``proj_dim`` by the adapter's size, ``proj_seed`` 0), or attribute computes the pass."""

    name: ClassVar[str] = "callback"
    keywords: ClassVar[bool] = True

    proj_dim: int | None = option(
        None, "Random projection of each block's wide side (0 = exact; default: auto).", min=0
    )
    proj_seed: int = option(0, "Seed of the random projection (attribute's --proj-seed).")
    store_dtype: str = option("fp32", "Stored per-row gradients: fp32 or bf16.", choices=("fp32", "bf16"))
    shard_rows: int | None = option(None, "Rows per store shard (default: about 256 MiB).", min=1)
    out_dir: str | None = option(None, "Where the record goes (default: the trainer's output_dir).")
    covariance_rows: int | None = option(
        1024,
        "Take the curvature's covariance sums from at least this many rows of the last epoch, one micro-batch in "
        "every k spread over it (None: every row). Each row's gradient is recorded either way, and EK-FAC's "
        "eigenvalue correction uses them all.",
        min=1,
    )
