"""``GradianCallback``: record what `gradian attribute` needs while the trainer trains, so attribution skips its pass.

During the last epoch the callback turns each micro-batch's own backward into per-row LoRA gradients and covariance
sums (:mod:`gradian.integrations.capture`) and writes them into ``<output_dir>/gradian-record``
(:mod:`gradian.integrations.writer`, read by :mod:`gradian.attribute.recorded`). `gradian attribute --run
<output_dir>` then uses them when they cover every training row with the same projection."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from gradian.integrations.capture import MISFIT_MAX, error_line
from gradian.options import CallbackOptions

log = logging.getLogger("gradian")


class GradianCallback(TrainerCallback):
    """An HF ``TrainerCallback`` (transformers ``Trainer``, TRL ``SFTTrainer``)::

        trainer = SFTTrainer(..., callbacks=[GradianCallback()])

    ``options`` or keyword arguments: :class:`gradian.options.CallbackOptions`."""

    def __init__(self, options: CallbackOptions | None = None, **kwargs: Any) -> None:
        base = options or CallbackOptions()
        self.options = base.replace(**kwargs) if kwargs else base
        self._rec: Any = None  # the recording in progress (_Recording)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, model: Any = None, train_dataloader: Any = None,
                       **kwargs: Any) -> None:  # fmt: skip
        epochs = int(state.num_train_epochs or math.ceil(args.num_train_epochs))
        epoch = int(math.floor((state.epoch or 0) + 1e-6))
        if self._rec is not None or epoch != epochs - 1:
            return
        why = _unsupported(args)
        if why:
            log.warning("GradianCallback records nothing: %s", why)
            return
        from gradian.attribute.collector import find_lora_blocks
        from gradian.errors import GradianError

        try:
            blocks = find_lora_blocks(model)
        except GradianError as e:  # DoRA: not attributable, and no reason to stop the training
            blocks, why = [], str(e)
        else:
            why = "the model has no Linear LoRA layers"
        if not blocks:
            log.warning("GradianCallback records nothing: %s", why)
            return
        try:
            self._rec = _Recording.start(self.options, args, state, model, blocks, train_dataloader, epoch, epochs)
        except Exception as e:  # noqa: BLE001 - the training goes on without a record
            log.warning("GradianCallback records nothing: %s", error_line(e))

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._rec is not None:
            self._rec.take()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._rec is not None:
            self._rec.take()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._rec is not None:
            self._rec.writer.save_pending()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish(state)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish(state)

    def _finish(self, state: Any) -> None:
        if self._rec is not None:
            rec, self._rec = self._rec, None
            try:
                rec.finish(state)
            except Exception as e:  # noqa: BLE001 - the training ends as it would without the callback
                log.warning("GradianCallback: the record was not finished (%s); `gradian attribute` will compute "
                            "the pass", error_line(e))  # fmt: skip


def _unsupported(args: Any) -> str | None:
    """Why a run's batches do not hold one row per sequence with per-row gradients to read, or None."""
    if any(getattr(args, k, False) for k in ("packing", "padding_free", "sample_packing")):  # TRL's, Axolotl's
        return "packed or padding-free batches hold several rows in one sequence"
    if getattr(args, "loss_type", "nll") == "dft" or (getattr(args, "label_smoothing_factor", 0) or 0) > 0:
        return "the loss is not the summed token cross-entropy (loss_type='dft' or label_smoothing_factor > 0)"
    return None


class _Recording:
    """One rank's recording of the last epoch."""

    def __init__(self, capture: Any, col: Any, writer: Any, root: Path, info: dict[str, Any], keys: list[str],
                 first_batch: int = 0) -> None:  # fmt: skip
        self.capture, self.col, self.writer, self.root, self.info, self.keys = capture, col, writer, root, info, keys
        self.batch = first_batch  # micro-batches of the epoch before the next one
        self.misfit: float | None = None  # set when a micro-batch's loss was not the one recorded gradients assume

    @classmethod
    def start(cls, o: CallbackOptions, args: Any, state: Any, model: Any, blocks: list[Any], dl: Any, epoch: int,
              epochs: int) -> _Recording:  # fmt: skip
        from gradian.attribute.collector import GradientCollector, attach_projections
        from gradian.attribute.plan import auto_proj_dim, shard_rows
        from gradian.attribute.store import store_key
        from gradian.integrations.capture import Capture
        from gradian.integrations.writer import RankWriter, record_root, store_parts

        proj_dim = o.proj_dim if o.proj_dim is not None else auto_proj_dim(blocks)
        attach_projections(blocks, proj_dim, o.proj_seed)
        bs = int(args.per_device_train_batch_size)
        rank, world = int(getattr(args, "process_index", 0)), int(getattr(args, "world_size", 1))
        n_rows = len(dl) * bs
        steps_per_epoch = max(1, math.ceil(state.max_steps / max(epochs, 1)))
        done = max(0, state.global_step - epoch * steps_per_epoch)  # a run resumed inside the last epoch
        root = record_root(o.out_dir or args.output_dir)
        if rank == 0:
            (root / "record.json").unlink(missing_ok=True)
        proj = {"proj_dim": proj_dim, "proj_seed": o.proj_seed}
        shard = shard_rows(sum(b.numel for b in blocks), bs, o.shard_rows)
        writer = RankWriter(root, store_parts(blocks, proj, o.store_dtype, epoch, world, rank, n_rows), n_rows, shard,
                            o.store_dtype, done * int(args.gradient_accumulation_steps) * bs)  # fmt: skip
        keys = [store_key(store_parts(blocks, proj, o.store_dtype, epoch, world, r, n_rows)) for r in range(world)]
        info = {"blocks": [[b.name, list(b.shape)] for b in blocks], **proj, "store_dtype": o.store_dtype,
                "epoch": epoch + 1, "epochs": epochs, "first_step": epoch * steps_per_epoch + 1,
                "max_steps": int(state.max_steps), "world": world,
                "covariance_every": covariance_every(len(dl), bs, o.covariance_rows),
                "training_noise": training_noise(model, args)}  # fmt: skip
        capture = Capture(model, blocks).__enter__()
        col = GradientCollector(blocks, covariance=True)
        return cls(capture, col, writer, root, info, keys, done * int(args.gradient_accumulation_steps))

    def take(self) -> None:
        if self.misfit is not None or self.capture.failed is not None:
            return
        self.col.covariance = self.batch % self.info["covariance_every"] == 0
        try:
            b = self.capture.take(self.col)
            if b is None:
                return
            if b.misfit > MISFIT_MAX:  # a custom loss: these gradients are not the ones attribute scores
                self.misfit = b.misfit
                self.capture.__exit__(None, None, None)
                return
            self.batch += 1
            self.writer.add(b)
        except Exception as e:  # noqa: BLE001 - the recording must not stop the training (a full disk, say)
            self.capture.failed = error_line(e)

    def finish(self, state: Any) -> None:
        from gradian.attribute.recorded import weight_norms
        from gradian.integrations.writer import write_manifest

        self.take()
        self.capture.__exit__(None, None, None)
        why = self._unusable()
        if why:
            log.warning("GradianCallback records nothing: %s; `gradian attribute` will compute the pass", why)
            self.writer.discard()
            _barrier()
            return
        n = self.writer.finish()
        if not n:
            log.warning(
                "GradianCallback recorded no rows: the model was never called with `labels` while training (a loss "
                "computed outside the model, e.g. compute_loss_func); `gradian attribute` will compute the pass"
            )
        _barrier()
        if self.writer.store.meta["parts"]["rank"] == 0 and n:
            write_manifest(self.root, {**self.info, "last_step": int(state.global_step), "stores": self.keys,
                                       "weight_norms": weight_norms(self.capture.blocks)})  # fmt: skip

    def _unusable(self) -> str | None:
        """Why this rank's recorded rows are not the gradients attribute would score, or None."""
        c = self.capture
        if c.failed is not None:
            return f"the recording stopped on an error ({c.failed})"
        if self.misfit is not None:
            return (f"the trainer's loss is not the summed token cross-entropy times one constant (its gradient at "
                    f"the model's output is {self.misfit:.2f} off: a custom loss?)")  # fmt: skip
        if c.packed:
            return f"{c.packed} micro-batch(es) were packed (several rows in one sequence, or a 4D attention mask)"
        if c.missed:
            return f"{c.missed} micro-batch(es) had no LoRA gradient to read (a frozen adapter?)"
        if c.headless:
            return (f"{c.headless} micro-batch(es) gave no logits to read the loss from (a fused loss kernel such as "
                    f"Liger's fused linear cross-entropy)")  # fmt: skip
        return None


def training_noise(model: Any, args: Any) -> dict[str, float]:
    """The training forward's noise the recorded gradients carry and the post-hoc pass leaves out (eval mode): the
    adapter's LoRA dropout and TRL's / transformers' NEFTune noise, where set."""
    cfg = getattr(model, "peft_config", {}).get(getattr(model, "active_adapter", "default"))
    noise = {"lora_dropout": float(getattr(cfg, "lora_dropout", 0.0) or 0.0),
             "neftune_noise_alpha": float(getattr(args, "neftune_noise_alpha", None) or 0.0)}  # fmt: skip
    return {k: v for k, v in noise.items() if v > 0}


def covariance_every(n_batches: int, batch_size: int, rows: int | None) -> int:
    """Every how many micro-batches the covariance sums are taken so they hold at least ``rows`` rows (1: all)."""
    if not rows:
        return 1
    return max(1, n_batches // max(1, math.ceil(rows / batch_size)))


def _barrier() -> None:
    import torch.distributed as td

    if td.is_available() and td.is_initialized():
        td.barrier()
