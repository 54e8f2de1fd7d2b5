"""GradianCallback on real TRL SFTTrainer runs of the bundled stories260K example (bench/callback_train.py): the
recorded gradients are the pass's own where the adapter does not move, `gradian attribute --run` uses them
(``gradient_source: callback``), and on a real fine-tune their ranking agrees with the post-hoc one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("trl")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
BASE = REPO / "examples" / "stories260k" / "base"
PLANTED = json.loads((REPO / "examples" / "stories260k" / "data" / "planted.json").read_text("utf-8"))


def _attribute(run: Path, out: Path, **kw):
    import gradian

    return gradian.attribute(run, base=str(BASE), train=str(run / "train.jsonl"), eval=str(run / "eval.jsonl"),
                             out=out, generations=0, token_harm=0, **kw)  # fmt: skip


def _record_scores_as_the_pass(run: Path, tmp_path: Path, **kw):
    """Attribute ``run`` from its record and with its own pass (every eval item): the record must be used and score
    the rows as the pass does. Returns both results."""
    cb = _attribute(run, tmp_path / "cb", query="all", **kw)
    ps = _attribute(run, tmp_path / "ps", query="all", gradients="pass", **kw)
    assert cb.settings["gradient_source"] == "callback", cb.notes
    np.testing.assert_allclose(cb.scores, ps.scores, rtol=1e-3, atol=1e-6 * np.abs(ps.scores).max())
    return cb, ps


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


@pytest.mark.parametrize("proj_dim", [None, 8])
def test_recorded_gradients_are_the_pass_at_fixed_weights(tmp_path, proj_dim) -> None:
    """lr 0 with a random adapter: the adapter never moves, so the recorded rows (epoch 2 of 2, two micro-batches
    per step) must score as the post-hoc pass scores them, exact or projected (the same projection both sides)."""
    from callback_train import train

    opts = {} if proj_dim is None else {"proj_dim": proj_dim}
    run = train(tmp_path / "run", True, epochs=2, rows=24, lr=0.0, batch=4, accum=2, random_init=True, options=opts)
    rec = json.loads((run / "gradian-record" / "record.json").read_text())
    assert (rec["epoch"], rec["epochs"], rec["first_step"], rec["last_step"]) == (2, 2, 4, 6)
    cb, ps = _record_scores_as_the_pass(run, tmp_path, **opts)
    assert cb.settings["train_rows_computed"] == 0 and ps.settings["gradient_source"] == "pass"
    assert any("recorded by GradianCallback during epoch 2 of 2" in n for n in cb.notes)


@pytest.mark.parametrize(("reentrant", "proj_dim"), [(True, None), (True, 8), (False, 8)])
def test_gradient_checkpointing_records_the_pass_at_fixed_weights(tmp_path, reentrant, proj_dim) -> None:
    """Gradient checkpointing, reentrant (LLaMA-Factory's default: the forward runs without gradients and each layer
    is recomputed in the backward, where the capture takes its calls) or not (recomputed calls the forward already
    holds are not taken twice): at learning rate 0 the record scores as the pass, exact or projected."""
    from callback_train import train

    opts = {} if proj_dim is None else {"proj_dim": proj_dim}
    sft = {"gradient_checkpointing": True, "gradient_checkpointing_kwargs": {"use_reentrant": reentrant}}
    run = train(tmp_path / "run", True, epochs=1, rows=16, batch=4, lr=0.0, random_init=True, options=opts, sft=sft)
    _record_scores_as_the_pass(run, tmp_path, **opts)


def test_a_run_resumed_inside_the_last_epoch_completes_the_record(tmp_path) -> None:
    """Killed at step 20 of 24 (checkpoints every 3 steps, shards of 16 rows) and resumed from checkpoint-18: the
    shard written before, the rows buffered at the checkpoint and the rest make a record that scores as the pass."""
    from callback_train import train

    kw = {"epochs": 2, "rows": 48, "lr": 0.0, "batch": 4, "random_init": True, "save_steps": 3,
          "options": {"shard_rows": 16}}  # fmt: skip
    with pytest.raises(RuntimeError, match="stopped at step 20"):
        train(tmp_path / "run", True, crash_at=20, **kw)
    assert not (tmp_path / "run" / "gradian-record" / "record.json").exists()
    run = train(tmp_path / "run", True, resume=True, **kw)
    _record_scores_as_the_pass(run, tmp_path)


def _shards(run: Path, rank: int = 0) -> list:
    """One training rank's recorded shards in the order they were written."""
    from gradian.attribute.recorded import _meta
    from gradian.attribute.store import GradientStore

    rec = run / "gradian-record"
    key = json.loads((rec / "record.json").read_text())["stores"][rank]
    store = GradientStore(rec / "grads", key, _meta(rec / "grads" / key))
    names = [b["name"] for b in store.meta["blocks"]]
    return [store.read_shard(i, names) for i in sorted(store.shards)]


def test_covariance_rows_takes_every_kth_micro_batch(tmp_path) -> None:
    """``covariance_rows=16`` of 48 rows in micro-batches of 4: the covariance sums are those of micro-batches 0, 3,
    6 and 9 of the same training recorded in full (one shard a micro-batch), every row's gradient is still recorded,
    and the report's note says where the curvature came from."""
    from callback_train import train

    kw = {"epochs": 1, "rows": 48, "lr": 0.0, "batch": 4, "random_init": True}
    full = _shards(train(tmp_path / "full", True, options={"shard_rows": 4}, **kw))
    run = train(tmp_path / "sub", True, options={"shard_rows": 4, "covariance_rows": 16}, **kw)
    sub = _shards(run)
    assert json.loads((run / "gradian-record" / "record.json").read_text())["covariance_every"] == 3
    assert [s.n_examples for s in sub] == [4 if i % 3 == 0 else 0 for i in range(12)]
    assert [s.n_tokens for s in sub if s.n_examples] == [s.n_tokens for s in full[::3]]
    for name, g in full[5].G.items():
        assert torch.equal(sub[5].G[name], g), name
    for name in full[0].A:
        want_A, got_A = sum(s.A[name] for s in full[::3]), sum(s.A[name] for s in sub if s.A)
        want_S, got_S = sum(s.S[name] for s in full[::3]), sum(s.S[name] for s in sub if s.S)
        torch.testing.assert_close(got_A, want_A, rtol=1e-12, atol=0)
        torch.testing.assert_close(got_S, want_S, rtol=1e-12, atol=0)
    res = _attribute(run, tmp_path / "cb", query="all")
    assert res.settings["gradient_source"] == "callback"
    assert any("one micro-batch in 3" in n for n in res.notes), res.notes


def test_the_plain_transformers_trainer_records_the_pass_at_fixed_weights(tmp_path) -> None:
    """The plain transformers ``Trainer`` (the user's own tokenization, the model's own loss over full logits, where
    the loss's constant is read off the logits' gradient): at learning rate 0 the record scores as the pass."""
    from callback_train import train_plain

    run = train_plain(tmp_path / "run")
    _record_scores_as_the_pass(run, tmp_path)


def test_a_record_says_which_training_noise_its_gradients_carry(tmp_path) -> None:
    """LoRA dropout and NEFTune noise are in the forward the trainer backpropagates: the record keeps the rows (the
    rankings agree, bench/results/callback_noise_*.md), saves the noise and the report's note names it."""
    from callback_train import train

    run = train(tmp_path / "run", True, epochs=1, rows=16, batch=4, lora_dropout=0.1,
                sft={"neftune_noise_alpha": 5.0})  # fmt: skip
    rec = json.loads((run / "gradian-record" / "record.json").read_text())
    assert rec["training_noise"] == {"lora_dropout": 0.1, "neftune_noise_alpha": 5.0}
    res = _attribute(run, tmp_path / "out", query="all")
    assert res.settings["gradient_source"] == "callback"
    assert any("training forward's noise (LoRA dropout 0.1, NEFTune noise alpha 5)" in n for n in res.notes), res.notes


def _rows_weighted(tmp_path: Path) -> Path:
    from callback_train import train_plain

    return train_plain(tmp_path / "run", row_weights=True)


def _dft(tmp_path: Path) -> Path:
    from callback_train import train

    return train(tmp_path / "run", True, epochs=1, rows=16, batch=4, sft={"loss_type": "dft"})


def _own_loss(tmp_path: Path) -> Path:
    from callback_train import train

    def loss(outputs, labels, num_items_in_batch=None):
        return outputs.logits.float().logsumexp(-1).mean()

    return train(tmp_path / "run", True, epochs=1, rows=16, batch=4, trainer_kw={"compute_loss_func": loss})


def _flattened(tmp_path: Path) -> Path:
    from callback_train import train_plain

    return train_plain(tmp_path / "run", packing="flatten")


def _mask_4d(tmp_path: Path) -> Path:
    from callback_train import train_plain

    return train_plain(tmp_path / "run", packing="4d")


@pytest.mark.parametrize(("trained", "says"), [
    (_rows_weighted, "is not the summed token cross-entropy times one constant"),
    (_dft, "loss_type='dft'"),
    (_own_loss, "was never called with `labels`"),
    (_flattened, "6 micro-batch(es) were packed"),
    (_mask_4d, "6 micro-batch(es) were packed"),
], ids=["rows-weighted-compute_loss", "trl-dft", "trl-compute_loss_func", "flattening-collator",
        "4d-mask-packing"])  # fmt: skip
def test_a_training_whose_gradients_are_not_the_passs_leaves_no_record(tmp_path, caplog, trained, says) -> None:
    """A trainer whose loss is not the summed token cross-entropy times one constant (rows weighed in its own
    ``compute_loss``, TRL's DFT, a ``compute_loss_func`` that calls the model without labels), whose batches pack
    several rows into one sequence (transformers' ``DataCollatorWithFlattening``: seen in the position ids; a
    block-diagonal 4D mask, as LLaMA-Factory's neat packing gives the model): the callback warns and leaves no
    record, so attribute computes its pass instead of scoring other gradients, and the training completes."""
    with caplog.at_level("WARNING", logger="gradian"):
        run = trained(tmp_path)
    assert any(says in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert not (run / "gradian-record" / "record.json").exists()
    assert not list((run / "gradian-record").rglob("*.safetensors"))
    assert _attribute(run, tmp_path / "out", query="all").settings["gradient_source"] == "pass"


def test_a_record_left_by_an_earlier_training_is_not_used(tmp_path) -> None:
    """Trained again into the same folder without the callback: the old record matches the rows but not the
    adapter, so attribute computes its pass and says why."""
    from callback_train import train

    train(tmp_path / "run", True, epochs=1, rows=16, batch=4)
    run = train(tmp_path / "run", False, epochs=1, rows=16, batch=4, seed=1, random_init=True)
    res = _attribute(run, tmp_path / "out", query="all")
    assert res.settings["gradient_source"] == "pass"
    assert any("not the one the record ended with" in n for n in res.notes)


def test_a_corrupted_record_is_not_used(tmp_path) -> None:
    """A recorded shard whose bytes changed after training: the checksum read with the shard catches it, and
    attribute computes its pass and says why instead of scoring with bad gradients."""
    from callback_train import train

    run = train(tmp_path / "run", True, epochs=1, rows=16, batch=4)
    shard = next((run / "gradian-record" / "grads").rglob("shard_*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-8:] = bytes(8 - b % 8 for b in data[-8:])  # the last float of the last tensor, flipped
    shard.write_bytes(bytes(data))
    res = _attribute(run, tmp_path / "out", query="all")
    assert res.settings["gradient_source"] == "pass"
    assert any("not used" in n and "checksum" in n for n in res.notes), res.notes


@pytest.mark.slow
def test_two_torchrun_ranks_record_one_store_each(tmp_path) -> None:
    """Two gloo ranks each record the rows they trained on; attribute in one process maps both stores to the file's
    rows and scores them as its own pass does (the adapter fixed as above)."""
    import os
    import subprocess

    run = tmp_path / "run"
    torchrun = Path(sys.executable).parent / "torchrun"
    script = str(REPO / "bench" / "callback_train.py")
    argv = [str(torchrun), "--standalone", "--nproc_per_node", "2", script, str(run), "--callback", "--epochs", "2",
            "--rows", "24", "--lr", "0", "--batch", "4", "--random-init"]  # fmt: skip
    env = os.environ | {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((run / "gradian-record" / "record.json").read_text())
    assert rec["world"] == 2 and len(set(rec["stores"])) == 2
    _record_scores_as_the_pass(run, tmp_path)
    # covariance sums from a share: each rank counts its own 3 micro-batches and takes the first of every 3
    sub = tmp_path / "sub"
    proc = subprocess.run([*argv[:5], str(sub), *argv[6:], "--covariance-rows", "4"], env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((sub / "gradian-record" / "record.json").read_text())["covariance_every"] == 3
    assert [sum(sh.n_examples for sh in _shards(sub, rank)) for rank in (0, 1)] == [4, 4]
    assert _attribute(sub, tmp_path / "sub-out", query="all").settings["gradient_source"] == "callback"


@pytest.mark.slow
def test_callback_ranking_agrees_with_post_hoc(tmp_path) -> None:
    """The example's config for 2 epochs on the first 200 rows (18 planted), trained once with the callback: the
    report says where its gradients came from, its ranking agrees with the post-hoc pass on the same adapter, and the
    planted rows' AUC stays close; a plain run's report says ``pass``."""
    from callback_train import train

    run = train(tmp_path / "run", True, epochs=2, rows=200)
    cb = _attribute(run, tmp_path / "cb")
    ps = _attribute(run, tmp_path / "ps", gradients="pass")
    report = json.loads((tmp_path / "cb" / "report.json").read_text())
    assert report["settings"]["gradient_source"] == "callback"
    assert json.loads((tmp_path / "ps" / "report.json").read_text())["settings"]["gradient_source"] == "pass"
    rho = _spearman(cb.scores, ps.scores)
    planted = np.zeros(200, dtype=bool)
    planted[[i for i in PLANTED["harmful_cluster"]["indices"] if i < 200]] = True
    auc_cb, auc_ps = _auc(cb.scores, planted), _auc(ps.scores, planted)
    assert rho > RHO_BAR, rho
    assert abs(auc_cb - auc_ps) < 0.03, (auc_cb, auc_ps)
    plain = train(tmp_path / "plain", False, epochs=2, rows=200)
    assert _attribute(plain, tmp_path / "plain-out").settings["gradient_source"] == "pass"


RHO_BAR = 0.95  # measured 0.991 (planted AUC 0.996 recorded, 0.993 post hoc)


def _auc(scores: np.ndarray, positive: np.ndarray) -> float:
    r = np.argsort(np.argsort(scores)) + 1.0
    n1, n0 = int(positive.sum()), int((~positive).sum())
    return float((r[positive].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


@pytest.mark.parametrize("proj_dim", [0, 4])
def test_capture_reads_the_trainers_backward_as_the_collector_does(proj_dim) -> None:
    """One batch of the bundled example through a PEFT model, as a trainer calls it (labels, mean loss, backward):
    the capture's per-row gradients and covariance sums equal the collector's own backward of the summed token loss,
    and with a projection it keeps no full-width activation (projected lora_A inputs, shape-only outputs)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from gradian.attribute.collector import GradientCollector, attach_projections, find_lora_blocks, token_losses
    from gradian.attribute.engine import collate
    from gradian.data import FormatSettings, format_examples, load_examples
    from gradian.data.tokenizer import load_tokenizer
    from gradian.integrations.capture import Capture

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float64),
                           LoraConfig(r=8, target_modules="all-linear"))  # fmt: skip
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.05)
    model.train()
    blocks = find_lora_blocks(model)
    attach_projections(blocks, proj_dim)
    tok = load_tokenizer(str(BASE))
    fx = format_examples(load_examples(REPO / "examples/stories260k/data/train.jsonl")[:6], tok, FormatSettings(64))
    ids, am, lm = collate(fx, 0)
    with Capture(model, blocks) as cap:
        model(input_ids=ids, attention_mask=am, labels=ids.masked_fill(~lm, -100)).loss.backward()
        if proj_dim:
            for b, a, o in cap.calls:
                assert 0 in o.stride() and (b.kind != "A" or a.shape[-1] == proj_dim), b.name
        got = cap.take(GradientCollector(blocks, covariance=True))
    assert got is not None and got.misfit < 1e-5  # the model's own loss (fp32 inside): the summed token loss
    model.zero_grad()
    with GradientCollector(blocks, covariance=True) as col:
        logits = model(input_ids=ids, attention_mask=am).logits
        want = col.collect(token_losses(logits, ids, lm).sum(), token_mask=am.bool())
    for name, g in want.items():
        # the record keeps fp32 rows; the model's own loss runs in fp32 (HF upcasts the logits)
        np.testing.assert_allclose(got.G[name].double(), g, rtol=1e-5, atol=1e-6 * float(g.abs().max()), err_msg=name)
        np.testing.assert_allclose(got.A[name], col.A[name], rtol=1e-9, err_msg=name)
        np.testing.assert_allclose(got.S[name], col.S[name], rtol=1e-5, atol=1e-6 * float(col.S[name].abs().max()))


def test_packed_batches_are_told_from_padded_ones_by_trls_own_collator() -> None:
    """TRL's collator: padding-free batches (position ids restart inside the one sequence) are packed; padded batches
    with position ids (0 on the padding) and without them are not, nor is a left-padded one."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from gradian.integrations.capture import packed

    rows = [{"input_ids": [5, 6, 7, 8]}, {"input_ids": [9, 10]}]
    free = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(rows)
    padded = DataCollatorForLanguageModeling(pad_token_id=0, return_position_ids=True)(rows)
    plain = DataCollatorForLanguageModeling(pad_token_id=0)(rows)
    assert packed(free.get("attention_mask", torch.ones_like(free["input_ids"])), free["position_ids"])
    assert padded["position_ids"].tolist()[1] == [0, 1, 0, 0]
    assert not packed(padded["attention_mask"], padded["position_ids"])
    assert not packed(plain["attention_mask"], plain.get("position_ids"))
    assert not packed(torch.tensor([[0, 0, 1, 1]]), torch.tensor([[1, 1, 0, 1]]))  # left padding
    assert packed(torch.tensor([[1, 1, 2, 2, 0]]), None)  # a mask numbering segments (LLaMA-Factory's neat packing)
