"""Memory plan (gradian.attribute.plan): sizes match the real LoRA blocks and a real gradient store, the config-only
shapes match the loaded model, and a run that will not fit is refused in one line with a --proj-dim that fits."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "attribute"))
import helpers  # noqa: E402

from gradian.attribute import plan as mp  # noqa: E402
from gradian.errors import GradianError  # noqa: E402

EXAMPLE = helpers.ROOT / "examples" / "stories260k"
ADAPTER = EXAMPLE / "run"
BIG = 1 << 50  # budgets that never bind


@pytest.fixture(scope="module")
def loaded():
    from gradian.attribute.loading import load

    return load(str(EXAMPLE / "base"), ADAPTER, device="cpu", dtype="fp32")


@pytest.fixture
def blocks(loaded):
    from gradian.attribute.collector import attach_projections, find_lora_blocks

    bl = find_lora_blocks(loaded.model)
    attach_projections(bl, 0)
    return bl


def _plan(blocks, n_rows, proj_dim, **kw):
    kw = {"disk_free": BIG, "ram_available": BIG, "device_free": BIG, "out_dir": "out/grads"} | kw
    budgets = mp.Budgets(*(kw.pop(k) for k in ("disk_free", "ram_available", "device_free")))
    return mp.make_plan(blocks, n_rows, proj_dim=proj_dim, budgets=budgets, **kw)


@pytest.mark.parametrize("proj", [0, 8])
def test_floats_per_row_is_the_sum_of_block_numel(blocks, proj):
    from gradian.attribute.collector import attach_projections

    attach_projections(blocks, proj)
    p = _plan(blocks, 100, proj)
    assert p.floats_per_row == sum(b.numel for b in blocks)
    assert p.n_blocks == len(blocks) == 70
    # factors: A (in x in), S (out x out), their eigenvectors, eigenvalues (out x in), fp64
    assert p.factor_bytes == sum(8 * (2 * b.shape[1] ** 2 + 2 * b.shape[0] ** 2 + b.numel) for b in blocks)
    if proj:
        assert all(b.shape == (8, 8) for b in blocks)  # every wide side (32..172) projected to 8
    assert len(p.lines()) in (2, 3, 4) and "70 blocks" in p.lines()[1]
    assert p.lines()[0].startswith(f"gradient store: 100 rows x {p.floats_per_row:,} floats (fp32, ")
    json.dumps(p.to_json())


@pytest.mark.parametrize("proj,shard,dtype", [(0, 4, "fp32"), (8, 4, "bf16"), (0, None, "fp32")])
def test_store_bytes_match_a_real_store(loaded, blocks, tmp_path, proj, shard, dtype):
    """A real attribution run writes the store; its size on disk is the plan's (up to the header estimate)."""
    from gradian.attribute.api import run_attribution
    from gradian.attribute.collector import attach_projections
    from gradian.attribute.engine import pad_id_of
    from gradian.options import AttributeOptions

    attach_projections(blocks, proj)
    _, train = helpers.formatted(helpers.TRAIN)
    _, evals = helpers.formatted(helpers.EVAL, add_eos=False)
    train, batch = train[:12], 4
    opts = AttributeOptions(method="identity", proj_dim=proj, query="all", batch_size=batch, store_dtype=dtype,
                            shard_rows=shard)  # fmt: skip
    res = run_attribution(loaded.model, train, evals[:2], opts, pad_id=pad_id_of(loaded.tokenizer),
                          store_dir=tmp_path / "grads")  # fmt: skip
    store = Path(res.settings["store"])
    meta = json.loads((store / "meta.json").read_text())
    shards = sorted(store.glob("shard_*.safetensors"))
    actual = sum(f.stat().st_size for f in store.iterdir())
    p = _plan(blocks, len(train), proj, store_dtype=dtype, batch_size=batch, shard_size=shard, out_dir=tmp_path)
    assert p.shard_rows == meta["shard_size"]  # the default shard size is the store's choice
    assert p.n_shards == len(shards) == (3 if shard else 1)
    grads = len(train) * p.floats_per_row * mp.ITEMSIZE[dtype]
    cov = sum(8 * (b.shape[0] ** 2 + b.shape[1] ** 2) for b in blocks)
    assert grads + p.n_shards * cov < actual <= p.store_bytes, (p.store_bytes, actual)
    assert p.store_bytes - actual <= 2048 + 1024 * p.n_shards, (p.store_bytes, actual)  # headers and JSON only


def test_shapes_from_configs_match_the_loaded_adapter(blocks):
    got = mp.shapes_from_dirs(ADAPTER, EXAMPLE / "base")
    assert got == [(b.kind, b.d_in, b.d_out) for b in blocks]
    assert mp.block_shapes(got) == [mp.Shape(k, i, o) for k, i, o in got]
    # the plan from the configs alone equals the plan from the loaded blocks (header estimate aside)
    a, b = _plan(got, 1000, 8), _plan(blocks, 1000, 8)
    assert (a.floats_per_row, a.factor_bytes, a.scoring_bytes) == (b.floats_per_row, b.factor_bytes, b.scoring_bytes)
    assert abs(a.store_bytes - b.store_bytes) < 0.01 * b.store_bytes


@pytest.mark.parametrize(
    "lora",
    [
        {"target_modules": "all-linear", "r": 4},
        {"target_modules": r".*\.(q_proj|down_proj)", "r": 2},
        {"target_modules": ["k_proj", "up_proj"], "r": 4, "layers_to_transform": [0, 3], "rank_pattern": {"k_proj": 6}},
        {"target_modules": ["q_proj", "v_proj", "o_proj"], "r": 4, "exclude_modules": ["o_proj"]},
    ],
)
def test_shapes_from_configs_follow_peft_matching(base_dir, lora):
    """target_modules (list, regex, all-linear), layers_to_transform, rank_pattern and exclude_modules select the
    same blocks PEFT builds."""
    from peft import LoraConfig, get_peft_model

    from gradian.attribute.collector import find_lora_blocks

    cfg = LoraConfig(task_type="CAUSAL_LM", **lora)
    model = get_peft_model(helpers.base_model(), cfg)
    want = [(b.kind, b.d_in, b.d_out) for b in find_lora_blocks(model)]
    adapter_cfg = json.loads(json.dumps(cfg.to_dict(), default=list))
    base_cfg = json.loads((base_dir / "config.json").read_text())
    assert mp.shapes_from_configs(adapter_cfg, base_cfg) == want


def test_llama_7b_floats_per_row_by_hand():
    h, i, L, heads, r = 4096, 11008, 32, 32, 16
    base = {"hidden_size": h, "intermediate_size": i, "num_hidden_layers": L, "num_attention_heads": heads}
    adapter = {"r": r, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
    shapes = mp.shapes_from_configs(adapter, base)
    assert len(shapes) == L * 7 * 2
    # unprojected: each module holds r x d_in (lora_A) + d_out x r (lora_B); q/k/v/o are h -> h (no GQA),
    # gate/up h -> i, down i -> h
    per_layer = r * (4 * (h + h) + 2 * (h + i) + (i + h))
    assert _plan(shapes, 10, 0).floats_per_row == L * per_layer == 39_976_960
    # projected to k: every block is r x k or k x r
    k = 32
    assert _plan(shapes, 10, k).floats_per_row == L * 7 * 2 * r * k
    # GQA (Llama-3 8B style): k/v project h -> kv_heads * head_dim
    base3 = base | {"num_key_value_heads": 8, "intermediate_size": 14336}
    kv = 8 * (h // heads)
    per_layer3 = r * (2 * (h + h) + 2 * (h + kv) + 3 * (h + 14336))
    assert _plan(mp.shapes_from_configs(adapter, base3), 10, 0).floats_per_row == L * per_layer3
    # no --proj-dim: the run's default projects a 7B adapter, not the tiny bundled one
    assert _plan(shapes, 10, None).proj_dim == 32
    assert _plan(mp.shapes_from_dirs(ADAPTER, EXAMPLE / "base"), 10, None).proj_dim == 0


def test_lines_on_a_gpu():
    shapes = mp.shapes_from_configs(
        {"r": 8, "target_modules": "all-linear"}, json.loads((EXAMPLE / "base" / "config.json").read_text())
    )
    p = _plan(shapes, 12_000, 8, device="cuda:0", device_free=80 << 30, ram_available=64 << 30, disk_free=1 << 40)
    lines = p.lines()
    assert len(lines) == 3 and p.fits()
    assert (
        lines[0] == f"gradient store: 12,000 rows x {p.floats_per_row:,} floats (fp32, proj-dim 8) = "
        f"{mp.human_bytes(p.store_bytes)} on disk in out/grads (1 TiB free)"
    )
    assert lines[1].startswith("on cuda:0: curvature factors ") and lines[1].endswith("(80 GiB free)")
    assert lines[2].startswith("in RAM: scoring ") and lines[2].endswith("(64 GiB available)")


def test_refuses_a_store_that_does_not_fit_and_suggests_a_proj_dim(blocks):
    p0 = _plan(blocks, 50_000, 0)
    s16 = mp.replan(p0, 16).store_bytes
    disk = math.ceil(s16 / mp.USABLE) + 1  # room for proj-dim 16, not for 32
    assert mp.replan(p0, 32).store_bytes > mp.USABLE * disk
    p = _plan(blocks, 50_000, 0, disk_free=disk)
    assert not p.fits() and mp.suggest_proj_dim(p) == 16
    with pytest.raises(GradianError) as e:
        mp.check_plan(p)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("out/grads: the gradient store needs")
    assert "50,000 rows" in msg and mp.human_bytes(p.store_bytes) in msg and mp.human_bytes(disk) in msg
    assert f"pass --proj-dim 16 (store {mp.human_bytes(s16)}" in msg and "free disk in out/grads" in msg
    mp.check_plan(_plan(blocks, 50_000, 16, disk_free=disk))  # the suggestion fits
    # reusing a complete store needs no new disk
    mp.check_plan(_plan(blocks, 50_000, 0, disk_free=disk, stored_bytes=p.store_bytes))


def test_refuses_without_a_proj_dim_when_nothing_fits(blocks):
    p = _plan(blocks, 1000, 8, disk_free=1000)
    assert mp.suggest_proj_dim(p) is None
    with pytest.raises(GradianError, match="free disk in out/grads") as e:
        mp.check_plan(p)
    assert "--proj-dim" not in str(e.value)


def test_memory_checks(blocks):
    """Factors + scoring must fit the device, the host side of the scoring RAM; exact's N x N kernel is named, with
    --method ekfac as the fix."""
    n = 20_000
    p = _plan(blocks, n, 0, method="exact", device="cuda:0", device_free=1 << 30)
    assert p.exact_bytes is not None and p.exact_bytes >= 8 * n * n and p.factor_bytes == 0
    assert p.device_bytes >= p.exact_bytes and p.ram_bytes >= n * p.floats_per_row * 4
    with pytest.raises(GradianError) as e:
        mp.check_plan(p)
    msg = str(e.value)
    assert msg.startswith("cuda:0: scoring needs") and "20,000 x 20,000 kernel" in msg and "--method ekfac" in msg
    assert "--proj-dim" not in msg  # no projection shrinks the N x N kernel
    # a GPU with room; RAM too small for the host side
    p = _plan(blocks, 1000, 0, device="cuda:0", device_free=BIG, ram_available=1 << 20)
    assert [w for w, _ in p.problems()] == ["RAM"]
    # cpu: everything is RAM (device_free is only for CUDA)
    p = _plan(blocks, 1000, 0, device="cpu", ram_available=p.ram_bytes, device_free=1)
    assert p.ram_bytes == p.device_bytes + p.scoring_host_bytes and p.problems()[0][0] == "RAM"
    assert _plan(blocks, 1000, 0, device="cpu", ram_available=BIG, device_free=1).fits()
    # no store dir: the gradients themselves must fit in RAM
    p = _plan(blocks, 100_000, 0, out_dir=None, ram_available=1 << 30)
    assert p.ram_bytes > p.store_bytes and "no store dir" in p.problems()[0][1]
    with pytest.raises(GradianError, match="pass --out"):
        mp.check_plan(p)


def test_probes_and_human_bytes(tmp_path):
    assert mp.probe_disk_free(tmp_path / "not" / "yet") == mp.probe_disk_free(tmp_path) > 0
    ram = mp.probe_ram_available()
    assert ram is None or ram > 0
    assert mp.probe_device_free("cpu") is None
    assert [mp.human_bytes(x) for x in (512, 1536, 98 << 20, 1.5 * 2**40)] == ["512 B", "1.5 KiB", "98 MiB", "1.5 TiB"]
