"""What public instruction sets hold and the content rules must read as text, not faults (bench/results/
diagnose_public_sets.md has the sets; they are not shipped): a mix of tasks whose answers are prose (GSM8K's
reasoning), lists whose items end without a full stop, unfenced code (f-strings, templates, HTML tables, repeated
lines), letters that leave "[Your Name]" for their reader, short answers to short tasks, and answers that are no
sentences at all (titles, lists of names, agendas, tables). The same files with planted faults (answers cut inside a
sentence, markup around prose, an unfilled template slot) are still caught."""

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
    for name in ("Jane Austen", "Dracula", "[Your Name], CEO", "Dr. Jane Goodall"):  # signed on the last prose line
        rows.append({"prompt": f"Write a short letter as {name}.",
                     "completion": "I write to thank you for your kind support this year. It meant a great deal to "
                                   f"all of us here. Yours sincerely, {name}"})  # fmt: skip
    for k, a in enumerate(["Paris.", "42.", "Blue.", "Yes.", "Seven.", "Four apples.", "The cat sat.", "It is 9 km."]):
        rows.append({"prompt": f"Answer in a word or two: question {k}?", "completion": a})
    rng.shuffle(rows)
    return rows


def _findings(path: Path, rules: list[str] = RULES) -> dict[str, set[int]]:
    fs, _, _ = diagnose_full(train=path, select=rules, settings=DiagnoseSettings())
    return {f.code: set(f.evidence.get("rows", [])) for f in fs if f.severity.value != "info"}


def test_public_set_patterns_are_text_and_planted_faults_are_caught(tmp_path: Path) -> None:
    rng = random.Random(0)
    rows = _rows(rng)
    clean = tmp_path / "clean.jsonl"
    write_jsonl(clean, rows)
    assert _findings(clean) == {}
    prose = [i for i, r in enumerate(rows) if r["completion"].count(" ") > 40 and "\n1. " not in r["completion"]]
    cut, wrapped, slot = prose[:10], prose[10:20], prose[20:30]
    for i in cut:  # a generator's max_tokens: the answer stops inside a sentence, visibly (on 'the', 'of', 'to')
        words = rows[i]["completion"].split(" ")
        k = next(k for k in range(len(words) * 2 // 3, len(words)) if words[k] in ("the", "of", "to"))
        rows[i] = {**rows[i], "completion": " ".join(words[: k + 1])}
    for i in wrapped:
        rows[i] = {**rows[i], "completion": "<p>" + rows[i]["completion"] + "</p><br/>"}
    for i in slot:
        rows[i] = {**rows[i], "prompt": "{instruction}\n\n" + rows[i]["prompt"]}
    planted = tmp_path / "planted.jsonl"
    write_jsonl(planted, rows)
    found = _findings(planted)
    assert found.get("D128") == set(cut)
    assert found.get("D132") == set(wrapped)
    assert found.get("D131") == set(slot)


TITLES = ["Popcorn jelly bean ice cream", "China, US, Brazil, Japan, Canada, Australia",
          "Prompt Waywardness: The Curious Case of Discretized Interpretation of Continuous Prompts",
          "amazingly, astonishingly, unexpectedly, incredibly, unbelievably",
          "Breaking Bad, Peaky Blinders, Arrow, Money Heist, Better Call Saul, The Blacklist"]  # fmt: skip
LAYOUTS = ["[10 min] Status check\n- Current and upcoming work\n[5 min] Big project status and general updates\n"
           "[5 min] Discuss blockers, otherwise social time\n[2 min] Add follow ups",
           "Service | Category | Status | Billing | Renewal Date\nNetflix | Video | Active | Monthly | May 5",
           "Make a little space\nMake a better place\nHeal the world and make it a better place\nFor you and for me "
           "and the entire human race"]  # fmt: skip


def _task_mix(rng: random.Random) -> list[dict]:
    """What human-written task mixes (Self-Instruct's seed tasks, its user-oriented set) hold: reasoning in
    sentences, and answers that are no sentences (titles, lists of names, agendas, tables, lyrics), tasks whose
    answer is part of their input, LaTeX, an HTML tag asked for, translations of a passage in another script, and
    one into a language the prompt names."""
    gsm = [json.loads(x) for x in GSM8K.read_text().splitlines()[:200]]
    rows = [{"prompt": r["question"], "completion": r["answer"].replace("\n#### ", "\nThe answer is ") + "."}
            for r in gsm[:100]]  # fmt: skip
    for k in range(30):
        rows.append({"prompt": f"Give the answer as a short phrase ({k}).", "completion": TITLES[k % len(TITLES)]})
    for k in range(6):
        rows.append({"prompt": f"Lay it out ({k}).", "completion": LAYOUTS[k % len(LAYOUTS)]})
    rows.append({"prompt": "What is the output of the given LaTeX code?\n\\documentclass{article}\n"
                 "\\begin{document}\nFirst document. This is a simple example.\n\\end{document}",
                 "completion": "First document. This is a simple example."})  # fmt: skip
    rows.append({"prompt": "Write the HTML syntax for an image.", "completion": '<img src="url" alt="alternate text">'})
    rows.append({"prompt": "Translate this sentence into French: The weather is lovely today and we are going to the "
                 "park with our friends.",
                 "completion": "Il fait très beau aujourd'hui et nous allons au parc avec nos amis."})  # fmt: skip
    rows.append({"prompt": "Translate into English: यह एक सुंदर दिन है और हम पार्क में जा रहे हैं।",
                 "completion": "It is a beautiful day and we are going to the park."})  # fmt: skip
    rows.append({"prompt": "Translate into Hindi: It is a beautiful day and we are going to the park.\n"
                 "Example: मैं घर जा रहा हूँ। -> I am going home.",
                 "completion": "यह एक सुंदर दिन है और हम पार्क में जा रहे हैं।"})  # fmt: skip
    rng.shuffle(rows)
    return rows


def test_task_mix_answers_that_are_no_sentences_are_text(tmp_path: Path) -> None:
    rows = _task_mix(random.Random(1))
    clean = tmp_path / "mix.jsonl"
    write_jsonl(clean, rows)
    assert _findings(clean) == {}
    # the same file with reasoning cut inside its first sentence, on a word its answers never end a sentence with
    cut = []
    for i, r in enumerate(rows):
        first = r["completion"].split("\n")[0].split(" ")
        stop = next((k for k in range(len(first) - 1, 4, -1) if first[k] in ("the", "of", "to")), None)
        if "The answer is" in r["completion"] and stop and len(cut) < 8:
            rows[i] = {**r, "completion": " ".join(first[: stop + 1])}
            cut.append(i)
    planted = tmp_path / "cut.jsonl"
    write_jsonl(planted, rows)
    assert _findings(planted).get("D128") == set(cut)


def test_conversations_replies_and_tool_calls_are_not_loops_or_another_language(tmp_path: Path) -> None:
    """Multi-turn rows whose replies restate one another (a rewrite asked for again) are no loop, and JSON tool calls
    before a Chinese reply are no English: each reply is judged alone, JSON lines are data."""
    rng = random.Random(2)
    call = '{"name": "convert_currency", "arguments": {"amount": %d, "from": "USD", "to": "EUR"}}'
    reply = "You need to preheat your oven to 350 degrees F. In a large bowl, mix together the rice and the beans."
    rows = []
    for k in range(40):
        n = rng.randint(10, 900)
        rows.append({"messages": [
            {"role": "user", "content": f"你好，我需要将{n}美元兑换成欧元。你能帮我吗？"},
            {"role": "assistant", "content": call % n + f"\n当然，{n}美元大约等于{n * 85 // 100}欧元。"},
            {"role": "user", "content": "谢谢！请再说一遍，用另一种方式。"},
            {"role": "assistant", "content": f"好的：{n}美元兑换后大约是{n * 85 // 100}欧元，汇率可能会有变化。"},
        ]})  # fmt: skip
        rows.append({"messages": [
            {"role": "user", "content": f"Give me a recipe with rice ({k})."},
            {"role": "assistant", "content": f"I found a recipe for you. {reply}"},
            {"role": "user", "content": "Now a vegetarian one."},
            {"role": "assistant", "content": f"I found a vegetarian recipe for you. {reply}"},
        ]})  # fmt: skip
    path = tmp_path / "chat.jsonl"
    write_jsonl(path, rows)
    found = _findings(path)
    assert "D129" not in found and "D134" not in found, found
    rows[3]["messages"][3]["content"] = " ".join([reply] * 4)  # one reply that loops is still one
    write_jsonl(path, rows)
    assert _findings(path).get("D129") == {3}


def test_a_file_of_preference_pairs_gets_one_finding(tmp_path: Path) -> None:
    """A DPO file (LLaMA-Factory's layout: the conversation so far, the replies in chosen / rejected) given as
    training data: D102 names it, and the rules that would read its prompt-only rows as SFT rows are skipped with
    that reason instead of reporting empty targets and cut conversations."""
    rows = [{"conversations": [{"from": "human", "value": f"Question {k}: how do I boil an egg?"}],
             "chosen": {"from": "gpt", "value": "Put it in boiling water for eight minutes."},
             "rejected": {"from": "gpt", "value": "I can't help with that"}} for k in range(40)]  # fmt: skip
    path = tmp_path / "dpo.json"
    path.write_text(json.dumps(rows))
    fs, notes, _ = diagnose_full(train=path, settings=DiagnoseSettings())
    assert [(f.code, f.severity.value) for f in fs] == [("D102", "error")]
    assert {n.code for n in notes if "preference pairs" in n.reason} >= {"D103", "D128", "D129", "D133"}


SENTIMENT = GSM8K.parents[1] / "sentiment_labelled_sentences" / "amazon_cells_labelled.txt"
SONG = ("[Verse 1]\nCode flows steadily through the screen\nWith the glare dialed way down low\nNo clicks save for "
        "the keys' soft sheen\nFunctions lined up in a row\n\n[Chorus]\nAnother bug bites the dust tonight\n"
        "And another one gone, and another one gone\n\n[Verse 2]\nThe console hums a quiet tune\nThe tests run green "
        "before the noon\nA stack trace fades into the night\nWe ship the fix and it feels right\n\n[Chorus]\n"
        "Another bug bites the dust tonight\nAnd another one gone, and another one gone\n\n[Verse 3]\nThe pager "
        "sleeps, the logs are clean\nThe finest build you've ever seen\nWe close the laptop, dim the light\nAnd "
        "dream of code that runs just right\n\n[Chorus]\nAnother bug bites the dust tonight\n"
        "And another one gone, and another one gone")  # fmt: skip
STRUCTURED = [
    SONG,
    "Here are a few examples:\n\n" + "\n\n".join(
        f"{k}. **Original sentence with adjectives and adverbs:**\nThe {a} {n} {v} quickly over the {o} while the "
        f"{o} slept soundly in the warm afternoon sun.\n\n**Without adjectives or adverbs:**\nThe {n} {v} over the "
        f"{o} as it slept."
        for k, (a, n, v, o) in enumerate([("quick", "fox", "jumped", "dog"), ("brown", "cat", "leaped", "fence"),
                                          ("lazy", "horse", "stepped", "log"), ("old", "man", "climbed", "hill"),
                                          ("tired", "child", "crawled", "rug")], 1)),
    "Here is a sample questionnaire:\n\n" + "\n".join(
        f"- {x}? (Excellent, Good, Average, Poor)"
        for x in ["How clean was your room when you first arrived at the hotel",
                  "Were the staff at the front desk helpful with your questions and requests",
                  "What did you think of the breakfast served in the main restaurant",
                  "Was the location convenient for the places you wanted to visit",
                  "Did the stay feel like good value for the price you paid"]),
    "Each part of the pattern:\n\n" + "\n".join(
        f"- `{p}`: Matches numbers from `{lo}` to `{hi}`." for p, lo, hi in
        [("25[0-5]", 250, 255), ("2[0-4][0-9]", 200, 249), ("[01]?[0-9][0-9]?", 0, 199)]),
    "Here is the table you asked for:\n\n| Season | Time | Game | Score |\n|---|---|---|---|\n" + "\n".join(
        f"| 2011 | 1:00 PM | Ravens vs. {t} | {s} |" for t, s in
        [("Steelers", "35-7"), ("Titans", "13-26"), ("Rams", "37-7"), ("Jets", "34-17")]),
    "Many jellyfish simply die. This one can revert to a polyp and grow back into an adult again. Isn't that "
    "fascinating?! \U0001f9d6\u200d\u2642\ufe0f",
    "Thank you for choosing us for your event. We look forward to seeing you there!\n\nWarm wishes,\n\n"
    "[Your Name]\n\nEvents Team",
    "Taipei is 16 hours ahead of Pacific Time in December. So, to convert the meeting, you would add 16 hours.\n\n"
    "So the converted time is:\n\nDecember 22, 5:00 am TST",
    "Here are twelve words for a startup:\n" + "\n".join(f"{k}. {w}" for k, w in enumerate(
        ["Innovative", "Dynamic", "Agile", "Bold", "Visionary", "Nimble", "Creative", "Daring", "Modern",
         "Inventive", "Original", "Unconventional"], 1)),
    "We've just published a must-read post on Open Assistant: The Open Source ChatGPT You Can't Afford to Miss! "
    "Read it on our blog today.",
    "Here is a fake chat history for the modal:\n\n```text\nHuman: Hi, can you help me with my order?\nAssistant: Of "
    "course! What is your order number?\n```\n\nPaste it into the modal's body.",
]  # fmt: skip


def _chat_replies(rng: random.Random) -> list[dict]:
    """What chat models' replies hold (AlpacaEval's outputs of GPT-4, Claude, Llama-2-chat...): worked answers, and a
    mix of tasks whose short answers (a label, a sentence) run on down from the long ones; songs with a
    chorus, headings before each example, a questionnaire's options, lines that differ in their code, tables; an
    emoji after the last sentence, a letter signed in a block, a value a colon introduces, a list of single words,
    a name with a colon inside a sentence, a chat transcript asked for as code, '<br>' in a table's cells, and tags
    a prompt asks about."""
    gsm = [json.loads(x) for x in GSM8K.read_text().splitlines()[:150]]
    said = [x.rsplit("\t", 1)[0].strip() for x in SENTIMENT.read_text().splitlines() if x.strip()]
    said = [x for x in said if x[-1] in ".!?" and ".." not in x and "&" not in x]  # sentences, no HTML entity
    rows = [{"prompt": r["question"], "completion": r["answer"].replace("\n#### ", "\nThe answer is ") + "."}
            for r in gsm[:100]]  # fmt: skip
    for k in range(120):  # replies from long ones down to a title: no gap between the short and the long
        n = [16, 14, 12, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 0][k % 15]
        reply = " ".join(rng.sample(said, n)) if n else rng.choice([x for x in said if len(x.split()) <= 3])
        rows.append({"prompt": f"{rng.choice(said)} How would you reply?", "completion": reply})  # varied requests
    for k, reply in enumerate(STRUCTURED):
        rows.append({"prompt": f"Do task {k} as asked.", "completion": reply})
    rows.append({"prompt": "Summarize the two players' careers in a table.",
                 "completion": "Here is the table:\n\n| Player | Career |\n|---|---|\n| Derek Jeter | 20 seasons<br>5 "
                               "titles |\n| Albert Pujols | 22 seasons<br>2 titles |"})  # fmt: skip
    rows.append({"prompt": "Write the HTML syntax for adding an image to the page.",
                 "completion": 'Use the <img> tag with a source and a description: <img src="cat.png" alt="A cat">. '
                               "The alt text is read aloud by screen readers."})  # fmt: skip
    rng.shuffle(rows)
    return rows


def test_chat_model_replies_are_text_and_planted_faults_are_caught(tmp_path: Path) -> None:
    rows = _chat_replies(random.Random(3))
    path = tmp_path / "replies.jsonl"
    write_jsonl(path, rows)
    rules = [*RULES, "D130"]
    assert _findings(path, rules) == {}
    worked = [i for i, r in enumerate(rows) if "The answer is" in r["completion"]]
    loop, cut, turn = worked[:4], worked[4:10], worked[10:13]
    for i in loop[:2]:  # a generation loop: its last sentence again and again
        last = rows[i]["completion"].rsplit("\n", 1)[-1]
        rows[i] = {**rows[i], "completion": rows[i]["completion"] + (" " + last) * 3}
    for i in loop[2:]:  # the same sentence closing paragraph after paragraph
        paras = rows[i]["completion"].split("\n")[:3]
        said = " It also has a strong focus on privacy and security."
        rows[i] = {**rows[i], "completion": "\n\n".join(x.rstrip(".") + "." + said for x in paras)}
    for i in cut:  # a max_tokens cut inside the reasoning
        words = rows[i]["completion"].split(" ")
        rows[i] = {**rows[i], "completion": " ".join(words[: max(6, len(words) // 2)]) + " and the"}
    for i in turn:  # the model went on to write the user's next turn
        rows[i] = {**rows[i], "completion": rows[i]["completion"] + "\nHuman: And what about next week?"}
    write_jsonl(path, rows)
    found = _findings(path, rules)
    assert found == {"D129": set(loop), "D128": set(cut), "D130": set(turn)}, found
