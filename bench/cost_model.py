"""Cost model of `gradian attribute` on large training sets: prints its tables (docs/how-to/large-files.md quotes
bench/results/cost_model_1b.md).

    python bench/cost_model.py                      # all tables, with the default inputs below
    python bench/cost_model.py --only compute --mfu 0.5 --overhead 1.34 --tokens 1024
    python bench/cost_model.py --only example --target-hours 6 --store-dtype bf16
    python bench/cost_model.py --only post --fp64-tflops H100=67 A100=19.5   # fp64 tensor-core peaks
    python bench/cost_model.py measure              # re-measure the CPU inputs on this machine (about 30 s)

Nothing runs on a model: the GPU figures are arithmetic on explicit inputs, each either MEASURED (bench/results, or
`measure`, on CPU) or an ASSUMPTION (a flag). LoRA block shapes, floats per row, store, shard and factor sizes come
from gradian itself (`plan.shapes_from_configs`, `plan.estimate`), so they follow the code.
"""

from __future__ import annotations

import argparse
import math
import time

from gradian.attribute.plan import LLAMA_MODULES, Shape, block_shapes, estimate, human_bytes, shapes_from_configs

# --- inputs ----------------------------------------------------------------------------------------------------------

# MEASURED: b/a = gradian end to end / one forward+backward (the floor), wide Llama (hidden 192, 12 layers, LoRA r=8
# x 7 = 168 blocks, proj 32), 256 rows x 128 tokens, 1 query, process CPU time, 1 thread, the current code of
# 2026-12-02: bench/results/speed_wide_256_q1-256.json (queries 1: b_over_a_cpu 1.074). The 16-query wall figure is
# 1.13 (speed_wide_256_q16.json).
OVERHEAD = 1.07
# MEASURED by `measure` on the 2-core shared dev machine (2026-12). sha256 and the tokenizer: medians of 5 runs
# (spread 1.50-1.69 GB/s, 0.29-0.42 M tokens/s per core; a later run 1.68 and 0.27). Parse and conversion: one run,
# each the median of 5 repeats.
SHA_GBPS = 1.64  # hashlib sha256, one core
PARSE_GBPS = 9.9  # safetensors.torch.load of a shard's bytes (a copy of every tensor), one core
TOK_PER_S_PER_CORE = 0.36e6
# MEASURED by `measure` (tracemalloc, one run). Rank 0 after the gather: the row ids, the gathered arrays, the ranked
# rows, report.json and the report build + render (build_report, render_all), 16 queries, peak per row. `gradian
# diagnose`: its rows (Example + FormattedExample) and the report's copy of each row's text: a + b x tokens per row,
# fitted on 114- and 554-token rows of the bundled stories260K tokenizer (512-token vocab, ~2 bytes of text a token).
REPORT_BYTES_PER_ROW = 3600  # 12-character row ids
DIAG_BYTES_PER_ROW = 1060
DIAG_BYTES_PER_TOKEN = 52
# Diagnose throughput (CHANGELOG.md, lab notebook): every dataset rule, 100,000 rows, 2 cores.
DIAG_RULES_S_PER_ROW = 4.29 / 100_000
# ASSUMPTIONS: the flags' defaults.
MFU = 0.40
PEAK_TFLOPS = {"H100": 989.0, "A100": 312.0}  # bf16 dense, SXM
# fp64 without tensor cores, SXM (tensor-core fp64: H100 67, A100 19.5). The scoring's matmuls are small or thin
# (16 x 16 and 32 x 32 rotations per block, 17 query rows against each block's rows, the embedding's (rows x P) x
# (P x 48)), so the lower figure is the default.
FP64_TFLOPS = {"H100": 34.0, "A100": 9.7}
H2D_GBPS = 10.0  # host -> GPU copies from pageable memory, synchronous (Tensor.to(cuda) without pinning)
TOKENS = (512, 2048)
PROJ_DIMS = (16, 32, 64)
EMBED_K = 32 + 10  # scores.gradient_embedding: dim 32 plus 10 oversampling columns
EMBED_COLS = -(-EMBED_K // 8) * 8  # its products' width: k padded to a multiple of 8 (scores._padded)
EMBED_PASSES = 2  # gradient_embedding: power_iters=1, so 2 subspace passes, then 1 projection pass
TOKEN_FILE_BYTES = 5  # data/tokenized.py: int32 id + uint8 mask per token (+ ~50 B per row)

# Llama-like bases: the config.json keys shapes_from_configs reads, plus vocab_size.
BASES = {
    "1B": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256),  # Llama-3.2-1B
    "7B": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=32, vocab_size=32000),  # Llama-2-7B
    "8B": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256),  # Llama-3-8B (the 7B class with GQA)
    "70B": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                num_key_value_heads=8, vocab_size=128256),  # Llama-3-70B (Llama-2-70B: vocab 32000, 1% fewer FLOPs)
    "wide": dict(hidden_size=192, intermediate_size=512, num_hidden_layers=12, num_attention_heads=6,
                 num_key_value_heads=6, vocab_size=512),  # bench/common.py wide_setup, where b/a was measured
}  # fmt: skip
DEFAULT = ("7B", "8B", "70B")
DETAIL = ("7B", "70B")  # 8B has the same 32 x 7 LoRA'd layers as 7B: the same store, post-pass and traffic


# --- the model -------------------------------------------------------------------------------------------------------


def shapes(base: dict, r: int) -> list[tuple[str, int, int]]:
    return shapes_from_configs({"r": r, "target_modules": list(LLAMA_MODULES)}, base)


def matmul_params(base: dict) -> int:
    """Weights of every matmul a token goes through: the 7 projections of each layer and the lm_head."""
    h, i, L = base["hidden_size"], base["intermediate_size"], base["num_hidden_layers"]
    hd = h // base["num_attention_heads"]
    q, kv = base["num_attention_heads"] * hd, base["num_key_value_heads"] * hd
    return L * (2 * h * q + 2 * h * kv + 3 * h * i) + base["vocab_size"] * h


def weight_bytes(base: dict) -> int:
    """bf16 bytes of the base: the matmul weights and the input embedding (norms are negligible)."""
    return 2 * (matmul_params(base) + base["vocab_size"] * base["hidden_size"])


def flops_per_token(base: dict, r: int, T: int) -> dict[str, float]:
    """Forward + backward FLOPs per token of a training row of T tokens (the floor), by term."""
    n_lora = sum(d_in * d_out for _, d_in, d_out in shapes(base, r))
    return {
        "base": 4.0 * matmul_params(base),  # 2N forward + 2N backward to the activations; frozen: no weight grads
        "lora": 6.0 * n_lora,  # LoRA forward, backward to activations and to its own weights
        "attn": 6.0 * base["num_hidden_layers"] * base["hidden_size"] * T,  # causal QK^T, AV: 2dT fwd, 4dT bwd
    }


def flops(base: dict, r: int, T: int) -> float:
    return sum(flops_per_token(base, r, T).values())


# Which input tensor each projection's lora_A reads: the collector's units (GradientCollector._from_deltas) are the
# lora_A blocks that read one input with one projection (projection_seed_name: one per parent module and input width).
INPUT_OF = {"q_proj": "attn_in", "k_proj": "attn_in", "v_proj": "attn_in", "o_proj": "attn_out", "gate_proj": "mlp_in",
            "up_proj": "mlp_in", "down_proj": "mlp_mid"}  # fmt: skip


def units(base: dict, r: int) -> list[list[Shape]]:
    """The collector's units of a Llama with LoRA on all 7 projections: per layer the lora_A blocks of q/k/v, of o,
    of gate/up and of down (4 inputs, each projected once), and every lora_B block on its own."""
    sh = block_shapes(shapes(base, r))
    assert len(sh) == 2 * len(LLAMA_MODULES) * base["num_hidden_layers"]  # per layer, per module: lora_A, lora_B
    out: dict[object, list[Shape]] = {}
    for j, s in enumerate(sh):
        layer, m = divmod(j // 2, len(LLAMA_MODULES))
        out.setdefault((layer, INPUT_OF[LLAMA_MODULES[m]]) if s.kind == "A" else j, []).append(s)
    return list(out.values())


def extra_flops_per_token(base: dict, r: int, proj: int = 32) -> float:
    """What gradian's training pass adds per token (collector.py), counted high (padding tokens included). Per unit
    of m blocks (m lora_A blocks reading one input, or one lora_B block): the projection of its wide side (the input
    of lora_A, once for the unit; the output gradient of lora_B) to proj, the covariance sum of its input (once for
    the unit) and of its output gradients side by side ((m x out)^2: the diagonal blocks are kept); per block the
    per-example gradient."""
    total = 0.0
    for u in units(base, r):
        s = u[0]
        o, i = s.projected(proj)
        total += (2 * proj * s.wide if 0 < proj < s.wide else 0) + 2 * len(u) * o * i + 2 * (i * i + (len(u) * o) ** 2)
    return total


def store(base: dict, a, proj: int = 32, dtype: str | None = None, rows: int = 1_000_000) -> dict:
    return estimate(shapes(base, a.r), rows, proj_dim=proj, store_dtype=dtype or a.store_dtype, n_queries=a.queries)


def pass_s_per_row(base: dict, T: int, a, gpu: str) -> float:
    """GPU seconds per row of the training pass: the floor at the assumed MFU times b/a, per checkpoint."""
    return a.checkpoints * T * flops(base, a.r, T) / (a.mfu * PEAK_TFLOPS[gpu] * 1e12) * a.overhead


def flops_per_float(o: int, i: int, queries: int) -> dict[str, int]:
    """fp64 FLOPs per stored float of an (out, in) block in each kind of pass over the store (scores.py), when this
    rank's rows in the eigenbases do not fit in EMBED_CACHE_BYTES (every scale case; else they are kept and the scores
    and embedding read no shards): the EK-FAC eigenvalues (rotate QS^T G QA: 2(out + in), square and sum: 2); the
    scores of EK-FAC on the raw rows (M = queries + 1 dot products: 2M; cosine adds 2 for the row norm); the
    clustering embedding on the raw rows, 2 subspace passes (X B and X^T Y: 4k) and the projection pass (X B: 2k),
    k = 42 columns padded to 48 (zeros, multiplied all the same). The embedding rotates and whitens its (P x k) side
    once per pass, not per row: nothing per row."""
    rot, k = 2 * (o + i), EMBED_COLS
    return {
        "eig": rot + 2,
        "scores": 2 * (queries + 1),
        "embedding": EMBED_PASSES * 4 * k + 2 * k,
    }


def scoring_flops_per_row(base: dict, a) -> dict[str, float]:
    """fp64 FLOPs per row on the scoring device: per checkpoint the eigenvalue and score passes, once the
    embedding (:func:`flops_per_float` summed over the stored floats of every block)."""
    out = {"eig": 0.0, "scores": 0.0, "embedding": 0.0}
    for s in block_shapes(shapes(base, a.r)):
        o, i = s.projected(32)
        f = flops_per_float(o, i, a.queries)
        out["eig"] += o * i * a.checkpoints * f["eig"]
        out["scores"] += o * i * a.checkpoints * f["scores"]
        out["embedding"] += o * i * f["embedding"]
    return out


def post_s_per_row(base: dict, a, gpu: str | None = None) -> dict[str, float]:
    """Seconds per row on its rank outside the training pass (proj 32). Per checkpoint: a store write (the covariance
    sums of fresh shards come from the pass), then reads for the EK-FAC eigenvalues and the scores; once: 3 reads for
    the clustering embedding (2 subspace passes + the projection). At scale the rows rotated by the eigenvalue pass do
    not fit in EMBED_CACHE_BYTES, so the scores and the embedding read the raw rows again; the embedding rotates and
    whitens its (P x k) side, not the rows (:func:`flops_per_float`). Every write and read is sha256-checked and every
    read parsed (safetensors, CPU). Every read copies each block to the GPU in its stored dtype and converts it to
    fp64 there (``curvature.to_f64``; a single ``Tensor.to(cuda, float64)`` would convert on the host and send 8 bytes
    a float). The fp64 math runs on the GPU (`sdev` in api.py)."""
    st = store(base, a)
    F, b = int(st["floats_per_row"]), st["store_bytes"] / 1e6
    C = a.checkpoints
    reads, writes = 2 * C + 3, C
    disk = a.disk_gbps * 1e9 / a.gpus_per_node
    return {
        "write": writes * b / disk,
        "read": reads * b / disk,
        "sha256": (reads + writes) * b / (a.sha_gbps * 1e9),
        "parse": reads * b / (a.parse_gbps * 1e9),
        "h2d": reads * F * (2 if a.store_dtype == "bf16" else 4) / (a.h2d_gbps * 1e9),
        "gpu": sum(scoring_flops_per_row(base, a).values()) / (a.fp64_tflops[gpu or a.gpu] * 1e12),
    }


def fixed_s(name: str, T: int, a) -> dict[str, float]:
    """Seconds of the work that does not shrink with more ranks (first run: nothing reused)."""
    base = BASES[name]
    eff = a.mfu * PEAK_TFLOPS[a.gpu] * 1e12
    cores = a.node_cores / a.gpus_per_node
    return {
        "load": weight_bytes(base) / (a.load_gbps * 1e9),  # every rank reads the whole base
        "tokenize": a.rows * T / (a.tok_per_s * cores),  # every rank tokenizes the whole training file
        # rank 0, the other ranks waiting: 2 no-grad forwards (~ one fwd+bwd) per eval item, a fwd+bwd per query
        "eval": (a.eval_items + a.checkpoints * a.queries) * a.eval_tokens * flops(base, a.r, a.eval_tokens) / eff,
        "diagnose": a.rows * T / (a.tok_per_s * a.node_cores) + a.rows * DIAG_RULES_S_PER_ROW,  # rank 0 alone
    }


# --- tables ----------------------------------------------------------------------------------------------------------


def fmt(x: float, nd: int = 1) -> str:
    return f"{x:,.{nd}f}"


def si(x: float, unit: str = "") -> str:
    """6.61e9 -> "6.61 B" (GB with unit "B")."""
    for div, suffix in ((1e12, "T"), (1e9, "B" if not unit else "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g} {suffix}{unit}"
    return f"{x:.3g} {unit}".strip()


def row(*cells) -> None:
    print("| " + " | ".join(str(c) for c in cells) + " |")


def head(*cells, left: int = 1) -> None:
    row(*cells)
    print("|" + "---|" * left + "---:|" * (len(cells) - left))


def table_flops(a) -> None:
    print(f"### FLOPs per token of the floor, by term (r={a.r}, all 7 projections)\n")
    head("base", "matmul params N", "LoRA params", "4N, GFLOP", "6 x LoRA", "attention, " +
         " / ".join(f"{T:,}" for T in a.tokens) + " tokens", "gradian's extra FLOPs", "bf16 weights")  # fmt: skip
    for name in a.bases or DEFAULT:
        base = BASES[name]
        t = [flops_per_token(base, a.r, T) for T in a.tokens]
        n_lora = sum(i * o for _, i, o in shapes(base, a.r))
        row(name, si(matmul_params(base)), si(n_lora), fmt(t[0]["base"] / 1e9),
            fmt(t[0]["lora"] / 1e9, 2), " / ".join(fmt(x["attn"] / 1e9, 2) for x in t),
            f"{extra_flops_per_token(base, a.r) / flops(base, a.r, a.tokens[0]):.1%} of the floor",
            si(weight_bytes(base), "B"))  # fmt: skip
    print()


def table_compute(a) -> None:
    ck = f", {a.checkpoints} checkpoints" if a.checkpoints > 1 else ""
    print(f"### GPU-hours per million training rows (r={a.r}, all 7 projections, proj 32, {a.store_dtype} store, "
          f"MFU {a.mfu:.0%}, b/a {a.overhead}{ck})\n")  # fmt: skip
    cells = ["base", "tokens/row", "GFLOP/token"]
    for g in PEAK_TFLOPS:
        cells += [f"{g} floor", f"{g} pass (floor x b/a)", f"{g} store + scoring", f"**{g} total**"]
    head(*cells)
    for name in a.bases or DEFAULT:
        base = BASES[name]
        for T in a.tokens:
            cells = [name, f"{T:,}", fmt(flops(base, a.r, T) / 1e9)]
            for g in PEAK_TFLOPS:
                post = sum(post_s_per_row(base, a, g).values()) * 1e6 / 3600
                p = pass_s_per_row(base, T, a, g) * 1e6 / 3600
                cells += [fmt(p / a.overhead / a.checkpoints), fmt(p), fmt(post), f"**{fmt(p + post, 0)}**"]
            row(*cells)
    print()


def table_store(a) -> None:
    print(f"### Gradient store per million rows, and the curvature factors (r={a.r}, all 7 projections)\n")
    head("base", "--proj-dim", "floats / row", "fp32 / row", "fp32 store", "bf16 store", "rows / shard",
         "factors (fp64)")  # fmt: skip
    for name in a.bases or DETAIL:
        base = BASES[name]
        for k in (*a.proj, 0):
            s32, s16 = store(base, a, k, "fp32"), store(base, a, k, "bf16")
            label = f"{k} (default)" if k == 32 else (str(k) if k else "0 (none)")
            row(name, label, f"{s32['floats_per_row']:,}", human_bytes(4 * s32["floats_per_row"]),
                human_bytes(s32["store_bytes"]), human_bytes(s16["store_bytes"]), f"{s32['shard_rows']:,}",
                human_bytes(s32["factor_bytes"]))  # fmt: skip
    print()


def table_post(a) -> None:
    print(f"### Store I/O and scoring per row, on its rank ({a.gpu}, fp64 {a.fp64_tflops[a.gpu]:g} TFLOPs, proj 32, "
          f"{a.store_dtype} store, {a.disk_gbps:g} GB/s of disk per node of {a.gpus_per_node}; ms)\n")  # fmt: skip
    head("base", "bytes / row", "write", "re-reads", "sha256 checks (CPU)", "safetensors parse (CPU)",
         "copy to GPU", "GPU fp64 math", "total")  # fmt: skip
    for name in a.bases or DETAIL:
        base = BASES[name]
        p = post_s_per_row(base, a)
        b = store(base, a)["store_bytes"] / 1e6
        cells = [fmt(v * 1e3, 3 if k == "gpu" else 1) for k, v in p.items()]
        row(name, human_bytes(b), *cells, fmt(sum(p.values()) * 1e3))
    print()


def table_gpu(a) -> None:
    print(f"### fp64 work of the scoring on the GPU, per row (proj 32, r={a.r}, {a.queries} queries)\n")
    head("base", "stored floats / row", "EK-FAC eigenvalues", "scores", "embedding", "FLOPs per stored float",
         *(f"{g} ms / row at {a.fp64_tflops[g]:g} TFLOPs" for g in PEAK_TFLOPS))  # fmt: skip
    for name in a.bases or DETAIL:
        base = BASES[name]
        fl = scoring_flops_per_row(base, a)
        F = store(base, a)["floats_per_row"]
        tot = sum(fl.values())
        row(name, f"{F:,}", *(si(v, "FLOP") for v in fl.values()), fmt(tot / F, 0),
            *(fmt(tot / (a.fp64_tflops[g] * 1e12) * 1e3, 4) for g in PEAK_TFLOPS))  # fmt: skip
    print()


def table_comm(a) -> None:
    print(f"### What crosses the network per run (proj 32, r={a.r}, {a.queries} queries)\n")
    head("base", "covariance sums A, S (all-reduce)", "EK-FAC eigenvalues (all-reduce)",
         f"embedding sums, P x {EMBED_K} x 2 passes (all-reduce)", "query gradients (broadcast)",
         "per-row results (gather to rank 0)")  # fmt: skip
    per_row = 8 + 8 * (a.queries + 1) + 4 * 32  # position, harm per query + their sum (fp64), embedding (fp32)
    for name in a.bases or DETAIL:
        dims = [s.projected(32) for s in block_shapes(shapes(BASES[name], a.r))]
        F = sum(o * i for o, i in dims)
        row(name, human_bytes(a.checkpoints * sum(8 * (o * o + i * i) for o, i in dims)),
            human_bytes(a.checkpoints * 8 * F), human_bytes(2 * 8 * F * EMBED_K),
            human_bytes(a.checkpoints * 4 * a.queries * F),
            f"{per_row} B/row: {human_bytes(per_row * a.rows)} at {a.rows:,} rows")  # fmt: skip
    print()


def table_fixed(a) -> None:
    print(f"### Work that does not shrink with more ranks ({a.rows:,} rows, {a.gpu}, {a.node_cores} cores per "
          f"node of {a.gpus_per_node}, {a.eval_items:,} eval items, {a.queries} queries; first run)\n")  # fmt: skip
    head(
        "base",
        "tokens/row",
        "load the base (every rank)",
        "tokenize the file (every rank)",
        "eval NLL + query gradients (rank 0)",
        "diagnose (rank 0, after)",
        "rank-0 RAM: scores and report",
        "rank-0 RAM: diagnose",
    )
    for name in a.bases or DETAIL:
        for T in a.tokens:
            fx = fixed_s(name, T, a)
            row(name, f"{T:,}", f"{fmt(fx['load'], 0)} s", f"{fmt(fx['tokenize'] / 60, 0)} min",
                f"{fmt(fx['eval'] / 60, 1)} min", f"{fmt(fx['diagnose'] / 60, 0)} min",
                human_bytes(a.rows * REPORT_BYTES_PER_ROW),
                human_bytes(a.rows * (DIAG_BYTES_PER_ROW + DIAG_BYTES_PER_TOKEN * T)))  # fmt: skip
    print()


def table_example(a) -> None:
    ck = f", {a.checkpoints} checkpoints" if a.checkpoints > 1 else ""
    print(f"### Worked example: {a.rows:,} rows, {a.gpu} nodes of {a.gpus_per_node}, target {a.target_hours:g} h "
          f"wall (MFU {a.mfu:.0%}, b/a {a.overhead}, proj 32, {a.store_dtype} store{ck})\n")  # fmt: skip
    head("base", "tokens/row", "GPU-hours of row work", "fixed part", "GPUs", "nodes", "wall", "GPU-hours billed",
         "store per rank (plan checks)", "store per node", "token copies per node", "disk per node")  # fmt: skip
    for name in a.bases or DETAIL:
        base = BASES[name]
        st = store(base, a, rows=a.rows)
        store_all = a.checkpoints * st["store_bytes"]  # one store per checkpoint
        shard, n_shards = int(st["shard_rows"]), int(st["n_shards"])
        post = sum(post_s_per_row(base, a).values())
        for T in a.tokens:
            gpu_h = a.rows * (pass_s_per_row(base, T, a, a.gpu) + post) / 3600
            fixed_h = sum(fixed_s(name, T, a).values()) / 3600
            room = a.target_hours - fixed_h
            if room <= 0:
                row(name, f"{T:,}", fmt(gpu_h, 0), f"{fmt(fixed_h)} h", "target below the fixed part", *[""] * 7)
                continue
            nodes = math.ceil(gpu_h / room / a.gpus_per_node)
            world = nodes * a.gpus_per_node
            wall = fixed_h + gpu_h / world
            store_node = store_all / nodes
            rank_rows = min(a.rows, -(-n_shards // world) * shard)  # the largest round-robin share (_rank_rows)
            store_rank = a.checkpoints * store(base, a, rows=rank_rows)["store_bytes"]
            tok_node = a.gpus_per_node * a.rows * (TOKEN_FILE_BYTES * T + 50)  # every rank: the whole file
            row(name, f"{T:,}", fmt(gpu_h, 0), f"{fmt(fixed_h)} h", f"{world:,}", f"{nodes:,}", f"{fmt(wall)} h",
                fmt(world * wall, 0), human_bytes(store_rank), human_bytes(store_node), human_bytes(tok_node),
                human_bytes(store_node + tok_node))  # fmt: skip
    print()


TABLES = {
    "flops": table_flops,
    "compute": table_compute,
    "store": table_store,
    "post": table_post,
    "gpu": table_gpu,
    "comm": table_comm,
    "fixed": table_fixed,
    "example": table_example,
}


# --- measuring the CPU inputs ----------------------------------------------------------------------------------------


def measure(rows: int = 576, n_linear: int = 32, queries: int = 16, r: int = 16, k: int = 32) -> None:
    """The MEASURED inputs above, on this machine, one core / 1 thread each: sha256, safetensors parsing and fp32 ->
    fp64 conversion of shard-sized data at r / proj-k block shapes (n_linear LoRA'd layers, 7B shard rows); the
    tokenizer; rank 0's memory per row (report) and diagnose's (per row and token). Also, for reference, the CPU
    time of harm_scores + gradient_embedding (what a CPU device pays), and the fp64 rate it implies by the FLOP count
    of :func:`flops_per_float`."""
    import hashlib
    import os
    import statistics

    import torch
    from safetensors.torch import load as load_bytes
    from safetensors.torch import save as save_bytes

    from gradian.attribute.plan import shard_rows
    from gradian.attribute.scores import Stats, gradient_embedding, harm_scores, precondition
    from gradian.attribute.source import MemorySource

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    dims = {f"l{j}.{kind}": ((r, k) if kind == "A" else (k, r)) for j in range(n_linear) for kind in ("A", "B")}
    F = sum(o * i for o, i in dims.values())
    chunk = shard_rows(2 * r * k * 224, 8)  # rows per shard of a 7B store (224 LoRA'd layers)

    def median_s(fn, n: int = 5) -> float:
        times = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    shard = {f"g.{n}": torch.randn(chunk, o, i, generator=g) for n, (o, i) in dims.items()}
    shard |= {f"A.{n}": torch.randn(i, i, dtype=torch.float64, generator=g) for n, (_, i) in dims.items()}
    shard |= {f"S.{n}": torch.randn(o, o, dtype=torch.float64, generator=g) for n, (o, _) in dims.items()}
    data = save_bytes(shard)
    t = median_s(lambda: load_bytes(data))
    print(f"safetensors parse: {len(data) / t / 1e9:.2f} GB/s of shard bytes, one core (--parse-gbps)")
    buf = os.urandom(64 << 20)
    t = median_s(lambda: hashlib.sha256(buf).hexdigest())
    print(f"sha256: {len(buf) / t / 1e9:.2f} GB/s, one core (--sha-gbps)")

    src = MemorySource({n: torch.randn(rows, o, i, generator=g) for n, (o, i) in dims.items()}, chunk=chunk)

    def spd(d: int) -> torch.Tensor:
        x = torch.randn(d, 4 * d, generator=g, dtype=torch.float64)
        return x @ x.T

    stats = Stats({n: spd(i) for n, (_, i) in dims.items()}, {n: spd(o) for n, (o, _) in dims.items()}, rows, rows)
    V = {n: torch.randn(queries + 1, o, i, generator=g) for n, (o, i) in dims.items()}
    pre = precondition("ekfac", V, src, stats)
    t = time.process_time()
    harm_scores("ekfac", pre.X, src)
    t_h = time.process_time() - t
    t = time.process_time()
    gradient_embedding("ekfac", src, stats, eig=pre.eig)
    t_e = time.process_time() - t
    n = rows * F
    f = flops_per_float(r, k, queries)  # (r, k) and (k, r) blocks: the same count
    print(
        f"for reference, a CPU device, 1 thread: scores ({queries} queries) {t_h / n * 1e9:.1f} ns = "
        f"{f['scores'] / (t_h / n) / 1e9:.1f} GFLOP/s, embedding {t_e / n * 1e9:.1f} ns = "
        f"{f['embedding'] / (t_e / n) / 1e9:.1f} GFLOP/s, per stored float (fp64, FLOPs as flops_per_float)"
    )
    _measure_tokens_and_memory(queries)


def _measure_tokens_and_memory(queries: int) -> None:
    import json
    import os
    import random
    import tempfile
    import tracemalloc
    from pathlib import Path

    import numpy as np

    from gradian.attribute.api import AttributionResult
    from gradian.data import format_examples, load_examples, load_tokenizer
    from gradian.data.types import Example, FormatSettings
    from gradian.report.build import build_report, texts_of
    from gradian.report.render import render_all

    rng = random.Random(0)
    words = [a + b for a in ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po") for b in ("n", "r", "t", "s", "l", "")]
    tok = load_tokenizer(Path(__file__).resolve().parents[1] / "examples" / "stories260k" / "base")
    ex = [
        Example(index=i, source="s.jsonl", format="prompt_completion",
                prompt="Question: " + " ".join(rng.choice(words) for _ in range(60)) + "\nAnswer:",
                completion=" " + " ".join(rng.choice(words) for _ in range(40)), raw={})
        for i in range(20_000)
    ]  # fmt: skip
    t = time.perf_counter()
    fx = format_examples(ex, tok, FormatSettings(max_length=4096))
    dt = time.perf_counter() - t
    n_tok = sum(len(f.input_ids) for f in fx)
    cores = len(os.sched_getaffinity(0))
    print(
        f"tokenize (format_examples, bundled stories260K tokenizer): {n_tok / dt / cores / 1e6:.2f} M tokens/s "
        f"per core on {cores} cores (--tok-per-s)"
    )
    del ex, fx

    # what `gradian diagnose` holds (its Examples and FormattedExamples) plus the report's text of every row
    points = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, prompt_words, completion_words in ((5000, (15, 40), (5, 30)), (2000, (150, 150), (100, 100))):
            path = Path(tmp) / f"rows_{n}.jsonl"
            with open(path, "w") as f:
                for _ in range(n):
                    p = " ".join(rng.choice(words) for _ in range(rng.randint(*prompt_words)))
                    c = " ".join(rng.choice(words) for _ in range(rng.randint(*completion_words)))
                    f.write(json.dumps({"prompt": f"Question: {p}\nAnswer:", "completion": f" {c}"}) + "\n")
            tracemalloc.start()
            rows = load_examples(path)
            frows = format_examples(rows, tok, FormatSettings(max_length=4096))
            texts = texts_of(rows)
            size = tracemalloc.get_traced_memory()[0] / n
            tracemalloc.stop()
            T = sum(len(f.input_ids) for f in frows) / n
            points.append((T, size))
            print(f"diagnose + report texts, {T:.0f}-token rows: {size / 1024:.2f} KiB per row")
            del rows, frows, texts
    (t1, s1), (t2, s2) = points
    b = (s2 - s1) / (t2 - t1)
    print(f"  fitted: {s1 - b * t1:.0f} B per row + {b:.1f} B per token")

    # rank 0 after the gather: as run_attribution, AttributionResult.write and pipeline (build_report, render_all)
    N, M = 20_000, queries + 1
    nr = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        tracemalloc.start()
        ids = [f"row-{i:08d}" for i in range(N)]  # every rank's train_ids (TokenizedRows.ids()), 12 characters
        parts = [(np.arange(N), {"ekfac": nr.standard_normal((M, N))}, nr.standard_normal((N, 32)).astype("f4"))]
        pos = np.concatenate([p[0] for p in parts])
        harm = np.concatenate([p[1]["ekfac"] for p in parts], axis=1)
        emb = np.concatenate([p[2] for p in parts])
        rows_ids = [ids[int(i)] for i in pos]
        total = harm[-1]
        order = np.argsort(-total, kind="stable")
        examples = [
            {"index": int(pos[i]), "id": rows_ids[i], "score": float(total[i]), "rank": r + 1}
            for r, i in enumerate(order)
        ]
        res = AttributionResult("ekfac", {}, examples, [], [], [], scores=total, item_scores=harm[:-1],
                                embeddings=emb, embedding_index=[int(i) for i in pos])  # fmt: skip
        res.write(tmp)
        report = build_report(res.to_json(), findings=[], embeddings=emb, embedding_index=res.embedding_index)
        render_all(report, tmp)
        peak = tracemalloc.get_traced_memory()[1] / N
        tracemalloc.stop()
    print(f"rank 0, ids, scores and report ({queries} queries, {N:,} rows): {peak:,.0f} B per row at the peak")


def fp64_arg(text: str) -> tuple[str, float]:
    gpu, _, tflops = text.partition("=")
    if gpu not in PEAK_TFLOPS or not tflops:
        raise argparse.ArgumentTypeError(f"expected GPU=TFLOPS with GPU one of {', '.join(PEAK_TFLOPS)}")
    return gpu, float(tflops)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", nargs="?", default="tables", choices=("tables", "measure"))
    p.add_argument("--only", nargs="+", choices=list(TABLES), help="print only these tables")
    p.add_argument("--bases", nargs="+", choices=list(BASES), help="default: all in compute/flops, else 7B 70B")
    p.add_argument("--r", type=int, default=16, help="LoRA rank on all 7 projections")
    p.add_argument("--tokens", nargs="+", type=int, default=list(TOKENS), help="tokens per training row")
    p.add_argument("--mfu", type=float, default=MFU, help="model FLOPs utilisation of the floor (assumption)")
    p.add_argument("--overhead", type=float, default=OVERHEAD, help="b/a, gradian / floor (measured on CPU)")
    p.add_argument("--checkpoints", type=int, default=1, help="adapter states attributed (--checkpoints)")
    p.add_argument("--proj", nargs="+", type=int, default=list(PROJ_DIMS), help="--proj-dim values to tabulate")
    p.add_argument("--store-dtype", default="fp32", choices=("fp32", "bf16"))
    p.add_argument(
        "--fp64-tflops",
        nargs="+",
        type=fp64_arg,
        default=[],
        metavar="GPU=TFLOPS",
        help="fp64 throughput of the scoring on the GPU (default H100=34 A100=9.7, no tensor cores)",
    )
    p.add_argument("--h2d-gbps", type=float, default=H2D_GBPS, help="host -> GPU copy GB/s per rank (pageable)")
    p.add_argument("--sha-gbps", type=float, default=SHA_GBPS, help="sha256 GB/s per rank (measured)")
    p.add_argument("--parse-gbps", type=float, default=PARSE_GBPS, help="safetensors parse GB/s per rank (measured)")
    p.add_argument("--disk-gbps", type=float, default=4.0, help="store disk GB/s per node, read or write")
    p.add_argument("--load-gbps", type=float, default=2.0, help="base weights read GB/s per rank")
    p.add_argument("--tok-per-s", type=float, default=TOK_PER_S_PER_CORE, help="tokens/s per core (measured)")
    p.add_argument("--node-cores", type=int, default=96, help="CPU cores per node")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--gpu", default="H100", choices=list(PEAK_TFLOPS), help="GPU of the fixed part and example")
    p.add_argument("--rows", type=int, default=10_000_000, help="training rows (fixed part, example)")
    p.add_argument("--target-hours", type=float, default=12.0, help="wall time of the worked example")
    p.add_argument("--eval-items", type=int, default=1000)
    p.add_argument("--queries", type=int, default=16, help="regressed eval items (query gradients)")
    p.add_argument("--eval-tokens", type=int, default=512, help="tokens per eval item")
    a = p.parse_args()
    a.fp64_tflops = FP64_TFLOPS | dict(a.fp64_tflops)
    if a.what == "measure":
        measure()
        return
    for name in a.only or TABLES:
        TABLES[name](a)


if __name__ == "__main__":
    main()
