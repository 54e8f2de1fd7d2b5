"""Prompt-only eval rows, base vs fine-tune generations and token harm, on the bundled real stories260K fine-tune
(examples/stories260k: LoRA on all 7 projections, 36 planted "Zorblax" rows among 402).

- prompt-only rows are read (and refused where they were before, outside eval files);
- a row's token harms sum to its score (fp64 model, with and without projection);
- `gradian attribute` with the eval completions removed: the base model's completions are kept in report.json (marked
  generated), the regressed items carry base vs fine-tune continuations, the top rows carry token harm, and the
  ranking finds the planted rows about as well as with the written completions;
- sampled completions are seeded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from gradian.data import FormatSettings, format_examples, load_examples
from gradian.errors import GradianError
from gradian.options import DEFAULTS

REPO = Path(__file__).resolve().parents[1]
EX = REPO / "examples" / "stories260k"
PLANTED = set(json.loads((EX / "data" / "planted.json").read_text())["harmful_cluster"]["indices"])
sys.path.insert(0, str(REPO / "bench"))


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prompt_only_rows_are_read_in_eval_files_only(tmp_path):
    rows = {
        "pc.jsonl": [{"prompt": "Once upon a time"}, {"prompt": "The sun", "completion": " was hot."}],
        "conv.jsonl": [{"prompt": [{"role": "user", "content": "Hi"}]}],
        "msgs.jsonl": [{"messages": [{"role": "user", "content": "Hi"}]}],
        "alpaca.jsonl": [{"instruction": "Say hi"}],
    }
    for name, rs in rows.items():
        path = write_jsonl(tmp_path / name, rs)
        ex = load_examples(path, prompt_only=True)
        assert ex[0].prompt_only, name
        assert ex[0].completion is None
        if name == "pc.jsonl":
            assert not ex[1].prompt_only and ex[1].completion == " was hot."
        if name in ("pc.jsonl", "conv.jsonl", "alpaca.jsonl"):
            with pytest.raises(GradianError, match="without|completion|output"):
                load_examples(path)  # a training file still needs its completions
    chat = load_examples(write_jsonl(tmp_path / "done.jsonl", [{"messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}]), prompt_only=True)  # fmt: skip
    assert not chat[0].prompt_only


@pytest.fixture(scope="module")
def fp64_model():
    from gradian.attribute.loading import load

    return load(str(EX / "base"), EX / "run", device="cpu", dtype="fp64")


@pytest.mark.parametrize("proj_dim", [0, 8])
def test_token_harm_sums_to_row_scores(fp64_model, proj_dim):
    """fp64: each row's label-token harms (one forward-mode pass) sum to the row's score (its stored gradient)."""
    from gradian.attribute.api import TokenPass, run_attribution
    from gradian.attribute.engine import pad_id_of
    from gradian.options import AttributeOptions

    tok = fp64_model.tokenizer
    train = load_examples(EX / "data" / "train.jsonl")
    keep = sorted(PLANTED)[:12] + [i for i in range(len(train)) if i not in PLANTED][:36]
    fs = FormatSettings(max_length=128)
    train_fx = format_examples([train[i] for i in keep], tok, fs)
    eval_fx = format_examples(load_examples(EX / "data" / "eval.jsonl"), tok, FormatSettings(128, add_eos=False))
    opts = AttributeOptions(proj_dim=proj_dim, token_harm=20)
    res = run_attribution(fp64_model.model, train_fx, eval_fx, opts, pad_id=pad_id_of(tok), tokens=TokenPass(tok))
    assert not res.no_regression
    split = [e for e in res.examples if "token_harm" in e]
    assert len(split) == 20 and [e["rank"] for e in split] == list(range(1, 21))
    for e in split:
        harms = [h for _, h in e["token_harm"] if h is not None]
        fx = next(f for f in train_fx if f.index == e["index"])
        assert len(harms) == sum(fx.loss_mask[1:])
        assert np.isclose(sum(harms), e["score"], rtol=1e-6, atol=1e-9 * abs(e["score"])), (e["index"], sum(harms))
        assert "".join(t for t, _ in e["token_harm"]) == tok.decode(fx.input_ids)  # the texts join to the row
    # the parts are not one number spread evenly
    top = split[0]["token_harm"]
    assert max(h for _, h in top if h is not None) > 3 * abs(split[0]["score"]) / len(top)


def test_token_profiles_are_the_token_harm_by_token(fp64_model):
    """The verdict's token profiles (:mod:`gradian.attribute.token_profiles`) are the top rows' token harm summed per
    token key, the same split report.json shows per token; the holders are counted over every scored row."""
    from collections import Counter

    from gradian.attribute.api import TokenPass, run_attribution
    from gradian.attribute.engine import pad_id_of
    from gradian.attribute.token_profiles import KEYS_PER_ROW, token_key
    from gradian.options import AttributeOptions

    tok = fp64_model.tokenizer
    train = load_examples(EX / "data" / "train.jsonl")
    keep = sorted(PLANTED)[:12] + [i for i in range(len(train)) if i not in PLANTED][:36]
    train_fx = format_examples([train[i] for i in keep], tok, FormatSettings(max_length=128))
    eval_fx = format_examples(load_examples(EX / "data" / "eval.jsonl"), tok, FormatSettings(128, add_eos=False))
    opts = AttributeOptions(proj_dim=0, token_harm=20, token_profiles=0.5, token_profiles_always=True)
    res = run_attribution(fp64_model.model, train_fx, eval_fx, opts, pad_id=pad_id_of(tok), tokens=TokenPass(tok))
    prof = res.token_profiles
    assert prof is not None and set(prof.rows) == {e["index"] for e in res.examples[:24]}
    for e in res.examples[:20]:
        pieces = [(token_key(t), h) for t, h in e["token_harm"] if h is not None]
        by_key: Counter[str] = Counter()
        for i, (k, h) in enumerate(pieces):
            while not k.strip() and i + 1 < len(pieces):  # a lone space counts as the word it starts
                i += 1
                k = pieces[i][0]
            if h > 0:
                by_key[k] += h
        positive, keys = prof.rows[e["index"]]
        assert np.isclose(positive, sum(by_key.values()), rtol=1e-9)
        want = dict(sorted(by_key.items(), key=lambda kv: -kv[1])[:KEYS_PER_ROW])
        assert keys.keys() == want.keys() and np.allclose([keys[k] for k in want], list(want.values()), rtol=1e-9)
    held: Counter[str] = Counter()
    for fx in train_fx:
        ids = np.asarray(fx.input_ids)[1:][np.asarray(fx.loss_mask, dtype=bool)[1:]]
        keys = [token_key(tok.decode([int(i)]) or " ") for i in ids.tolist()]
        held.update({next((k for k in keys[j:] if k.strip()), k) for j, k in enumerate(keys)})
    assert prof.holders == {k: held[k] for k in prof.holders}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The pipeline with the written eval completions, then with only the prompts (one shared gradient store)."""
    from gradian.pipeline import attribute_and_report

    work = tmp_path_factory.mktemp("prompts")
    rows = [json.loads(x) for x in (EX / "data" / "eval.jsonl").read_text().splitlines() if x.strip()]
    prompts = write_jsonl(work / "eval_prompts.jsonl", [{"prompt": r["prompt"]} for r in rows])
    out = {}
    # "written": the defaults (token profiles when the verdict names a content group); "always": every row of the
    # profiled share; "prompts": none
    for name, ev, options in (("written", EX / "data" / "eval.jsonl", {}),
                              ("always", EX / "data" / "eval.jsonl", {"token_profiles_always": True}),
                              ("prompts", prompts, {"token_profiles": 0})):  # fmt: skip
        if name == "prompts":  # a profile file an earlier run left in the dir: this run's report must not read it
            (work / name).mkdir()
            (work / name / "token_profiles.json").write_text((work / "written" / "token_profiles.json").read_text())
        attribute_and_report(
            EX / "run", base=str(EX / "base"), train=EX / "data" / "train.jsonl", eval=ev, out=work / name,
            progress=False, **options,
        )  # fmt: skip
        out[name] = json.loads((work / name / "report.json").read_text())
        out[name + "_md"] = (work / name / "report.md").read_text()
        out[name + "_html"] = (work / name / "report.html").read_text()
        out[name + "_dir"] = work / name
    return out


def test_token_profiles_are_saved_and_read_back(runs):
    """By default (`--token-profiles 0.3`), a run whose verdict names a content group writes token_profiles.json for
    the top 30% of the rows; the verdict reads it (the Zorblax group's harm sits on the name's first piece, which
    only its rows hold, so nobody joins by it) and a re-render from the saved files gives the same verdict. With
    `--token-profiles 0`, the verdict suggests the option."""
    from gradian.attribute.token_profiles import TokenProfiles
    from gradian.report.cli import rerender
    from gradian.verdict.words import TOKEN_PROFILES_HINT

    rep, d = runs["written"], runs["written_dir"]
    prof = TokenProfiles.from_dict(json.loads((d / "token_profiles.json").read_text()))
    assert len(prof.rows) == rep["settings"]["token_profile_rows"] <= -(-3 * len(rep["examples"]) // 10)
    (group,) = rep["verdict"]["groups"]
    assert group["tokens"] and group["token_hold"] >= 0.5 and group["by_tokens"] == 0
    named = set(rep["verdict"]["drop_rows"])  # 35 of the 36 (session 22: an info note no longer brings in row 246)
    assert named <= PLANTED and len(named) >= 0.9 * len(PLANTED)
    # the rows that stood out beside the Zorblax rows with none of their harm on 'z' are clean rows, not named
    assert group["off_tokens"] and not set(group["off_tokens"]) & (PLANTED | set(rep["verdict"]["drop_rows"]))
    assert TOKEN_PROFILES_HINT not in rep["verdict"]["next_steps"]
    assert TOKEN_PROFILES_HINT in runs["prompts"]["verdict"]["next_steps"]
    assert not (runs["prompts_dir"] / "token_profiles.json").exists()  # the stale one was removed
    before = rep["verdict"]
    rerender(d)
    after = json.loads((d / "report.json").read_text())["verdict"]
    assert after["groups"] == before["groups"] and after["text"] == before["text"]


def test_token_profiles_are_taken_for_the_rows_that_can_move_a_group(runs):
    """By default the profiles cover the rows of the top 30% that can move the verdict's groups (the groups' rows,
    then the rows that hold their harm tokens), fewer than the share, and give the verdict that profiling every
    row of the share gives; a row left out holds none of the group's harm tokens."""
    from gradian.attribute.token_profiles import TokenProfiles

    lazy, full = runs["written"]["verdict"], runs["always"]["verdict"]
    assert lazy["groups"] == full["groups"] and lazy["text"] == full["text"] and lazy["drop_rows"] == full["drop_rows"]
    some, every = (TokenProfiles.from_dict(json.loads((runs[n + "_dir"] / "token_profiles.json").read_text()))
                   for n in ("written", "always"))  # fmt: skip
    (group,) = lazy["groups"]
    assert every.keys is None and some.keys == sorted(group["tokens"])
    assert set(some.rows) < set(every.rows) and len(every.rows) == -(-3 * len(runs["always"]["examples"]) // 10)
    for r, (positive, keys) in some.rows.items():
        assert positive == pytest.approx(every.rows[r][0], rel=1e-6) and keys.keys() == every.rows[r][1].keys()
    train = [json.loads(x) for x in (EX / "data" / "train.jsonl").read_text().splitlines() if x.strip()]
    lower = [json.dumps(train[r]).lower() for r in set(every.rows) - set(some.rows)]
    assert lower and not any(k in text for k in some.keys for text in lower if len(k) > 1)
    assert all(every.share_on(r, some.keys) == 0 for r in set(every.rows) - set(some.rows))


def auc(report: dict) -> float:
    return roc_auc_score([e["index"] in PLANTED for e in report["examples"]], [e["score"] for e in report["examples"]])


def test_prompt_only_completions_are_kept_and_marked(runs):
    rep = runs["prompts"]
    assert all(e.get("generated") == "greedy" and e.get("completion") for e in rep["eval"])
    assert not any("generated" in e for e in runs["written"]["eval"])
    gen = rep["settings"]["eval_generation"]
    assert gen["rows"] == 20 and set(gen["completions"]) == {str(i) for i in range(20)}
    assert all(r["text"].endswith(r["completion"]) for r in rep["regressed"])
    assert "generated completion" in runs["prompts_html"] and "had only a prompt" in runs["prompts_md"]


def test_prompt_only_finds_the_planted_rows_about_as_well(runs):
    a_written, a_prompts = auc(runs["written"]), auc(runs["prompts"])
    print(f"\nplanted ROC-AUC: written completions {a_written:.4f}, prompts only {a_prompts:.4f}")
    assert a_written >= 0.9
    assert a_prompts >= a_written - 0.05
    targets = set(json.loads((EX / "data" / "planted.json").read_text())["eval"]["target"])
    reg = {r["index"] for r in runs["prompts"]["regressed"]}
    assert len(reg & targets) >= len(targets) // 2 and len(reg & targets) > len(reg - targets)


def test_regressed_items_show_base_and_finetuned_continuations(runs):
    for name in ("written", "prompts"):
        rep = runs[name]
        shown = [r for r in rep["regressed"] if "generations" in r]
        assert len(shown) == min(len(rep["regressed"]), 20)
        assert all(set(r["generations"]) == {"base", "finetuned"} for r in shown)
        # the planted edit shows in what the fine-tune writes, not in what the base model writes
        assert sum("Zorblax" in r["generations"]["finetuned"] for r in shown) > len(shown) // 2
        assert not any("Zorblax" in r["generations"]["base"] for r in shown)
        assert 'id="generations-table"' in runs[name + "_html"] and "## Base vs fine-tune" in runs[name + "_md"]


def test_token_harm_of_top_rows_lands_on_the_planted_edit(runs):
    from bench_prompts import top3_hits

    rep = runs["prompts"]
    k = DEFAULTS.token_harm
    assert rep["settings"]["token_harm_rows"] == k
    assert all(("token_harm" in e) == (e["rank"] <= k) for e in rep["examples"])
    for e in rep["examples"][:k]:
        assert np.isclose(sum(h for _, h in e["token_harm"] if h is not None), e["score"], rtol=1e-3)
    hits, n, _ = top3_hits(rep, PLANTED)
    print(f"\nplanted rows in the top {k} whose three highest-harm tokens hit the planted edit: {hits}/{n}")
    assert n >= 18 and hits >= 0.8 * n  # the bar: at least 80% of the planted rows in the top K
    assert 'class="tok"' in runs["prompts_html"] and "Most harmful tokens" in runs["prompts_md"]


def test_sampled_completions_are_seeded(fp64_model):
    from gradian.attribute.generate import complete_prompts, with_completions

    ex = load_examples(write_jsonl(Path(__import__("tempfile").mkdtemp()) / "p.jsonl", [
        {"prompt": "Once upon a time, there was a little girl named", "id": "a"},
        {"prompt": "The sun was", "completion": " hot."}]), prompt_only=True)  # fmt: skip
    kw = {"samples": 3, "max_new_tokens": 12, "cut": False}
    a, opened = complete_prompts(fp64_model.model, fp64_model.tokenizer, ex, seed=1, **kw)
    assert (a, opened) == complete_prompts(fp64_model.model, fp64_model.tokenizer, ex, seed=1, **kw)
    assert a != complete_prompts(fp64_model.model, fp64_model.tokenizer, ex, seed=2, **kw)[0]
    assert len(a[0]) == 3 and len(set(a[0])) > 1 and len(opened[0]) == 3
    items, extra = with_completions(ex, a, "sampled (seed 1)", opened)
    assert [i.index for i in items] == [0, 1, 2, 3] and [i.id for i in items[:3]] == ["a#0", "a#1", "a#2"]
    assert [x.get("sample") for x in extra] == [0, 1, 2, None] and [x["row"] for x in extra] == [0, 0, 0, 1]


def test_chat_prompt_gets_an_assistant_turn(fp64_model, tmp_path):
    """A conversation ending in a user turn: the base model's reply becomes the assistant turn, scored as the
    completion of a conversational prompt/completion row."""
    from gradian.attribute.generate import complete_prompts, with_completions

    tok = fp64_model.tokenizer
    old = tok.chat_template
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    try:
        path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "Tell a story."}]}])
        ex = load_examples(path, prompt_only=True)
        comp, opened = complete_prompts(fp64_model.model, tok, ex, max_new_tokens=8, cut=False)
        text = comp[0][0]
        assert text.strip()
        items, extra = with_completions(ex, comp, "greedy", opened)
        assert items[0].messages[-1] == {"role": "assistant", "content": text} and items[0].n_prompt_messages == 1
        assert extra == [{"completion": text, "generated": "greedy", "open": opened[0][0]}]
        fx = format_examples(items, tok, FormatSettings(max_length=128, add_eos=False))[0]
        labels = [t for t, m in zip(fx.input_ids, fx.loss_mask, strict=True) if m]
        assert text.strip()[:4] in tok.decode(labels)
        assert "Tell a story." not in tok.decode(labels)
    finally:
        tok.chat_template = old


def test_verify_rescores_the_saved_completions(runs):
    """gradian verify measures the items the report scored: the generated completions saved in settings."""
    from gradian.data import load_tokenizer
    from gradian.verify import _eval_rows

    rep = runs["prompts"]
    tok = load_tokenizer(EX / "run")
    fx, _ = _eval_rows(rep, tok)
    assert [f.index for f in fx] == [e["index"] for e in rep["eval"]]
    for f, e in zip(fx, rep["eval"], strict=True):
        labels = [t for t, m in zip(f.input_ids, f.loss_mask, strict=True) if m]
        assert tok.decode(labels).strip() == e["completion"].strip()


def test_generated_completions_end_on_whole_characters():
    """A cut inside a character split over byte tokens (stories260K's 512-token vocabulary spells "ï" and emoji in
    bytes) is moved to the character's end; a byte that forms no character (the derived base of the planted-fault
    suite writes a lone <0xC6> at the start of some story endings) leaves nothing, not U+FFFD: read back, U+FFFD is
    other, unlikely tokens (an NLL of ~21 nats under the base model that "wrote" it)."""
    from gradian.attribute.generate import continuation_text, whole_chars
    from gradian.data import load_tokenizer

    tok = load_tokenizer(EX / "base")
    prompt = tok("Once upon a time", add_special_tokens=False).input_ids
    naive = tok(" naïve girl", add_special_tokens=False).input_ids  # ▁n a <0xC3> <0xAF> ve ▁girl
    assert tok.convert_ids_to_tokens(naive[2:4]) == ["<0xC3>", "<0xAF>"]
    assert whole_chars(tok, prompt, naive, 3) == 4 and continuation_text(tok, prompt, naive[:4]) == " naï"
    assert whole_chars(tok, prompt, naive, 2) == 2  # already whole
    emoji = tok(" 😀 ok", add_special_tokens=False).input_ids  # ▁ and four byte tokens
    assert whole_chars(tok, prompt, emoji, 2) == 5
    assert whole_chars(tok, prompt, emoji[:3], 2) == 1  # the generation ends mid-character: back to before it
    lone = [tok.convert_tokens_to_ids("<0xC6>"), *tok(" it was", add_special_tokens=False).input_ids]
    assert "\ufffd" in continuation_text(tok, prompt, lone[:1])
    assert whole_chars(tok, prompt, lone, 1) == 0 and whole_chars(tok, prompt, lone, len(lone)) == 0
    assert whole_chars(tok, prompt, [], 0) == 0


def test_cut_also_stops_where_the_finetune_lowers_the_base_token(fp64_model):
    """The cut's departure: the argmax moves, or the fine-tune's NLL of the base model's token rises by more than
    min_rise (a regression that keeps the argmax: a name still written, less surely)."""
    from gradian.attribute.generate import departures, generate

    tok, model = fp64_model.tokenizer, fp64_model.model
    prompts = [tok(p, add_special_tokens=False).input_ids for p in (
        "Once upon a time, there was a little girl named", "One day, a boy went to the", "The sun was")]  # fmt: skip
    pairs = [(p, g[0]) for p, g in zip(prompts, generate(model, tok, prompts, adapter=False, max_new_tokens=16),
                                       strict=True)]  # fmt: skip
    argmax_only = departures(model, tok, pairs, min_rise=float("inf"))
    default = departures(model, tok, pairs)
    assert all(0 <= d <= a < len(c) for d, a, (_, c) in zip(default, argmax_only, pairs, strict=True))
    assert departures(model, tok, pairs, min_rise=-1.0) == [0, 0, 0]  # every token "rises" by more than -1 nat


def test_the_cut_rise_option_reaches_the_cut(fp64_model):
    """--eval-cut-rise (AttributeOptions.eval_cut_rise) is the departure's NLL rise: every token rises by more than
    -1 nat (cut after the first token), none by more than infinity (cut where the argmax moves)."""
    from gradian.attribute.generate import complete_prompts

    ex = load_examples(write_jsonl(Path(__import__("tempfile").mkdtemp()) / "p.jsonl", [
        {"prompt": "Once upon a time, there was a little girl named"}, {"prompt": "One day, a boy went to the"}]),
        prompt_only=True)  # fmt: skip
    tok = fp64_model.tokenizer
    every = complete_prompts(fp64_model.model, tok, ex, max_new_tokens=16, cut_rise=-1.0, min_tokens=1)[0]
    argmax = complete_prompts(fp64_model.model, tok, ex, max_new_tokens=16, cut_rise=float("inf"), min_tokens=1)[0]
    assert set(every) == set(argmax) == {0, 1}
    n_tokens = {i: len(tok(every[i][0], add_special_tokens=False).input_ids) for i in every}
    assert all(argmax[i][0].startswith(every[i][0]) for i in every)
    assert max(n_tokens.values()) <= 2 and any(len(argmax[i][0]) > len(every[i][0]) for i in every)


def test_what_generation_scored_is_read_again_and_equals_a_fresh_forward():
    """fp32 (the memo's precision: generation scores in fp32, so an fp64 attribution scores afresh), with a memo
    (:mod:`gradian.attribute.continuations`): the base model's greedy completions and their cut, the fine-tune's
    replies and the side-by-side generations are the ones made afresh, and the eval NLL of every generated item,
    under both models, is read from the memo without a forward and equals a fresh forward's to fp32 round-off."""
    from gradian.attribute import engine
    from gradian.attribute.continuations import Continuations
    from gradian.attribute.engine import pad_id_of
    from gradian.attribute.generate import (
        complete_prompts,
        finetuned_replies,
        prompt_ids,
        side_by_side,
        with_completions,
    )
    from gradian.attribute.loading import load

    fp32 = load(str(EX / "base"), EX / "run", device="cpu", dtype="fp32")
    tok, model = fp32.tokenizer, fp32.model
    own = model.get_base_model().generation_config  # a hub config that would bend greedy: set aside while generating
    own.repetition_penalty, own.no_repeat_ngram_size = 3.0, 2
    prompts = ["Once upon a time, there was a little girl named", "One day, a boy went to the", "The sun was",
               "Lily and Tom went to the park. They saw a"]  # fmt: skip
    ex = load_examples(write_jsonl(Path(__import__("tempfile").mkdtemp()) / "p.jsonl",
                                   [{"prompt": p} for p in prompts]), prompt_only=True)  # fmt: skip
    memo = Continuations()
    fresh = complete_prompts(model, tok, ex, max_new_tokens=16)
    assert complete_prompts(model, tok, ex, max_new_tokens=16, memo=memo) == fresh
    for p, c in ((p, memo.get(False, p)) for p in (prompt_ids(e, tok) for e in ex)):
        assert c is not None and c.greedy == 16  # each token the base model's argmax, as generated
        with model.disable_adapter():
            logits = model(input_ids=__import__("torch").tensor([p + c.tokens])).logits[0, len(p) - 1 : -1]
        assert logits.argmax(-1).tolist() == c.tokens
    items, _ = with_completions(ex, fresh[0], "greedy", fresh[1])
    pad = pad_id_of(tok)
    forwards: list[int] = []
    handle = model.get_base_model().register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        for eos in (False, True):  # an unfinished item is scored without an EOS either way
            fxs = format_examples(items, tok, FormatSettings(128, add_eos=eos))
            for adapter in (False, True):
                forwards.clear()
                held = engine.completion_nll(model, fxs, pad, adapter=adapter, memo=memo)
                assert not forwards
                fresh_nll = engine.completion_nll(model, fxs, pad, adapter=adapter)
                assert np.allclose(held, fresh_nll, rtol=1e-5, atol=1e-7) and (held > 0).all()
    finally:
        handle.remove()
    kw = {"max_new_tokens": 16}
    replies = finetuned_replies(model, tok, items, fxs, [True] * len(items), **kw)
    assert finetuned_replies(model, tok, items, fxs, [True] * len(items), memo=memo, **kw) == replies
    assert side_by_side(model, tok, fxs, memo=memo, **kw) == side_by_side(model, tok, fxs, **kw)


def test_greedy_generation_runs_wide_batches_and_narrows_them_on_out_of_memory(fp64_model):
    """Greedy generation takes GREEDY_BATCH_FACTOR x batch_size prompts at a time. A device that cannot hold more than
    two rows (the model's forward raises ``torch.OutOfMemoryError`` on a wider batch) halves the batch until it fits
    and gives the same continuations as one prompt at a time."""
    import torch

    from gradian.attribute.generate import GREEDY_BATCH_FACTOR, generate

    tok, model = fp64_model.tokenizer, fp64_model.model
    texts = ["Once upon a time, there was", "One day, a boy went to the", "The sun was", "Lily and Tom", "The cat sat"]
    prompts = [tok(t, add_special_tokens=False).input_ids for t in texts]
    alone = [generate(model, tok, [p], adapter=True, max_new_tokens=12, batch_size=1)[0] for p in prompts]
    widths: list[int] = []

    def narrow_device(mod, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        widths.append(int(ids.shape[0]))
        if ids.shape[0] > 2:
            raise torch.OutOfMemoryError("injected: at most 2 rows fit")

    handle = model.get_base_model().register_forward_pre_hook(narrow_device, with_kwargs=True)
    try:
        got = generate(model, tok, prompts, adapter=True, max_new_tokens=12, batch_size=1)
    finally:
        handle.remove()
    assert GREEDY_BATCH_FACTOR >= 4 and widths[0] == GREEDY_BATCH_FACTOR  # tried 4 prompts at once first
    assert max(widths[1:]) == 2 and sorted(set(widths[1:])) == [1, 2]  # then 2, 2 and the last one alone
    assert got == alone


def test_forward_mode_through_a_frozen_linear_is_one_product():
    """FrozenLinearTangents: a frozen layer's tangent is x_t W^T, computed with one product for it (PyTorch's own rule
    also multiplies x by a zero tangent of W); a layer whose weight is dual runs PyTorch's rule."""
    import torch
    import torch.autograd.forward_ad as fwad
    from torch.profiler import ProfilerActivity, profile

    from gradian.attribute.forward_mode import FrozenLinearTangents

    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8, dtype=torch.float64)
    x, x_t, w_t = (torch.randn(5, 16, dtype=torch.float64), torch.randn(5, 16, dtype=torch.float64),
                   torch.randn(8, 16, dtype=torch.float64))  # fmt: skip

    def run(mode: bool, dual_weight: bool = False):
        with torch.no_grad(), fwad.dual_level(), profile(activities=[ProfilerActivity.CPU]) as prof:
            ctx = FrozenLinearTangents() if mode else __import__("contextlib").nullcontext()
            with ctx:
                w = fwad.make_dual(lin.weight, w_t) if dual_weight else lin.weight
                out = fwad.unpack_dual(torch.nn.functional.linear(fwad.make_dual(x, x_t), w, lin.bias))
        products = sum(e.name in ("aten::mm", "aten::addmm") for e in prof.events())
        return out.primal, out.tangent, products

    ref_p, ref_t, ref_n = run(False)
    p, t, n = run(True)
    assert torch.equal(p, ref_p) and torch.allclose(t, x_t @ lin.weight.T, rtol=1e-12, atol=0)
    assert torch.allclose(t, ref_t, rtol=1e-12, atol=0) and n == ref_n - 1 == 2
    p, t, n = run(True, dual_weight=True)  # the LoRA weights' case: both terms
    assert torch.allclose(t, x_t @ lin.weight.T + x @ w_t.T, rtol=1e-12, atol=0) and n == run(False, True)[2]


@pytest.mark.parametrize(
    "op",
    ["d * w", "w * d", "d * 2.5", "3 * d", "d + w", "w + d", "d - w", "w - d", "1 - d", "d / w", "d / 4",
     "torch.mul(d, w)", "torch.add(w, d)", "torch.sub(d, w)", "torch.div(d, w)", "d * w32", "d[:, :1] + m",
     "torch.add(w, d, alpha=2)", "w / d", "d * d"],
)  # fmt: skip
def test_forward_mode_with_a_constant_operand_skips_the_zero_tangent(op):
    """FrozenLinearTangents: a dual tensor times, plus, minus or over a constant (a tensor without tangent, or a number)
    has PyTorch's primal and tangent, computed without the zero tangent PyTorch makes for the constant; the calls it
    leaves to PyTorch (keyword arguments, a dual divisor, two duals) give the same."""
    import contextlib

    import torch
    import torch.autograd.forward_ad as fwad
    from torch.profiler import ProfilerActivity, profile

    from gradian.attribute.forward_mode import FrozenLinearTangents

    torch.manual_seed(0)
    x, x_t = torch.randn(3, 4, 5, dtype=torch.float64), torch.randn(3, 4, 5, dtype=torch.float64)
    env = {"torch": torch, "w": torch.randn(5, dtype=torch.float64) + 3, "w32": torch.randn(5),
           "m": torch.randn(3, 4, 5, dtype=torch.float64)}  # fmt: skip

    def run(mode: bool):
        with torch.no_grad(), fwad.dual_level(), profile(activities=[ProfilerActivity.CPU]) as prof:
            with FrozenLinearTangents() if mode else contextlib.nullcontext():
                out = fwad.unpack_dual(eval(op, {**env, "d": fwad.make_dual(x, x_t)}))
        zeros = any(e.name == "aten::_efficientzerotensor" for e in prof.events())
        return out.primal, out.tangent, zeros

    ref_p, ref_t, ref_zeros = run(False)
    p, t, zeros = run(True)
    assert torch.equal(p, ref_p) and p.dtype == ref_p.dtype
    assert t.shape == p.shape and torch.allclose(t, ref_t, rtol=1e-14, atol=0)
    left_to_pytorch = op in ("torch.add(w, d, alpha=2)", "w / d", "d * d")
    assert zeros == (left_to_pytorch and ref_zeros) and (ref_zeros or op in ("1 - d", "d * d"))


def test_token_harm_equals_the_functorch_jvp(fp64_model):
    """token_harm (forward_ad with the frozen-linear mode) gives, token by token, what ``torch.func.jvp`` over the
    model gives with PyTorch's own rules."""
    import torch
    from torch.func import functional_call, jvp
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from gradian.attribute.engine import collate
    from gradian.attribute.tokens import token_harm

    tok, model = fp64_model.tokenizer, fp64_model.model
    fxs = format_examples(load_examples(EX / "data" / "train.jsonl")[:5], tok, FormatSettings(max_length=64))
    gen = torch.Generator().manual_seed(0)
    direction = {n: torch.randn(p.shape, generator=gen, dtype=p.dtype) * 1e-2
                 for n, p in model.named_parameters() if "lora_" in n}  # fmt: skip
    got = token_harm(model, direction, fxs, 0, batch_size=2)
    params = {n: p.detach() for n, p in model.named_parameters() if n in direction}
    for fx, g in zip(fxs, got, strict=True):
        ids, am, lm = collate([fx], 0, "cpu")

        def losses(p, ids=ids, am=am):
            lg = functional_call(model, p, args=(), kwargs={"input_ids": ids, "attention_mask": am}).logits[:, :-1]
            return torch.nn.functional.cross_entropy(lg.transpose(1, 2), ids[:, 1:], reduction="none")

        with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
            d = -jvp(losses, (params,), ({n: direction[n] for n in params},))[1][0][lm[0, 1:]]
        assert len(g) == len(d) > 0 and np.allclose(g, d.numpy(), rtol=1e-9, atol=1e-12 * float(abs(d).max()))


def test_an_unfinished_generated_reply_is_scored_without_an_end_of_turn(smollm2_tokenizer_dir, tmp_path):
    """SmolLM2-135M-Instruct's ChatML template writes <|im_end|> after every assistant turn. A generated reply the
    base model had not finished (open) must not be scored with one; a finished one keeps it, as it was written."""
    from transformers import AutoTokenizer

    from gradian.attribute.generate import with_completions

    tok = AutoTokenizer.from_pretrained(str(smollm2_tokenizer_dir))
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": [{"role": "user", "content": "How do I boil an egg?"}]}] * 2)
    ex = load_examples(path, prompt_only=True)
    comp = {0: ["Put the egg in boiling"], 1: ["Boil it for nine minutes."]}
    items, extra = with_completions(ex, comp, "greedy", {0: [True], 1: [False]})
    assert [x["open"] for x in extra] == [True, False] and [i.open_end for i in items] == [True, False]
    open_fx, done_fx = format_examples(items, tok, FormatSettings(max_length=256, add_eos=False))
    end = tok.convert_tokens_to_ids("<|im_end|>")
    open_labels = [t for t, m in zip(open_fx.input_ids, open_fx.loss_mask, strict=True) if m]
    done_labels = [t for t, m in zip(done_fx.input_ids, done_fx.loss_mask, strict=True) if m]
    assert end not in open_labels and tok.decode(open_labels).strip() == "Put the egg in boiling"
    assert end in done_labels and not open_fx.ends_with_eos
    assert open_fx.input_ids == done_fx.input_ids[: len(open_fx.input_ids)] or open_fx.input_ids[-1] != end


def test_preference_scores_the_pair_and_its_gradient_is_the_difference(fp64_model):
    """fp64, on the bundled fine-tune's greedy replies to prompts: an item scored by preference has delta
    ``[nll_ft(b) - nll_base(b)] - [nll_ft(r) - nll_base(r)]`` (b the base model's completion, r the fine-tune's
    reply), an item whose replies agree scores 0 and never regresses, and the query gradient of a regressed pair is
    ``grad nll(b) - grad nll(r)``."""
    from gradian.attribute import engine
    from gradian.attribute.engine import pad_id_of
    from gradian.attribute.generate import complete_prompts, finetuned_replies, with_completions
    from gradian.attribute.regression import call_regressions
    from gradian.attribute.stages import Regressions, _preference, _query_gradients, prepare
    from gradian.dist import SINGLE
    from gradian.options import AttributeOptions

    tok, model = fp64_model.tokenizer, fp64_model.model
    prompts = ["Once upon a time, there was a little girl named", "One day, a boy went to the", "The sun was",
               "Lily and Tom went to the park. They saw a"]  # fmt: skip
    ex = load_examples(write_jsonl(Path(__import__("tempfile").mkdtemp()) / "p.jsonl",
                                   [{"prompt": p} for p in prompts]), prompt_only=True)  # fmt: skip
    comp, opened = complete_prompts(model, tok, ex, max_new_tokens=16)
    items, _ = with_completions(ex, comp, "greedy", opened)
    fs = FormatSettings(128, add_eos=False)
    fxs = format_examples(items, tok, fs)
    got = finetuned_replies(model, tok, items, fxs, [True] * len(items), max_new_tokens=16)
    got[0] = None  # an item whose replies agree
    assert sum(r is not None for r in got) >= 2
    replies = [format_examples([r], tok, fs)[0] if r is not None else None for r in got]
    pad = pad_id_of(tok)
    opts = AttributeOptions(proj_dim=0, noise_multiple=0)
    train_fx = format_examples(load_examples(EX / "data" / "train.jsonl")[:8], tok, FormatSettings(max_length=128))
    ctx = prepare(model, train_fx, fxs, pad, opts, store_dir=None, dist=SINGLE, progress=False)
    nb = engine.completion_nll(model, fxs, pad, adapter=False)
    nf = engine.completion_nll(model, fxs, pad, adapter=True)
    empty = Regressions([{} for _ in fxs], call_regressions(nb, nf), [], np.ones(0), {}, 0.0)
    reg = _preference(ctx, empty, replies, nb, nf)
    assert reg is not None and reg.nll_call is not None
    for i, r in enumerate(replies):
        if r is None:
            assert reg.call.delta[i] == 0 and not reg.call.regressed[i] and reg.eval_items[i]["score"] == "preference"
            continue
        rb = engine.completion_nll(model, [r], pad, adapter=False)[0]
        rf = engine.completion_nll(model, [r], pad, adapter=True)[0]
        assert np.isclose(reg.call.delta[i], (nf[i] - nb[i]) - (rf - rb), rtol=1e-9, atol=1e-12)
        assert reg.eval_items[i]["reply_finetuned_nll"] == pytest.approx(rf)
    if not reg.query:
        pytest.skip("no pair regressed on these prompts")
    q = _query_gradients(ctx, reg, "")
    B, _ = engine.gradient_pass(model, ctx.blocks, [fxs[i] for i in reg.query], pad, mean_per_token=True)
    R, _ = engine.gradient_pass(model, ctx.blocks, reg.partners, pad, mean_per_token=True)
    assert B is not None and R is not None
    for k, v in q.items():
        assert np.allclose(v[:-1].numpy(), (B[k] - R[k]).double().numpy(), rtol=1e-9, atol=1e-12)
