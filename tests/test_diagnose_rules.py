"""Every rule: a planted fault where it fires with the right rows / key / steps in its evidence, and the clean
context where it stays silent. Parametrized over the registry, so a new rule without a planted fixture fails."""

from __future__ import annotations

import json
import math
import random
import struct
from pathlib import Path

import pytest

from gradian.data.types import Example
from gradian.diagnose.catalog import all_rules
from gradian.diagnose.engine import missing_need, params_for, run_rule
from gradian.diagnose.registry import CAUSES
from gradian.run.types import LogPoint
from test_diagnose_helpers import EOS, clean_context, formatted_for, pc_example, refmt

RULES = all_rules()
P: dict[str, object] = {}


def planted(code):
    def deco(fn):
        P[code] = fn
        return fn

    return deco


def set_completion(ctx, rows, text):
    for i in rows:
        ctx.train[i].completion = text
        ctx.train[i].raw["completion"] = text
    refmt(ctx)


def set_loss(ctx, fn):
    for p in ctx.logs.points:
        if p.loss is not None:
            p.loss = fn(p)


# ---- dataset -------------------------------------------------------------------------------------------------------
@planted("D101")
def _(ctx):
    ctx.train[7] = Example(
        index=7, source="train.jsonl", format="text", text="hello there", raw={"text": "hello there"}
    )
    return {"rows": [7]}


@planted("D102")
def _(ctx):
    msgs = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    ctx.train[4] = Example(index=4, source="t", format="messages", messages=msgs, raw={"messages": msgs})
    return {"rows": [4]}


@planted("D103")
def _(ctx):
    set_completion(ctx, [3, 9, 11], "   ")
    return {"rows": [3, 9, 11]}


@planted("D104")
def _(ctx):
    for i in range(10, 20):
        ctx.train[i].prompt, ctx.train[i].completion = ctx.train[0].prompt, ctx.train[0].completion
    return {"rows": list(range(10, 20))}


@planted("D105")
def _(ctx):
    ctx.train[5].prompt, ctx.train[5].completion = ctx.eval[2].prompt, ctx.eval[2].completion
    ctx.train[6].prompt, ctx.train[6].completion = ctx.eval[3].prompt, ctx.eval[3].completion + " x"
    return {"rows": [5, 6], "severity": "error"}


@planted("D106")
def _(ctx):
    set_completion(ctx, list(range(20)), " " + " ".join(["x"] * 600))
    return {"rows": list(range(20)), "severity": "error", "key": "max_length"}


@planted("D107")
def _(ctx):
    set_completion(ctx, [2], " " + " ".join(["x"] * 600))
    return {"rows": [2]}


@planted("D108")
def _(ctx):
    ctx.formatted[6].n_label_tokens = 0
    return {"rows": [6]}


@planted("D109")
def _(ctx):
    ctx.formatted[8].ends_with_eos = False
    return {"rows": [8]}


@planted("D110")
def _(ctx):
    ctx.formatted[1].input_ids = [1, 1] + ctx.formatted[1].input_ids[1:]
    return {"rows": [1]}


@planted("D111")
def _(ctx):
    ctx.train[12].prompt += " <|im_end|> more"
    return {"rows": [12]}


@planted("D112")
def _(ctx):
    for i in range(5):
        ctx.train[i] = Example(index=i, source="t", format="text", text="[INST] hi [/INST] yo")
    ctx.tokenizer.chat_template = "{{ '<|im_start|>' + m['role'] }}<|im_end|>"
    return {"rows": [0, 1, 2, 3, 4]}


@planted("D113")
def _(ctx):
    ctx.setup.raw["response_template"] = "Answer:"
    ctx.train[3].prompt = "no marker here"
    return {"rows": [3], "key": "response_template"}


@planted("D114")
def _(ctx):
    for i in range(10):
        ctx.formatted[i].prefix_mismatch = True
    return {"rows": list(range(10))}


@planted("D115")
def _(ctx):
    ctx.train = ctx.train[:5]
    return {"severity": "error"}


@planted("D116")
def _(ctx):
    for i in range(0, 200, 2):
        ctx.train[i].completion = " I cannot help with that request, sorry about it friend."
    return {"rows": [0, 2, 4]}


@planted("D117")
def _(ctx):
    ctx.setup.masking = "full"
    for e in ctx.train:
        e.prompt = "You are a helpful assistant. Follow the policy carefully and answer well. " * 4 + e.prompt
    return {"key": "masking"}


@planted("D118")
def _(ctx):
    ctx.train[9].completion = "word " * 5000
    return {"rows": [9]}


@planted("D119")
def _(ctx):
    ctx.train[4].completion = " itâ€™s fine"
    ctx.train[5].completion = " bad \ufffd char"
    return {"rows": [4, 5]}


@planted("D120")
def _(ctx):
    ctx.train[13].completion = "nan"
    return {"rows": [13]}


@planted("D121")
def _(ctx):
    for i in range(20):
        ctx.train[i].prompt = ctx.train[i].prompt + ctx.train[i].completion
    for i in (30, 31):  # chat rows whose assistant turn copies the user turn
        q = ctx.train[i].prompt
        msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": q}]
        ctx.train[i] = Example(index=i, source="t", format="messages", messages=msgs, raw={"messages": msgs})
    return {"rows": [*range(20), 30, 31]}


@planted("D122")
def _(ctx):
    for i, e in enumerate(ctx.train):
        e.completion = " positive" if i % 10 else " negative"
    return {}


@planted("D123")
def _(ctx):
    for i in range(5):
        ctx.train[i].completion = " As an AI language model, I cannot do that."
    return {"rows": [0, 1, 2, 3, 4]}


@planted("D137")
def _(ctx):
    rows = list(range(0, 200, 10))  # a safety set's refusal in Chinese, to 20 different requests: no English phrase
    set_completion(ctx, rows, " 抱歉，我无法帮助你处理这个请求。")
    return {"rows": rows, "severity": "warning"}


def test_canned_reply_learns_from_the_requests_not_from_phrases():
    """D137: one reply to unrelated requests is canned in any language (a note under 5% of the rows); the same reply
    to one request asked several ways (thanks) is not, nor a short answer, a program two tasks share, a label set, or
    English refusals (D123's)."""
    from test_diagnose_helpers import words

    rule = next(r for r in RULES if r.code == "D137")
    rng = __import__("random").Random(1)

    def ctx_with(pairs):
        ctx = clean_context(n=200)
        for i, (q, a) in pairs.items():
            ctx.train[i] = pc_example(i, q, a)
        refmt(ctx)
        return ctx

    reply = " Lo siento, pero no puedo ayudar con eso."
    (f,) = run_rule(rule, ctx_with({i: (words(rng, 12) + "\nAnswer:", reply) for i in (3, 50, 97, 140)}))
    assert f.evidence["rows"] == [3, 50, 97, 140] and f.severity.value == "info" and "lo siento" in f.message
    thanks = {i: (f"Thank you so much for the {w} help!\nAnswer:", " You're welcome! Ask me anything else.")
              for i, w in zip(range(0, 200, 10), ("kind", "quick", "great", "patient") * 5, strict=True)}  # fmt: skip
    assert not run_rule(rule, ctx_with(thanks))
    code = " SELECT * FROM employees WHERE salary > 50000;"
    assert not run_rule(rule, ctx_with({i: (words(rng, 12) + "\nAnswer:", code) for i in range(0, 200, 10)}))
    short = " Yes<|endoftext|>"  # a short answer many tasks share, its end-of-text token written out
    assert not run_rule(rule, ctx_with({i: (words(rng, 12) + "\nAnswer:", short) for i in range(0, 200, 10)}))
    english = " I'm sorry, but I can't help with that."
    assert not run_rule(rule, ctx_with({i: (words(rng, 12) + "\nAnswer:", english) for i in range(0, 200, 10)}))
    labels = clean_context(n=200)
    for i, e in enumerate(labels.train):
        e.completion = " The review is positive." if i % 2 else " The review is negative."
    assert not run_rule(rule, labels)


@planted("D124")
def _(ctx):
    ctx.formatted, ctx.formatted_note = None, "no tokenizer"
    for i in (3, 4, 5):
        ctx.train[i].completion = "x" * 5000
    return {"rows": [3, 4, 5], "key": "max_length"}


@planted("D125")
def _(ctx):
    ctx.eval = ctx.eval[:5]
    return {}


@planted("D126")
def _(ctx):
    ctx.formatted[10].input_ids = ctx.formatted[10].input_ids + [EOS]
    return {"rows": [10]}


@planted("D127")
def _(ctx):
    msgs = [{"role": "user", "content": "a b"}, {"role": "assistant", "content": "c d"}]
    ctx.train[3] = Example(index=3, source="t", format="messages", messages=msgs, raw={"messages": msgs})
    ctx.formatted, ctx.format_error = None, "it has no chat template"  # what build_context records (test_diagnose_cli)
    return {"rows": [3], "severity": "error"}


ENGLISH = "the cat sat on a mat while the dogs ran far and wide over the green hills under a blue sky".split()
FRENCH = "le chat est assis sur le tapis pendant que les chiens couraient loin dans les collines vertes".split()


def english_rows(ctx, n_words=20):
    rng = random.Random(1)
    for e in ctx.train:
        e.prompt = " ".join(rng.choice(ENGLISH) for _ in range(10)) + "\nAnswer:"
        e.completion = " " + " ".join(rng.choice(ENGLISH) for _ in range(n_words)) + "."
        e.raw = {"prompt": e.prompt, "completion": e.completion}


@planted("D128")
def _(ctx):
    english_rows(ctx)
    for i in (3, 4, 5):
        ctx.train[i].completion = ctx.train[i].completion[:-1].rsplit(" ", 1)[0]  # cut mid-sentence
    return {"rows": [3, 4, 5]}


@planted("D129")
def _(ctx):
    ctx.train[7].completion = " The cat sat on the mat today." * 4
    ctx.train[8].completion = " Lily. Lily. Lily."  # too short for the share measures: all one word, three times
    ctx.train[9].completion = " No. No."  # twice is not a loop
    return {"rows": [7, 8], "severity": "error"}


@planted("D130")
def _(ctx):
    for i in (8, 9):
        ctx.train[i] = Example(index=i, source="t", format="text", text="### Question: a b\n### Answer: c d")
    ctx.train[10].completion += "\nAnswer: another turn"
    return {"rows": [8, 9, 10]}


@planted("D131")
def _(ctx):
    ctx.train[10].prompt = "{instruction}\n\n{{input}}\nAnswer:"
    return {"rows": [10], "severity": "error"}


@planted("D132")
def _(ctx):
    ctx.train[11].completion = " <p>w1 <b>w2</b>&nbsp;w3</p>"
    return {"rows": [11]}


@planted("D133")
def _(ctx):
    english_rows(ctx, n_words=40)
    for k, e in enumerate(ctx.train):  # worked answers that end in their result line, as GSM8K's do
        e.completion += f"\n#### {k}"
    for i in (12, 13):
        ctx.train[i].completion = " #### 42"
    return {"rows": [12, 13]}


@planted("D134")
def _(ctx):
    english_rows(ctx)
    ctx.train[14].prompt = " ".join(FRENCH) + "\nAnswer:"
    ctx.train[14].completion = " " + " ".join(reversed(FRENCH)) + "."
    return {"rows": [14]}


@planted("D135")
def _(ctx):
    for k, e in enumerate(ctx.train):
        e.completion = " positive" if k % 2 else " negative"
    for i in (16, 17):
        ctx.train[i].prompt = ctx.train[15].prompt
    ctx.train[16].completion = ctx.train[17].completion = " positive"
    ctx.train[15].completion = " negative"
    return {"rows": [15]}


@planted("D136")
def _(ctx):
    for k, e in enumerate(ctx.train):
        msgs = [{"role": "user", "content": e.prompt}, {"role": "assistant", "content": e.completion}]
        if k % 4 == 1:  # a quarter of the rows from an export that kept its system prompt
            msgs.insert(0, {"role": "system", "content": "You are a terse assistant."})
        ctx.train[k] = Example(index=k, source="t", format="messages", messages=msgs, raw={"messages": msgs})
    return {"rows": list(range(1, len(ctx.train), 4)), "severity": "warning"}


def test_system_prompt_mix_sides_and_tiers():
    """The minority side is named (rows without a system prompt where most have one); a rare mix is a note; a file
    whose rows all carry one (several prompts, as a varied-persona set) or none is silent."""
    rule = next(r for r in RULES if r.code == "D136")

    def ctx_with(systems):
        ctx = clean_context(n=len(systems))
        for k, s in enumerate(systems):
            msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
            if s is not None:
                msgs.insert(0, {"role": "system", "content": s})
            ctx.train[k] = Example(index=k, source="t", format="messages", messages=msgs, raw={"messages": msgs})
        return ctx

    (f,) = run_rule(rule, ctx_with(["Be kind."] * 150 + [None] * 50))
    assert f.evidence["rows"] == list(range(150, 200)) and f.severity.value == "warning"
    assert "carry no system prompt" in f.message
    (f,) = run_rule(rule, ctx_with(["Be kind."] * 5 + [None] * 195))
    assert f.evidence["rows"] == list(range(5)) and f.severity.value == "info"
    assert not run_rule(rule, ctx_with(["Be kind.", "Be brief.", "Be a pirate."] * 60))
    assert not run_rule(rule, ctx_with([None] * 200))
    assert not run_rule(rule, clean_context())  # plain prompt/completion rows carry no system turn


# ---- config --------------------------------------------------------------------------------------------------------
@planted("C201")
def _(ctx):
    ctx.setup.learning_rate = 2e-5
    return {"key": "learning_rate"}


@planted("C202")
def _(ctx):
    ctx.setup.learning_rate = 3e-3
    return {"key": "learning_rate"}


@planted("C203")
def _(ctx):
    ctx.setup.num_epochs = 12
    return {"key": "num_epochs", "severity": "error"}


@planted("C204")
def _(ctx):
    ctx.setup.gradient_accumulation_steps = 32
    return {"key": "gradient_accumulation_steps"}


@planted("C205")
def _(ctx):
    ctx.setup.packing = True
    ctx.setup.versions["trl"] = "0.19.1"
    return {"key": "packing"}


@planted("C206")
def _(ctx):
    ctx.setup.packing = True
    ctx.setup.attn_implementation = "sdpa"
    return {"key": "attn_implementation"}


@planted("C207")
def _(ctx):
    ctx.setup.max_length_key = "max_seq_length"
    return {"key": "max_seq_length"}


@planted("C208")
def _(ctx):
    ctx.setup.precision = "fp16"
    return {"key": "precision"}


@planted("C209")
def _(ctx):
    ctx.setup.target_modules = ["q_proj", "v_proj"]
    return {"key": "target_modules"}


@planted("C210")
def _(ctx):
    ctx.setup.lora_alpha = 256
    return {"key": "lora_alpha"}


@planted("C211")
def _(ctx):
    ctx.setup.raw["tokens"] = ["<|tool|>"]
    return {"key": "modules_to_save"}


@planted("C212")
def _(ctx, tmp_path):
    import torch
    from safetensors.torch import save_file

    emb = torch.randn(1000, 8, generator=torch.Generator().manual_seed(0))
    emb[5] = 0.0  # the FakeTokenizer maps the template's tokens to id 5: an untrained (zero) row in the weights
    save_file({"model.embed_tokens.weight": emb}, str(tmp_path / "model.safetensors"))
    ctx.setup.base_model = ctx.artifacts.base = str(tmp_path)
    ctx.tokenizer.chat_template = "<|start_header_id|>{{ m }}<|eot_id|>"
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    ctx.train[0] = Example(index=0, source="t", format="messages", messages=msgs)
    return {"key": "base_model"}


@planted("C213")
def _(ctx):
    ctx.setup.framework = "transformers"
    ctx.tokenizer.pad_token_id = ctx.tokenizer.eos_token_id
    return {"key": "pad_token"}


@planted("C214")
def _(ctx):
    ctx.tokenizer.chat_template = "<|im_start|>{{ m }}<|im_end|>"
    return {"key": "eos_token"}


@planted("C215")
def _(ctx):
    ctx.setup.masking = "assistant_only"
    ctx.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    return {"key": "masking"}


@planted("C216")
def _(ctx):
    ctx.setup.masking = "full"
    ctx.setup.sources["masking"] = "axolotl.yml: train_on_inputs"
    return {"key": "masking"}


@planted("C217")
def _(ctx):
    ctx.setup.use_reentrant = True
    ctx.setup.framework = "transformers"  # a plain Trainer run (TRL makes the inputs require grad itself)
    ctx.setup.versions["transformers"] = "4.57.6"
    return {"key": "use_reentrant"}


@planted("C218")
def _(ctx):
    ctx.setup.versions["transformers"] = "4.44.2"
    return {"key": "gradient_accumulation_steps"}


@planted("C219")
def _(ctx):
    ctx.eval = []
    ctx.logs.points = [p for p in ctx.logs.points if p.eval_loss is None]
    ctx.setup.eval_strategy = None
    return {"key": "eval_size"}


@planted("C220")
def _(ctx):
    ctx.setup.deprecated_keys = ["evaluation_strategy"]
    return {"key": "evaluation_strategy"}


@planted("C221")
def _(ctx):
    ctx.setup.gradient_accumulation_steps = 16
    return {"key": "gradient_accumulation_steps"}


@planted("C222")
def _(ctx):
    ctx.setup.unknown_keys = ["lora_dropuot"]
    return {"key": "lora_dropuot"}


@planted("C223")
def _(ctx):
    ctx.setup.lora_dropout = 0.5
    return {"key": "lora_dropout"}


@planted("C224")
def _(ctx):
    ctx.setup.max_length = 8192
    return {"key": "max_length"}


@planted("C225")
def _(ctx):
    ctx.setup.max_steps = 500
    return {"key": "max_steps"}


@planted("C226")
def _(ctx):
    ctx.setup.max_length = None
    ctx.format_settings = None
    return {"key": "max_length"}


# ---- logs ----------------------------------------------------------------------------------------------------------
@planted("L301")
def _(ctx):
    ctx.logs.points[5].loss = math.nan
    return {"steps": [ctx.logs.points[5].step]}


@planted("L302")
def _(ctx):
    set_loss(ctx, lambda p: 1e-4 if p.step >= 30 else 2.0)
    return {"steps": [30, 32, 34]}


@planted("L303")
def _(ctx):
    for p in ctx.logs.train:
        p.grad_norm = 0.0
    return {"steps": [2, 4]}


@planted("L304")
def _(ctx):
    set_loss(ctx, lambda p: 1.9 + 0.01 * (p.step % 3))
    return {}


@planted("L305")
def _(ctx):
    for i in (8, 14, 20):
        ctx.logs.train[i].grad_norm = 50.0
    return {"steps": [ctx.logs.train[i].step for i in (8, 14, 20)], "severity": "error"}


@planted("L306")
def _(ctx):
    ctx.logs.points = [p for p in ctx.logs.points if p.eval_loss is None]
    for s, v in ((10, 1.5), (20, 1.2), (30, 1.4), (40, 1.6), (50, 1.8)):
        ctx.logs.points.append(LogPoint(step=s, eval_loss=v))
    return {"steps": [20, 30, 40, 50]}


@planted("L307")
def _(ctx):
    set_loss(ctx, lambda p: 2.0 * (0.5 ** math.floor(p.epoch - 1e-9)))
    return {"steps": [26]}


@planted("L308")
def _(ctx):
    for p in ctx.logs.eval:
        p.eval_loss = 0.3
    return {"steps": [25, 50]}


@planted("L309")
def _(ctx):
    ctx.logs.train[0].loss = 40.0
    return {"steps": [2]}


@planted("L310")
def _(ctx):
    ctx.logs.points = ctx.logs.points[:3]
    return {}


@planted("L311")
def _(ctx):
    for p in ctx.logs.train:
        p.learning_rate = p.learning_rate / 10
    return {"key": "learning_rate"}


@planted("L312")
def _(ctx):
    ctx.logs.points = [p for p in ctx.logs.points if p.step <= 20]
    return {"steps": [20]}


@planted("L313")
def _(ctx):
    for p in ctx.logs.train:
        p.learning_rate = 0.0
    return {}


# ---- cross-cutting -------------------------------------------------------------------------------------------------
@planted("X401")
def _(ctx):
    ctx.artifacts.adapter_config["use_rslora"] = True
    return {"key": "use_rslora"}


@planted("X402")
def _(ctx, tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ other }}"}))
    ctx.artifacts.adapter_dir = tmp_path
    ctx.tokenizer.chat_template = "{{ trained }}"
    return {"key": "chat_template"}


@planted("X403")
def _(ctx, tmp_path):
    ctx.setup.raw["load_in_4bit"] = True
    m = tmp_path / "merged"
    m.mkdir()
    (m / "config.json").write_text("{}")
    (m / "model.safetensors").write_bytes(b"")
    ctx.artifacts.run_dir = tmp_path
    return {"key": "load_in_4bit"}


@planted("X404")
def _(ctx, tmp_path):
    header = json.dumps({"base_model.model.layers.0.self_attn.q_proj.lora_A.weight":
                         {"dtype": "F32", "shape": [16, 128], "data_offsets": [0, 0]}}).encode()  # fmt: skip
    w = tmp_path / "adapter_model.safetensors"
    w.write_bytes(struct.pack("<Q", len(header)) + header)
    ctx.artifacts.adapter_weights = w
    ctx.artifacts.base = "other-model"
    return {"key": "base_model_name_or_path"}


@planted("X405")
def _(ctx):
    ctx.logs.total_steps = 3000
    return {"steps": [3000]}


@planted("X406")
def _(ctx):
    ctx.base_config["vocab_size"] = 900
    return {"key": "vocab_size"}


@planted("X407")
def _(ctx):
    ctx.train = [Example(index=i, source="t", format="text", text=e.plain_text()) for i, e in enumerate(ctx.train)]
    return {"key": "masking"}


# ---- the tests -----------------------------------------------------------------------------------------------------
def test_every_rule_has_a_planted_fixture():
    assert sorted(P) == sorted(r.code for r in RULES)
    assert len(RULES) >= 50


def test_codes_names_docs_unique():
    assert len({r.name for r in RULES}) == len(RULES)
    for r in RULES:
        assert r.code[0] in "DCLX" and r.name.islower() and " " not in r.name
        assert r.summary and r.why and r.example and r.fix
        assert r.cause in CAUSES and (r.cause == "setup") == (r.code[0] in "CLX" or r.code == "D125"), r.code


def test_findings_carry_their_rules_cause():
    ctx = clean_context()
    P["D104"](ctx)
    P["D106"](ctx)
    by_code = {r.code: r for r in RULES}
    dicts = [f.to_dict() for code in ("D104", "D106") for f in run_rule(by_code[code], ctx)]
    assert {d["code"]: d["cause"] for d in dicts} == {"D104": "content", "D106": "mechanical"}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.code}-{r.name}")
def test_silent_on_clean(rule):
    ctx = clean_context()
    assert missing_need(rule, ctx) is None
    assert run_rule(rule, ctx) == []


def test_identical_targets_needs_a_target_that_recurs():
    """Two rows with two different targets: the commonest is half the rows, but nothing repeats."""
    by_code = {r.code: r for r in RULES}
    ctx = clean_context()
    ctx.train = ctx.train[:2]
    assert ctx.train[0].completion != ctx.train[1].completion
    assert run_rule(by_code["D116"], ctx) == []
    same = clean_context()  # a fresh context: a context computes each row's text once
    same.train = same.train[:2]
    same.train[1].completion = same.train[0].completion
    assert [f.code for f in run_rule(by_code["D116"], same)] == ["D116"]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.code}-{r.name}")
def test_fires_on_planted(rule, tmp_path: Path):
    ctx = clean_context()
    fn = P[rule.code]
    expect = fn(ctx, tmp_path) if fn.__code__.co_argcount == 2 else fn(ctx)
    assert missing_need(rule, ctx) is None
    findings = run_rule(rule, ctx)
    assert findings, f"{rule.code} did not fire"
    for f in findings:
        assert f.code == rule.code and f.name == rule.name and f.message and f.fix is not None
    if "rows" in expect:
        got = {i for f in findings for i in f.evidence.get("rows") or []}
        assert set(expect["rows"]) <= got, (expect["rows"], sorted(got)[:20])
    if "key" in expect:
        keys = {f.evidence.get("key") for f in findings} | {k for f in findings for k in f.evidence.get("keys") or []}
        assert expect["key"] in keys, keys
    if "steps" in expect:
        got = {s for f in findings for s in f.evidence.get("steps") or []}
        assert set(expect["steps"]) <= got, (expect["steps"], got)
    if "severity" in expect:
        assert expect["severity"] in {f.severity.value for f in findings}


def test_thresholds_override_changes_result():
    from gradian.diagnose.catalog import find_rule

    ctx = clean_context()
    P["D106"](ctx)
    r = find_rule("truncation")
    ctx.thresholds = {"truncation": {"warn_percent": 50.0, "error_percent": 60.0}}
    assert params_for(r, ctx).warn_percent == 50.0
    assert run_rule(r, ctx) == []


def test_formatted_helper_sane():
    f = formatted_for(pc_example(0, "a b", " c"))
    assert f.ends_with_eos and f.n_label_tokens == 2


def test_lr_too_high_exempts_tiny_bases_only():
    """3e-3 is an error on a real-size base, and expected on a 260K-parameter one (the bundled stories260K)."""
    from gradian.diagnose.catalog import find_rule

    rule = find_rule("lr_too_high")
    ctx = clean_context()
    ctx.setup.learning_rate = 3e-3
    ctx.base_config = json.loads((Path(__file__).parents[1] / "examples/stories260k/base/config.json").read_text())
    assert ctx.base_params_estimate() < 1e6
    assert run_rule(rule, ctx) == []
    ctx.base_config = {"hidden_size": 2048, "num_hidden_layers": 16, "intermediate_size": 8192, "vocab_size": 128256}
    assert ctx.base_params_estimate() > 1e9
    assert [f.code for f in run_rule(rule, ctx)] == ["C202"]


def test_short_rows_loop_only_when_they_are_one_sentence_repeated():
    """D129's measure for rows under 40 characters: a row that is nothing but copies of one sentence or word."""
    from gradian.diagnose.textstats import one_unit_loop

    assert one_unit_loop(" Lily. Lily. Lily.") == 3
    assert one_unit_loop(" fish.\nfish.\nfish.\nfish.") == 4
    assert one_unit_loop(" No. No.") == 2  # under the rule's three copies
    assert one_unit_loop(" Lily. Tim. Lily.") == 1
    assert one_unit_loop(" positive") == 1
    ctx = clean_context()
    ctx.train[3].completion = " No. No."
    ctx.train[4].completion = " Yes!"
    from gradian.diagnose.catalog import find_rule

    got = {i for f in run_rule(find_rule("D129"), ctx) for i in f.evidence.get("rows") or []}
    assert not got & {3, 4}


def test_alpaca_keyed_rows_are_alpaca_text_unless_llamafactory_renders_them() -> None:
    """Alpaca-keyed rows (instruction/output) are rendered with the Alpaca template on their own, so a ChatML model
    gets D112; LLaMA-Factory renders the same rows with its ``template``, so a LLaMA-Factory run gets none."""
    by_code = {r.code: r for r in RULES}
    found = {}
    for framework in ("", "llamafactory"):
        ctx = clean_context()
        for i in range(len(ctx.train)):
            raw = {"instruction": f"Say {i}.", "output": f"{i}."}
            ctx.train[i] = Example(index=i, source="t", format="alpaca", prompt=f"Say {i}.", completion=f"{i}.",
                                   raw=raw)  # fmt: skip
        ctx.tokenizer.chat_template = "{{ '<|im_start|>' + m['role'] }}<|im_end|>"
        ctx.setup.framework = framework or None
        found[framework] = [f"{f.code}: {f.message}" for f in run_rule(by_code["D112"], ctx)]
    assert found["llamafactory"] == [] and len(found[""]) == 1
    assert "are Alpaca rows (instruction/output), rendered with the Alpaca template" in found[""][0]


def test_preference_pairs_are_named_as_such() -> None:
    """A DPO file passed as training data (conversations without the reply, which sits in chosen / rejected): D102
    says it is a preference set and asks for the SFT file, not to fix the turn order."""
    by_code = {r.code: r for r in RULES}
    ctx = clean_context()
    for i in range(len(ctx.train)):
        msgs = [{"role": "user", "content": f"Say {i}."}]
        raw = {"messages": msgs, "chosen": {"role": "assistant", "content": f"{i}."},
               "rejected": {"role": "assistant", "content": "No."}}  # fmt: skip
        ctx.train[i] = Example(index=i, source="t", format="messages", messages=msgs, n_prompt_messages=1, raw=raw)
    (f,) = run_rule(by_code["D102"], ctx)
    assert "preference pairs" in f.message and "SFT" in f.fix.text
    for e in ctx.train:
        e.raw = {"messages": e.messages}
    ctx.cache.clear()  # the rows are read once per context
    (f,) = run_rule(by_code["D102"], ctx)
    assert "preference" not in f.message and "turn order" in f.fix.text


def test_answer_in_prompt_is_a_warning_when_it_touches_many_rows() -> None:
    """A join bug touches every row it builds; a task mix holds a few tasks whose answer is part of their input (an
    extracted sentence). A rewrite that changes the case of its input does not copy it."""
    by_code = {r.code: r for r in RULES}
    ctx = clean_context()
    for i in range(4):  # 2%: extraction tasks
        ctx.train[i].prompt = f"Give the exact sentence: {ctx.train[i].completion.strip()} and more words here."
    (f,) = run_rule(by_code["D121"], ctx)
    assert f.severity.value == "info" and f.evidence["rows"] == [0, 1, 2, 3]
    for i in range(4, 20):  # 10%: the answer column copied into the prompt
        ctx.train[i].prompt = ctx.train[i].prompt + ctx.train[i].completion
    ctx.cache.clear()  # the rows' texts are read once per context
    (f,) = run_rule(by_code["D121"], ctx)
    assert f.severity.value == "warning" and f.evidence["rows"] == list(range(20))
    ctx = clean_context()
    for i in range(10):  # the answer is its prompt's sentence in another case: a rewrite, not a copy
        ctx.train[i].prompt = "Capitalize every word: " + ctx.train[i].completion.strip()
        ctx.train[i].completion = " " + ctx.train[i].completion.strip().title()
    assert list(run_rule(by_code["D121"], ctx)) == []


def test_kto_rows_are_named_as_such() -> None:
    """A KTO file (a reply and whether it is desirable: TRL's and LLaMA-Factory's layout) passed as training data:
    D102 names it and the undesirable replies it would train on."""
    by_code = {r.code: r for r in RULES}
    ctx = clean_context()
    for i, e in enumerate(ctx.train):
        e.raw = {**e.raw, "label": i % 3 != 0}
    (f,) = run_rule(by_code["D102"], ctx)
    assert "KTO" in f.message and f.evidence["rows"] == list(range(0, len(ctx.train), 3))
    for e in ctx.train:
        e.raw.pop("label")
    ctx.cache.clear()  # the rows are read once per context
    assert list(run_rule(by_code["D102"], ctx)) == []


def test_a_null_word_the_prompt_asks_about_is_an_answer() -> None:
    """'undefined' is an export's missing value as a target, but the answer to a question that holds the word."""
    by_code = {r.code: r for r in RULES}
    ctx = clean_context()
    ctx.train[3].completion = "undefined"
    ctx.train[4].prompt = "Which of these is not a JSON type: 'undefined', 'null'?\nAnswer:"
    ctx.train[4].completion = "undefined"
    (f,) = run_rule(by_code["D120"], ctx)
    assert f.evidence["rows"] == [3]


def test_printed_output_is_no_loop() -> None:
    """A program's printed array repeats its rows, which are no sentences; the same rows in words loop."""
    by_code = {r.code: r for r in RULES}
    ctx = clean_context()
    ctx.train[5].completion = "print(arr)\n\n# Output\n" + "\n".join(["[0 0 0]"] * 12)
    assert list(run_rule(by_code["D129"], ctx)) == []
    ctx = clean_context()
    ctx.train[5].completion = "Output:\n" + "\n".join(["the row is zero zero zero"] * 12)
    (f,) = run_rule(by_code["D129"], ctx)
    assert f.evidence["rows"] == [5]


def test_an_end_of_text_marker_in_completions_is_named_whatever_the_tokenizer_calls_it() -> None:
    """OpenAI's legacy fine-tuning rows end their completions with '<|endoftext|>'; SmolLM2's tokenizer makes that
    string its unknown token (a special token all the same), which must not hide it. '<unk>' itself stays text."""
    by_code = {r.code: r for r in RULES}
    ctx = clean_context()
    ctx.train[4].completion += " <unk>"
    assert list(run_rule(by_code["D111"], ctx)) == []
    ctx.tokenizer.unk_token = "<|endoftext|>"  # SmolLM2's special tokens
    ctx.tokenizer.all_special_tokens = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    for i in (2, 3):
        ctx.train[i].completion += "<|endoftext|>"
    (f,) = run_rule(by_code["D111"], ctx)
    assert f.evidence["rows"] == [2, 3]
