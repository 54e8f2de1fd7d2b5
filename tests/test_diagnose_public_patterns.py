"""What public instruction sets hold and the content rules must read as text, not faults (bench/results/
diagnose_public_sets.md has the sets; they are not shipped): a mix of tasks whose answers are prose (GSM8K's
reasoning), lists whose items end without a full stop, unfenced code (f-strings, templates, HTML tables, repeated
lines), letters that leave "[Your Name]" for their reader, and short answers to short tasks. The same file with
planted faults (answers cut mid-sentence, markup around prose, an unfilled template slot) is still caught."""

from __future__ import annotations

import json
import random
from pathlib import Path

from gradian.diagnose.api import diagnose_full
from gradian.diagnose.settings import DiagnoseSettings
from realsets import write_jsonl

GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "train.jsonl"
RULES = ["D128", "D129", "D131", "D132", "D133", "D134"]
ITEMS = ["apples", "bread", "rice", "olive oil", "green tea", "black beans", "oat milk", "sea salt", "honey", "lentils"]
CODE = [
    'def greet(name):\n    return f"Hello, {name}!"\n\nprint(greet("Ada"))',
    "function add(a, b) {\n  return a + b;\n}\n\nconsole.log(add(2, 3));",
    "<table>\n  <tr>\n    <td></td><td></td>\n  </tr>\n  <tr>\n    <td></td><td></td>\n  </tr>\n</table>",
    "<ul>\n  {% for user in users %}\n    <li>{{ user.name }}</li>\n  {% endfor %}\n</ul>",
    "arr = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]",
    "SELECT name FROM users WHERE age > 30;",
    "for i in range(3):\n    print(i)\n    print(i)\n    print(i)",
]


def _rows(rng: random.Random) -> list[dict]:
    gsm = [json.loads(x) for x in GSM8K.read_text().splitlines()[:400]]
    rows = [
        {"prompt": r["question"], "completion": r["answer"].replace("\n#### ", "\nThe answer is ") + "."}
        for r in gsm[:80]
    ]
    for k in range(20):  # lists whose items end without a full stop
        picked = rng.sample(ITEMS, 4)
        rows.append(
            {
                "prompt": f"Name four things to buy for dinner number {k}.",
                "completion": "Here is a list:\n" + "\n".join(f"{j + 1}. {w}" for j, w in enumerate(picked)),
            }
        )
    for k, code in enumerate(CODE * 2):
        rows.append({"prompt": f"Write the code for task {k}.", "completion": code})
    for k in range(5):
        rows.append({"prompt": f"Write a short thank-you letter to a colleague ({k}).",
                     "completion": "Dear Sam,\n\nThank you for your help with the report this week.\n\nBest "
                                   "regards,\n[Your Name]"})  # fmt: skip
    for k, a in enumerate(["Paris.", "42.", "Blue.", "Yes.", "Seven.", "Four apples.", "The cat sat.", "It is 9 km."]):
        rows.append({"prompt": f"Answer in a word or two: question {k}?", "completion": a})
    rng.shuffle(rows)
    return rows


def _findings(path: Path) -> dict[str, set[int]]:
    fs, _, _ = diagnose_full(train=path, select=RULES, settings=DiagnoseSettings())
    return {f.code: set(f.evidence.get("rows", [])) for f in fs if f.severity.value != "info"}


def test_public_set_patterns_are_text_and_planted_faults_are_caught(tmp_path: Path) -> None:
    rng = random.Random(0)
    rows = _rows(rng)
    clean = tmp_path / "clean.jsonl"
    write_jsonl(clean, rows)
    assert _findings(clean) == {}
    prose = [i for i, r in enumerate(rows) if r["completion"].count(" ") > 40 and "\n1. " not in r["completion"]]
    cut, wrapped, slot = prose[:10], prose[10:20], prose[20:30]
    for i in cut:  # a generator's max_tokens: the answer stops inside a sentence
        words = rows[i]["completion"].split(" ")
        rows[i] = {**rows[i], "completion": " ".join(words[: len(words) * 2 // 3]).rstrip(".,;:!?\n")}
    for i in wrapped:
        rows[i] = {**rows[i], "completion": "<p>" + rows[i]["completion"] + "</p><br/>"}
    for i in slot:
        rows[i] = {**rows[i], "prompt": "{instruction}\n\n" + rows[i]["prompt"]}
    planted = tmp_path / "planted.jsonl"
    write_jsonl(planted, rows)
    found = _findings(planted)
    assert len(found.get("D128", set()) & set(cut)) >= 8
    assert found.get("D132") == set(wrapped)
    assert found.get("D131") == set(slot)
