"""torch.distributed for `torchrun --nproc_per_node N -m gradian attribute ...`: who this process is and the few
collectives the attribution needs.

Nothing here launches processes: torchrun (single node, or many through its rendezvous) starts them and sets
``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR``; :func:`from_env` joins the process group (NCCL when the
device is CUDA, gloo otherwise) and returns a :class:`Dist`. A plain ``gradian attribute`` gets :data:`SINGLE`, whose
collectives are identities, so the attribution code has one path.

What is exchanged: the curvature sums and EK-FAC eigenvalue sums (``all_reduce``), the eval NLLs and query gradients
computed on rank 0 (``broadcast``), and each rank's scores and embeddings for its own rows (``gather`` to rank 0,
which writes the report). Objects travel pickled between these processes only; no file is ever unpickled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from gradian.errors import GradianError


@dataclass(frozen=True)
class Dist:
    """This process's place in the job (rank 0 of 1 when not under torchrun)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    def _dev(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sum of ``t`` over all ranks (a new tensor on ``t``'s device; ``t`` itself when single)."""
        if not self.active:
            return t
        import torch.distributed as td

        x = t.detach().to(self._dev()).clone()
        td.all_reduce(x, op=td.ReduceOp.SUM)
        return x.to(t.device)

    def all_reduce_number(self, x: float | int) -> float | int:
        if not self.active:
            return x
        kind = int if isinstance(x, int) else float
        t = torch.tensor([x], dtype=torch.int64 if kind is int else torch.float64)
        return kind(self.all_reduce(t).item())

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.active:
            return obj
        import torch.distributed as td

        box = [obj if self.is_main else None]
        td.broadcast_object_list(box, src=0, device=self._dev())
        return box[0]

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` in rank order on rank 0 (None elsewhere)."""
        if not self.active:
            return [obj]
        import torch.distributed as td

        if self.backend == "nccl":  # gather_object needs the current device set; all_gather_object is portable
            out: list[Any] = [None] * self.world
            td.all_gather_object(out, obj)
            return out if self.is_main else None
        box: list[Any] | None = [None] * self.world if self.is_main else None
        td.gather_object(obj, box, dst=0)
        return box

    def barrier(self) -> None:
        if self.active:
            import torch.distributed as td

            td.barrier()

    def mine(self, n_shards: int) -> list[int]:
        """The shards this rank computes and scores: round robin, so every rank gets a share of every region."""
        return list(range(self.rank, n_shards, self.world))


SINGLE = Dist()


def env_world() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1") or 1)
    except ValueError:
        return 1


def from_env(device: str | None = None) -> Dist:
    """Join torchrun's process group when ``WORLD_SIZE > 1`` (once per process); :data:`SINGLE` otherwise.

    ``device``: the requested ``--device``; CUDA (explicit, or auto with a GPU present) uses NCCL and pins this
    process to ``cuda:LOCAL_RANK``; anything else uses gloo."""
    world = env_world()
    if world <= 1:
        return SINGLE
    import torch.distributed as td

    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available() and (device is None or device.startswith("cuda"))
    backend = "nccl" if cuda else "gloo"
    if not td.is_available():
        raise GradianError("this torch build has no torch.distributed", fix="run without torchrun")
    if not td.is_initialized():
        if cuda:
            if local >= torch.cuda.device_count():
                raise GradianError(
                    f"LOCAL_RANK {local} but only {torch.cuda.device_count()} GPU(s) on this node",
                    fix="lower torchrun --nproc_per_node to the number of GPUs",
                )
            torch.cuda.set_device(local)
        td.init_process_group(backend=backend)
    else:
        backend = td.get_backend()
    return Dist(rank=td.get_rank(), world=td.get_world_size(), local_rank=local, backend=backend)


def device_for(dist: Dist, device: str | None) -> str | None:
    """The device this rank should use: ``cuda:LOCAL_RANK`` under NCCL when the user asked for cuda or auto."""
    if dist.backend == "nccl" and (device is None or device == "cuda"):
        return f"cuda:{dist.local_rank}"
    return device
