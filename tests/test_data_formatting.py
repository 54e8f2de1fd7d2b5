"""Formatting with the real stories260K tokenizer: masks, EOS, truncation, drops, prefix mismatch, chat templates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gradian.data import (
    Example,
    FormatSettings,
    format_example,
    format_examples,
    has_generation_markers,
    load_examples,
    load_tokenizer,
)
from gradian.errors import GradianError

BASE = Path(__file__).resolve().parents[1] / "examples" / "stories260k" / "base"

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '</s>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CHATML_GEN = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] + '</s>' }}{% endgeneration %}"
    "{% else %}{{ m['content'] + '</s>' }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(BASE)


def chat_tokenizer(tmp_path: Path, template: str):
    d = tmp_path / "tok"
    shutil.copytree(BASE, d, ignore=shutil.ignore_patterns("*.safetensors"))
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = template
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return load_tokenizer(d)


def pc(prompt: str, completion: str, index: int = 0) -> Example:
    return Example(index=index, source="t.jsonl", format="prompt_completion", prompt=prompt, completion=completion)


def labelled_text(tok, fe) -> str:
    return tok.decode([t for t, m in zip(fe.input_ids, fe.loss_mask, strict=True) if m])


def test_completion_only_mask_and_eos(tok):
    fe = format_example(pc("Once upon a time", " there was a cat."), tok, FormatSettings())
    prompt_ids = tok("Once upon a time")["input_ids"]
    assert fe.input_ids[: len(prompt_ids)] == prompt_ids and prompt_ids[0] == tok.bos_token_id
    assert fe.loss_mask == [False] * len(prompt_ids) + [True] * (len(fe.input_ids) - len(prompt_ids))
    assert labelled_text(tok, fe) == "there was a cat.</s>"  # sentencepiece drops the leading space on decode
    assert fe.input_ids[-1] == tok.eos_token_id
    assert fe.eos_appended and fe.ends_with_eos and not fe.prefix_mismatch and not fe.truncated
    assert fe.n_prompt_tokens == len(prompt_ids) and fe.n_label_tokens == len(fe.input_ids) - len(prompt_ids)
    assert fe.labels()[: len(prompt_ids)] == [-100] * len(prompt_ids)


def test_labelled_tokens_decode_to_completion_plus_eos(tok):
    ex = pc("Q: what is 2+2?\nA:", "4, it is four")
    fe = format_example(ex, tok, FormatSettings())
    assert labelled_text(tok, fe) == "4, it is four</s>"


def test_no_eos_when_add_eos_off_or_already_there(tok):
    fe = format_example(pc("Hi", " there"), tok, FormatSettings(add_eos=False))
    assert not fe.eos_appended and not fe.ends_with_eos and tok.eos_token_id not in fe.input_ids
    assert "no EOS appended (add_eos off)" in fe.decisions
    fe = format_example(pc("Hi", " there</s>"), tok, FormatSettings())
    assert not fe.eos_appended and fe.ends_with_eos and fe.input_ids.count(tok.eos_token_id) == 1


def test_full_mask(tok):
    fe = format_example(pc("Hi", " there"), tok, FormatSettings(mask="full"))
    assert all(fe.loss_mask) and fe.n_prompt_tokens == 0


def test_text_rows_full_loss(tok):
    ex = Example(index=3, source="t", format="text", text="The sky is blue.")
    fe = format_example(ex, tok, FormatSettings())
    assert fe.index == 3 and all(fe.loss_mask) and fe.input_ids[-1] == tok.eos_token_id
    assert fe.input_ids[0] == tok.bos_token_id and fe.input_ids[1] != tok.bos_token_id


def test_truncation_cut_in_completion(tok):
    ex = pc("Once upon a time", " there was a little girl who liked to play in the park with her dog.")
    full = format_example(ex, tok, FormatSettings(max_length=None))
    fe = format_example(ex, tok, FormatSettings(max_length=10))
    assert fe.truncated and fe.cut_in_completion and not fe.ends_with_eos and not fe.dropped
    assert fe.input_ids == full.input_ids[:10] and fe.loss_mask == full.loss_mask[:10]
    assert fe.n_tokens_before_truncation == len(full.input_ids)
    assert fe.n_label_tokens == sum(full.loss_mask[:10])
    assert any("truncated from" in d for d in fe.decisions)


def test_truncation_inside_prompt_leaves_no_labels(tok):
    fe = format_example(pc("Once upon a time there was a little girl", " yes"), tok, FormatSettings(max_length=4))
    assert fe.truncated and fe.cut_in_completion and fe.n_label_tokens == 0 and fe.n_prompt_tokens == 4
    assert fe.dropped and any("fully masked" in d for d in fe.decisions)  # TRL drops such rows
    kept = format_example(pc("Once upon a time", " yes"), tok, FormatSettings(max_length=4, drop_unlabeled=False))
    assert not kept.dropped and kept.n_label_tokens == 0


def test_keep_end_truncation(tok):
    ex = pc("Once upon a time there was a little girl", " named Lily.")
    full = format_example(ex, tok, FormatSettings(max_length=None))
    fe = format_example(ex, tok, FormatSettings(max_length=6, truncation_mode="keep_end"))
    assert fe.truncated and not fe.cut_in_completion and fe.ends_with_eos
    assert fe.input_ids == full.input_ids[-6:] and fe.loss_mask == full.loss_mask[-6:]


def test_sharegpt_roles_kept_or_mapped(tmp_path):
    tok = chat_tokenizer(tmp_path, CHATML)
    f = tmp_path / "s.jsonl"
    f.write_text(json.dumps({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]}))
    ex = load_examples(f)[0]
    assert [m["role"] for m in ex.messages] == ["user", "assistant"]  # what diagnose reads
    kept = format_example(ex, tok, FormatSettings())  # TRL renames the keys only
    mapped = format_example(ex, tok, FormatSettings(sharegpt_roles="map"))  # Axolotl / LLaMA-Factory
    assert "human" in tok.decode(kept.input_ids) and "user" in tok.decode(mapped.input_ids)


def test_eos_token_override_is_restored(tok):
    fe = format_example(pc("Once", " upon"), tok, FormatSettings(eos_token="<s>"))
    assert fe.input_ids[-1] == tok.bos_token_id and tok.eos_token == "</s>"


def test_custom_text_field(tmp_path, tok):
    f = tmp_path / "c.jsonl"
    f.write_text(json.dumps({"content": "Once upon a time"}) + "\n")
    with pytest.raises(GradianError, match="content"):
        load_examples(f)  # unknown row format, unless the config names the column
    fe = format_example(load_examples(f, text_field="content")[0], tok, FormatSettings(text_field="content"))
    assert fe.input_ids == tok("Once upon a time</s>")["input_ids"] and all(fe.loss_mask)


def test_drop_long(tok):
    ex = pc("Once upon a time there was", " a girl.")
    fe = format_example(ex, tok, FormatSettings(max_length=5, drop_long=True))
    assert fe.dropped and not fe.truncated and len(fe.input_ids) == fe.n_tokens_before_truncation > 5
    ok = format_example(ex, tok, FormatSettings(max_length=100, drop_long=True))
    assert not ok.dropped


def test_prefix_mismatch_real_case(tok):
    # "Once u" ends in the token "▁u"; in "Once upon ..." the tokenizer merges it into "▁upon".
    fe = format_example(pc("Once u", "pon a time"), tok, FormatSettings())
    assert fe.prefix_mismatch
    assert any("not a prefix" in d for d in fe.decisions)
    p_ids, ids = tok("Once u")["input_ids"], fe.input_ids
    shared = next(i for i, (a, b) in enumerate(zip(p_ids, ids, strict=False)) if a != b)
    assert shared < len(p_ids)
    assert fe.n_prompt_tokens == shared  # TRL: the loss starts where the two tokenizations first differ
    assert fe.labels()[shared] == ids[shared]  # the merged token carries loss
    assert not format_example(pc("Once", " upon a time"), tok, FormatSettings()).prefix_mismatch


def test_batched_equals_single_and_keeps_order(tok):
    exs = [
        pc("Once upon a time", " there was a cat.", 0),
        Example(index=1, source="t", format="text", text="Tom ran."),
        pc("Lily", " went home.", 2),
    ]
    batch = format_examples(exs, tok, FormatSettings())
    assert [f.index for f in batch] == [0, 1, 2]
    assert batch == [format_example(e, tok, FormatSettings()) for e in exs]


def test_alpaca_and_question_answer_from_files(tok, tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text(json.dumps({"instruction": "Say hi", "input": "", "output": "hi"}) + "\n")
    (ex,) = load_examples(p)
    fe = format_example(ex, tok, FormatSettings(max_length=None))
    assert labelled_text(tok, fe) == "hi</s>"
    assert fe.decisions[0] == "Alpaca row rendered with the standard Alpaca template (no-input variant)"
    gsm = load_examples("/work/shared/data/gsm8k/train.jsonl", limit=20)
    out = format_examples(gsm, tok, FormatSettings(max_length=None))
    assert not any(f.prefix_mismatch for f in out)
    assert labelled_text(tok, out[0]) == gsm[0].completion + "</s>"


def test_messages_need_a_chat_template(tok):
    ex = Example(index=0, source="chat.jsonl", format="messages", messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(GradianError) as info:
        format_example(ex, tok, FormatSettings())
    assert str(info.value) == (
        f"chat.jsonl: tokenizer {tok.name_or_path} has no chat template, needed for chat rows. "
        "Fix: pass --tokenizer DIR of the chat model you trained (its tokenizer_config.json has chat_template)."
    )


def chat_row(**kw) -> Example:
    msgs = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello friend"}]
    return Example(index=0, source="c", format="messages", messages=msgs, **kw)


def test_messages_assistant_only_with_generation_markers(tmp_path):
    tok = chat_tokenizer(tmp_path, CHATML_GEN)
    assert has_generation_markers(tok)
    fe = format_example(chat_row(), tok, FormatSettings(assistant_only=True))
    assert labelled_text(tok, fe) == "Hello friend</s>"
    assert fe.ends_with_eos and not fe.eos_appended
    assert fe.input_ids == tok.apply_chat_template(chat_row().messages, tokenize=True, return_dict=True)["input_ids"]
    # without assistant_only the whole conversation carries loss
    assert all(format_example(chat_row(), tok, FormatSettings()).loss_mask)


def test_messages_assistant_only_without_markers_falls_back(tmp_path):
    tok = chat_tokenizer(tmp_path, CHATML)
    assert not has_generation_markers(tok)
    fe = format_example(chat_row(), tok, FormatSettings(assistant_only=True))
    assert all(fe.loss_mask)
    assert any("no {% generation %} markers" in d and "refuses" in d for d in fe.decisions)
    assert fe.ends_with_eos  # "</s>\n": the template's end-of-turn is EOS


def test_conversational_prompt_completion(tmp_path):
    tok = chat_tokenizer(tmp_path, CHATML)
    ex = chat_row(n_prompt_messages=1)
    ex.format = "prompt_completion"
    fe = format_example(ex, tok, FormatSettings())
    prompt_ids = tok.apply_chat_template(ex.messages[:1], add_generation_prompt=True, tokenize=True, return_dict=True)[
        "input_ids"
    ]
    assert fe.n_prompt_tokens == len(prompt_ids) and not fe.prefix_mismatch
    assert labelled_text(tok, fe) == "Hello friend</s>\n"


def test_many_short_rows_format_as_one_at_a_time(tok):
    """The batched path (5,000 rows at once) gives every row what formatting it alone gives (speed is measured in
    bench/bench_diagnose.py, not asserted here)."""
    exs = [pc(f"Question {i}: what is {i} plus 2?\nAnswer:", f" {i + 2}.", i) for i in range(5000)]
    out = format_examples(exs, tok, FormatSettings())
    assert len(out) == 5000
    for i in range(0, 5000, 97):
        alone = format_examples([exs[i]], tok, FormatSettings())[0]
        assert (out[i].input_ids, out[i].loss_mask) == (alone.input_ids, alone.loss_mask)
        assert out[i].n_label_tokens == alone.n_label_tokens > 0


def test_load_tokenizer_errors(tmp_path):
    with pytest.raises(GradianError) as info:
        load_tokenizer(tmp_path)
    assert str(info.value) == (
        f"{tmp_path}: folder has no tokenizer files (tokenizer.json, tokenizer_config.json or tokenizer.model). "
        "Fix: pass the base model folder, or the adapter folder if the tokenizer was saved with it."
    )
    with pytest.raises(GradianError) as info:
        load_tokenizer("no-such-org/no-such-model")
    assert str(info.value) == (
        "no-such-org/no-such-model: tokenizer not found locally (gradian does not download). "
        "Fix: pass the local folder of the base model."
    )


def test_template_that_writes_bos_gets_one_bos(tmp_path):
    tok = chat_tokenizer(tmp_path, "{{ bos_token }}" + CHATML)
    fe = format_example(chat_row(), tok, FormatSettings())
    assert fe.input_ids[0] == tok.bos_token_id and fe.input_ids[1] != tok.bos_token_id
    assert not any("two BOS" in d for d in fe.decisions)


def test_text_that_starts_with_bos_is_flagged(tok):
    fe = format_example(Example(index=0, source="t", format="text", text="<s>Hello"), tok, FormatSettings())
    assert fe.input_ids[:2] == [tok.bos_token_id] * 2
    assert any("two BOS" in d for d in fe.decisions)


def test_chat_template_file(tmp_path):
    f = tmp_path / "t.jinja"
    f.write_text(CHATML)
    tok = load_tokenizer(BASE, chat_template=f)
    fe = format_example(chat_row(), tok, FormatSettings())
    assert fe.n_label_tokens == len(fe.input_ids)


def test_llamafactory_template_not_modelled_is_said(tmp_path):
    """A LLaMA-Factory run with a template Gradian does not model: the rows take the generic path and say why."""
    tok = chat_tokenizer(tmp_path, CHATML)
    rows = [chat_row(), Example(index=1, source="t.jsonl", format="alpaca", prompt="P", completion="C")]
    for name, modelled in (("mistral", False), ("default", True)):
        fs = FormatSettings(trainer="llamafactory", template=name, max_length=64)
        for fx in format_examples(rows, tok, fs):
            said = any("LLaMA-Factory template mistral is not one Gradian models" in d for d in fx.decisions)
            assert said is not modelled


def test_llamafactory_drops_rows_out_of_turn_order(tok):
    row = Example(
        index=0,
        source="t.jsonl",
        format="messages",
        messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    )
    fx = format_example(row, tok, FormatSettings(trainer="llamafactory", template="default"))
    assert fx.dropped and fx.input_ids == [] and "alternate" in fx.decisions[-1]


def test_axolotl_instruction_rows_tokenized_apart(tok):
    """Axolotl tokenizes prompt and response apart: the response starts a new SentencePiece word and ends with the
    EOS id, where TRL tokenizes them together."""
    row = pc("Once u", "pon a time")
    trl = format_example(row, tok, FormatSettings(max_length=64))
    axo = format_example(row, tok, FormatSettings(max_length=64, trainer="axolotl"))
    prompt = tok("Once u")["input_ids"]
    response = tok("pon a time")["input_ids"][1:]  # without its BOS
    assert axo.input_ids == prompt + response + [tok.eos_token_id] != trl.input_ids
    assert axo.n_prompt_tokens == len(prompt) and axo.ends_with_eos
