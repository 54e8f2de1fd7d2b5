"""torch.distributed for `torchrun --nproc_per_node N -m gradian attribute ...`: who this process is and the few
collectives the attribution needs.

Nothing here launches processes: torchrun (single node, or many through its rendezvous) starts them and sets
``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR``; :func:`from_env` joins the process group (NCCL when the
device is CUDA, gloo otherwise) and returns a :class:`Dist`. A plain ``gradian attribute`` gets :data:`SINGLE`, whose
collectives are identities, so the attribution code has one path.

What is exchanged: the curvature sums and EK-FAC eigenvalue sums (``all_reduce``), the eval NLLs and query gradients
computed on rank 0 (``broadcast``), and each rank's scores and embeddings for its own rows (``gather`` to rank 0,
which writes the report). Objects travel pickled between these processes only; no file is ever unpickled.

Every rank runs the same collectives on the same sizes whatever rows it owns (:meth:`Dist.all_reduce_dict`), and a
failing rank ends every rank with one line (:func:`rank_prefix`, :func:`record_failure`, :func:`peer_lost` and the
SIGTERM handler, used by ``gradian.cli.main``).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradian.errors import GradianError

if TYPE_CHECKING:
    import torch


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
        import torch

        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sum of ``t`` over all ranks (a new tensor on ``t``'s device; ``t`` itself when single)."""
        if not self.active:
            return t
        import torch.distributed as td

        x = t.detach().to(self._dev()).clone()
        td.all_reduce(x, op=td.ReduceOp.SUM)
        return x.to(t.device)

    def all_reduce_dict(self, d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per-key sums over all ranks of dicts that may differ in keys: a rank with no rows (fewer shards than ranks)
        holds none. The ranks first agree on every key's shape and dtype (one small object exchange), then each key
        is summed in sorted order, zeros standing in for the keys a rank lacks, so every rank runs the same
        collectives on the same sizes."""
        if not self.active:
            return d
        import torch
        import torch.distributed as td

        meta = {k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in d.items()}
        every: list[Any] = [None] * self.world
        td.all_gather_object(every, meta)
        want: dict[str, tuple[tuple[int, ...], str]] = {}
        for m in every:
            for k, (shape, dtype) in m.items():
                if want.setdefault(k, (shape, dtype)) != (shape, dtype):
                    raise GradianError(
                        f"torchrun ranks disagree on {k!r}: {want[k]} against {(shape, dtype)}",
                        fix="run every rank on the same base, adapter and options",
                    )
        out: dict[str, torch.Tensor] = {}
        for k in sorted(want):
            shape, dtype = want[k]
            t = d[k] if k in d else torch.zeros(shape, dtype=getattr(torch, dtype))
            out[k] = self.all_reduce(t)
        return out

    def all_reduce_number(self, x: float | int) -> float | int:
        if not self.active:
            return x
        import torch

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


WAIT_S = 2 * 3600  # how long a rank waits in a collective: rank 0 alone runs diagnose, the draft verdict and the
# report while the others wait (10-17 min at 10M rows: bench/cost_model.py --only fixed); NCCL's default (10 min)
# would end the job.
# A rank that fails is ended by torchrun, not by this timeout.


def from_env(device: str | None = None) -> Dist:
    """Join torchrun's process group when ``WORLD_SIZE > 1`` (once per process); :data:`SINGLE` otherwise.

    ``device``: the requested ``--device``; CUDA (explicit, or auto with a GPU present) uses NCCL and pins this
    process to ``cuda:LOCAL_RANK``; anything else uses gloo."""
    world = env_world()
    if world <= 1:
        return SINGLE
    import torch
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
        td.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=WAIT_S))
        _JOINED.append(True)
        _stop_quietly_on_sigterm()
    else:
        backend = td.get_backend()
    return Dist(rank=td.get_rank(), world=td.get_world_size(), local_rank=local, backend=backend)


_JOINED: list[bool] = []  # set when from_env joined torchrun's process group itself (this process is a worker)


def close() -> None:
    """End a finished torchrun job cleanly: every rank waits for the others (rank 0 may still be writing the report),
    then leaves the process group. A gloo process group left to the interpreter's exit can abort a rank
    ("terminate called without an active exception"), which torchrun reports as a failed job; destroying the group
    first made that rare, not impossible (CI's 61-row 3-rank run once more). So a worker whose group gradian joined
    itself then flushes its output and leaves at once (``os._exit(0)``): no C++ destructor runs at interpreter exit.
    A group the caller made is only left, never exited from."""
    td = _in_process_group()
    if td is None:
        return
    td.barrier()
    td.destroy_process_group()
    if _JOINED:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def leave(code: int) -> None:
    """End this process with ``code`` after an error line. A worker whose gloo group gradian joined itself leaves at
    once (``os._exit``, output flushed): a broken group left to the interpreter's exit aborts the rank
    ("terminate called without an active exception", SIGABRT), which would bury the one error line."""
    import sys

    if _JOINED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _in_process_group() -> Any:
    """``torch.distributed`` when this process has joined a process group, else None (never imports torch)."""
    import sys

    td = sys.modules.get("torch.distributed")
    return td if td is not None and td.is_available() and td.is_initialized() else None


_STOP_SAID: list[bool] = []  # set once this rank has printed its one stop line


def say_stopped(line: str) -> None:
    """Print this rank's one stop line (a broken collective and torchrun's SIGTERM can both arrive: one line only)."""
    import sys

    if not _STOP_SAID:
        _STOP_SAID.append(True)
        sys.stderr.write(line.rstrip("\n") + "\n")
        sys.stderr.flush()


def _stop_quietly_on_sigterm() -> None:
    """torchrun ends the other ranks with SIGTERM when one fails: each says so in one line (exit 2), no traceback."""
    import signal

    def stop(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
        say_stopped(
            f"error: {rank_prefix()}stopped by torchrun: another rank failed (its error line is above) or the job "
            "was interrupted."
        )
        os._exit(2)

    try:
        signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (an embedding application): keep its handler
        pass


def device_for(dist: Dist, device: str | None) -> str | None:
    """The device this rank should use: ``cuda:LOCAL_RANK`` under NCCL when the user asked for cuda or auto."""
    if dist.backend == "nccl" and (device is None or device == "cuda"):
        return f"cuda:{dist.local_rank}"
    return device


def rank_prefix() -> str:
    """``"rank N: "`` under torchrun (several processes print to one terminal), else empty."""
    return f"rank {os.environ.get('RANK', '0')}: " if env_world() > 1 else ""


def record_failure(line: str, *, caused_by_peer: bool = False) -> None:
    """Under torchrun, put this rank's one-line error in the file torchrun's failure summary reads
    (``TORCHELASTIC_ERROR_FILE``), so the summary names it instead of "To enable traceback see ...".

    torchrun names the failure with the smallest timestamp (whole seconds) as the root cause; a rank stopped by
    another's failure (``caused_by_peer``) dates its line one second later, so a tie never makes it the cause."""
    import json
    import time

    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if env_world() <= 1 or not path:
        return
    info = {"py_callstack": line, "timestamp": str(int(time.time()) + int(caused_by_peer))}
    try:
        with open(path, "w") as f:
            json.dump({"message": {"message": line, "extraInfo": info}}, f)
    except OSError:
        pass


def peer_lost(err: BaseException) -> bool:
    """Whether ``err`` is a collective that broke because another torchrun rank stopped (its process exited, so the
    connection closed): raised from inside torch.distributed while this process is in a process group."""
    import traceback

    if env_world() <= 1 or _in_process_group() is None:
        return False
    if not isinstance(err, RuntimeError):
        return False
    return any("torch/distributed/" in f.filename.replace("\\", "/") for f in traceback.extract_tb(err.__traceback__))
