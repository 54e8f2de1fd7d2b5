"""A row's token harms are each label token's ``-d loss_t / d eps`` along the query direction: checked against central
finite differences in fp64 (no forward mode) on the bundled stories260K adapter, whose head runs on the label positions
only, and on a model that soft-caps its logits after the head (a Gemma 2 built from its config, random weights), where
the label-position head would be wrong and the model's own logits are used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gradian.attribute.tokens import LabelHead, token_harm
from gradian.data.types import FormattedExample

EX = Path(__file__).resolve().parents[1] / "examples" / "stories260k"


def stories_lora():
    from gradian.attribute.loading import load

    return load(str(EX / "base"), EX / "run", device="cpu", dtype="fp64").model


def softcapped_lora():
    from peft import LoraConfig, get_peft_model
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    cfg = Gemma2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=16, final_logit_softcapping=2.0, sliding_window=8)  # fmt: skip
    model = get_peft_model(Gemma2ForCausalLM(cfg).double(), LoraConfig(r=4, target_modules=["q_proj", "down_proj"]))
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.2)
    return model.eval()


def rows(vocab: int, seed: int) -> list[FormattedExample]:
    g = np.random.default_rng(seed)
    out = []
    for i, n in enumerate((14, 9, 12)):
        ids = g.integers(3, vocab, n).tolist()
        mask = [t >= n // 2 for t in range(n)]  # the second half are labels
        out.append(FormattedExample(i, ids, mask, n, n // 2, n - n // 2))
    return out


def finite_differences(model, direction: dict[str, torch.Tensor], fx: FormattedExample, eps: float = 1e-4):
    """``-(loss_t(theta + eps X) - loss_t(theta - eps X)) / 2 eps`` for each label token t, in fp64 (the models'
    norms run in fp32: their round-off over ``2 eps`` bounds the agreement to about 1e-4 of the largest part)."""
    params = dict(model.named_parameters())
    ids = torch.tensor([fx.input_ids])

    def losses(sign: float) -> torch.Tensor:
        with torch.no_grad():
            for n, x in direction.items():
                params[n].add_(sign * eps * x)
            logits = model(input_ids=ids).logits[0, :-1]
            for n, x in direction.items():
                params[n].sub_(sign * eps * x)
        per = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
        return per[torch.tensor(fx.loss_mask[1:])]

    return (-(losses(1.0) - losses(-1.0)) / (2 * eps)).numpy()


def label_path(model, head: LabelHead, fx: FormattedExample) -> bool:
    """Whether the head's check passes on this row (the label positions' head is the model's logits)."""
    ids = torch.tensor([fx.input_ids])
    with torch.no_grad(), head:
        logits = model(input_ids=ids).logits
    return head.label_logits(logits, torch.tensor([fx.loss_mask[1:]])) is not None


@pytest.mark.parametrize(("build", "by_labels"), [(stories_lora, True), (softcapped_lora, False)])
def test_token_harm_is_the_directional_derivative_of_each_token_loss(build, by_labels):
    model = build()
    torch.manual_seed(1)
    direction = {n: torch.randn_like(p) for n, p in model.named_parameters() if "lora_" in n}
    head = LabelHead.of(model, direction)
    assert head is not None  # a frozen head in both: the check on the logits decides
    fxs = rows(int(model.config.vocab_size), seed=2)
    assert label_path(model, head, fxs[0]) is by_labels
    got = token_harm(model, direction, fxs, pad_id=0, batch_size=2)
    for fx, h in zip(fxs, got, strict=True):
        want = finite_differences(model, direction, fx)
        assert len(h) == sum(fx.loss_mask[1:])
        np.testing.assert_allclose(h, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())


def test_a_lora_on_the_head_keeps_the_full_path():
    """A head that moves along the direction (a LoRA on lm_head) is not run apart."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(EX / "base"), LoraConfig(r=2, target_modules=["lm_head"])
    )
    direction = {n: torch.ones_like(p) for n, p in model.named_parameters() if "lora_" in n}
    assert LabelHead.of(model, direction) is None


def test_a_token_that_holds_part_of_a_character_is_keyed_by_its_bytes():
    """token_text: a token that decodes to part of a character (U+FFFD, the same for every such token) is written as
    its bytes, for a byte-level BPE tokenizer (GPT-2's table) and for SentencePiece's byte pieces (stories260K's);
    whole tokens keep their decoded text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from gradian.attribute.tokens import token_text

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(["hello world"] * 10, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    byte_level = PreTrainedTokenizerFast(tokenizer_object=bpe)
    stories = AutoTokenizer.from_pretrained(str(EX / "base"))
    for tok in (byte_level, stories):
        ids = tok("抱歉")["input_ids"][-6:]  # two characters of three bytes, no piece for either
        assert {tok.decode([i]) for i in ids} == {"\ufffd"}  # decoded, every one would share one key
        keys = [token_text(tok, i) for i in ids]
        assert keys == ["<0xE6>", "<0x8A>", "<0xB1>", "<0xE6>", "<0xAD>", "<0x89>"], keys
        for word in tok("hello world")["input_ids"][-2:]:
            assert token_text(tok, word) == tok.decode([word]) and token_text(tok, word).strip().isalpha()
