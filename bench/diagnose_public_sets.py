"""`gradian diagnose` on public instruction sets nobody planted anything in, read as a user would (``--train FILE
--tokenizer`` SmolLM2's, no config): the demo datasets LLaMA-Factory ships (data/ of github.com/hiyouga/LLaMA-Factory:
1,000 Alpaca rows in English and in Chinese, its identity set, 300 Glaive function-calling conversations in English
and in Chinese, 300 KTO conversations and 300 DPO pairs), Code Alpaca (data/ of github.com/sahil280114/codealpaca:
2,017 and 4,535 code instructions, answers mostly unfenced code), GPTeacher (github.com/teknium1/GPTeacher: 1,923
role-play and 2,396 tool-use instructions, Alpaca rows whose output is named ``response``), and, where given, two
human-written task mixes: Self-Instruct's 175 seed tasks (seed_tasks.jsonl of github.com/tatsu-lab/stanford_alpaca)
and its 252 user-oriented instructions (github.com/Instruction-Tuning-with-GPT-4/GPT-4-LLM), as Alpaca rows, one per
instance, FastChat's ShareGPT-format dummy conversations (github.com/lm-sys/FastChat), and T0's training prompts as
Self-Instruct's repository keeps them (github.com/yizhongw/self-instruct: four files of 200 rows, and a mix of 8
rows from each of its 283 templates; completions end on OpenAI's legacy '<|endoftext|>'), and chat models' own
replies: AlpacaEval's model outputs (github.com/tatsu-lab/alpaca_eval, results/<model>/model_outputs.json: 805
instructions each, answered by GPT-4, GPT-3.5, Claude 2, Llama-2-7b-chat, Qwen1.5-1.8B-Chat, ChatGLM2-6B,
Falcon-7B-instruct and text-davinci-003, and twelve more models held out from the rules' changes; the file a user
distils from a model, as it is).
Each finding is listed with its rows, so that a person can read them and say which are true;
bench/results/diagnose_public_sets.md holds the table and that reading.

    # the data: the `fetch` tool's mirrors of the repositories, or any checkouts of them
    python bench/diagnose_public_sets.py --lf /path/to/LLaMA-Factory --codealpaca /path/to/codealpaca \
        --gpteacher /path/to/GPTeacher [--selfinstruct /path/to/stanford_alpaca --gpt4llm /path/to/GPT-4-LLM \
        --fastchat /path/to/FastChat --t0 /path/to/self-instruct.git --alpacaeval /path/to/alpaca_eval]

The files are not shipped (Alpaca's and Code Alpaca's data are CC BY-NC 4.0); the script reads them from the
checkouts (a bare git mirror works: it runs ``git show HEAD:PATH``)."""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
T0 = "data/finetuning/t0_train_50k/data_per_template"  # Self-Instruct's copy of T0's training prompts (P3)
SOURCES = {
    "lf": ["data/alpaca_en_demo.json", "data/alpaca_zh_demo.json", "data/identity.json",
           "data/glaive_toolcall_en_demo.json", "data/glaive_toolcall_zh_demo.json", "data/kto_en_demo.json",
           "data/dpo_en_demo.json"],
    "codealpaca": ["data/code_alpaca_2k.json", "data/new_codealpaca.json"],
    "gpteacher": ["Roleplay/roleplay-simple-deduped-roleplay-instruct.json",
                  "Toolformer/toolformer-similarity-0.6-dataset.json"],
    "selfinstruct": ["seed_tasks.jsonl"],
    "gpt4llm": ["plots/data/user_oriented_instructions.jsonl"],
    "fastchat": ["data/dummy_conversation.json"],
    "t0": [f"{T0}/{name}.jsonl" for name in ("ag_news_classify", "amazon_polarity_Is_this_review",
                                              "app_reviews_convert_to_star_rating",
                                              "cnn_dailymail_3_0_0_tldr_summary")],
    "alpacaeval": [f"results/{m}/model_outputs.json" for m in (
        "gpt4_1106_preview", "gpt-3.5-turbo-0613", "claude-2", "llama-2-7b-chat-hf", "Qwen1.5-1.8B-Chat", "chatglm2-6b",
        "falcon-7b-instruct", "text_davinci_003",  # the eight read while the rules were changed; then held out:
        "claude-3-opus-20240229", "gpt-3.5-turbo-1106", "Mistral-7B-Instruct-v0.2", "Yi-34B-Chat", "Qwen1.5-7B-Chat",
        "alpaca-7b", "guanaco-13b", "dolphin-2.2.1-mistral-7b", "baichuan-13b-chat", "OpenHermes-2.5-Mistral-7B",
        "llama-2-70b-chat-hf", "falcon-40b-instruct")],
}  # fmt: skip


def t0_mix(repo: Path, per_template: int = 8, seed: int = 0) -> bytes:
    """A FLAN-style task mix: ``per_template`` rows (seeded) of each of T0's prompt templates in the checkout."""
    listing = subprocess.run(["git", "--git-dir", str(repo), "ls-tree", "-r", "--name-only", "HEAD", T0],
                             check=True, capture_output=True, text=True).stdout.split()  # fmt: skip
    rng, rows = random.Random(seed), []
    for rel in listing:
        lines = [x for x in read_file(repo, rel).decode().splitlines() if x.strip()]
        rows += rng.sample(lines, min(per_template, len(lines)))
    rng.shuffle(rows)
    return ("\n".join(rows) + "\n").encode()


def self_instruct_rows(data: bytes) -> bytes:
    """Self-Instruct's task files (one task a line, with its instances) as Alpaca rows, one per instance, as its
    own fine-tuning scripts write them."""
    out = []
    for line in data.decode().splitlines():
        task = json.loads(line)
        for ins in task["instances"]:
            out.append(json.dumps({"instruction": task["instruction"], "input": ins["input"], "output": ins["output"]}))
    return ("\n".join(out) + "\n").encode()


TOKENIZER = HERE.parent / "examples" / "smollm2" / "model"


def read_file(repo: Path, rel: str) -> bytes:
    """``rel`` of a checkout, or of a bare mirror (git show)."""
    path = repo / rel
    if path.is_file():
        return path.read_bytes()
    return subprocess.run(["git", "--git-dir", str(repo), "show", f"HEAD:{rel}"], check=True,
                          capture_output=True).stdout  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lf", type=Path, required=True, help="LLaMA-Factory checkout or bare git mirror")
    ap.add_argument("--codealpaca", type=Path, required=True, help="codealpaca checkout or bare git mirror")
    ap.add_argument("--gpteacher", type=Path, required=True, help="GPTeacher checkout or bare git mirror")
    ap.add_argument("--selfinstruct", type=Path, help="stanford_alpaca checkout or mirror (Self-Instruct's seed tasks)")
    ap.add_argument("--gpt4llm", type=Path, help="GPT-4-LLM checkout or mirror (the user-oriented instructions)")
    ap.add_argument("--fastchat", type=Path, help="FastChat checkout or mirror (its ShareGPT-format dummy data)")
    ap.add_argument("--t0", type=Path, help="bare git mirror of yizhongw/self-instruct (its copy of T0's prompts)")
    ap.add_argument("--alpacaeval", type=Path, help="alpaca_eval checkout or mirror (chat models' replies)")
    ap.add_argument("--results", default="diagnose_public_sets.json")
    ap.add_argument("--tokenizer", type=Path, default=TOKENIZER, help="SmolLM2 (examples/smollm2/get_model.py)")
    a = ap.parse_args()
    from gradian.diagnose.api import diagnose_full
    from gradian.diagnose.settings import DiagnoseSettings

    out: dict[str, list[dict]] = {}

    def run(path: Path) -> None:
        fs, _, _ = diagnose_full(train=path, tokenizer=str(a.tokenizer), settings=DiagnoseSettings())
        out[path.name] = [{"code": f.code, "severity": f.severity.value, "message": f.message,
                           "rows": [r + 1 for r in (f.evidence or {}).get("rows", [])]} for f in fs]  # fmt: skip
        print(path.name, [(f["code"], f["severity"], len(f["rows"])) for f in out[path.name]], flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        for source, rels in SOURCES.items():
            if getattr(a, source) is None:
                continue
            for rel in rels:
                name = Path(rel).parent.name + ".json" if source == "alpacaeval" else Path(rel).name
                path = Path(tmp) / name
                data = read_file(getattr(a, source), rel)
                path.write_bytes(self_instruct_rows(data) if b'"instances"' in data[:2000] else data)
                run(path)
            if source == "t0":  # and the mix of all its templates
                path = Path(tmp) / "t0_mix.jsonl"
                path.write_bytes(t0_mix(a.t0))
                run(path)
    res = {"command": "python bench/diagnose_public_sets.py " + " ".join(sys.argv[1:]), "findings": out}
    (HERE / "results" / a.results).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
