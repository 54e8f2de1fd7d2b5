"""Side by side on the planted-fault corpus (bench/diagnose_corpus.py): `gradian diagnose` (character level, no
tokenizer, every dataset rule), Together's `check_file` (PyPI `together` 1.5.35, run in its own virtualenv: it stops
at the first bad line), the OpenAI cookbook's chat-format checks (ported below) and datatrove's quality filters
(bench/datatrove_rows.py, run in datatrove's own virtualenv). Prints a markdown table: per kind, caught (the tool flags
at least one planted row), row recall and precision; and error/warning findings on clean data.

    python -m venv /tmp/togvenv && /tmp/togvenv/bin/pip install together==1.5.35
    python3.11 -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install datatrove==0.10.1 regex spacy
    python bench/bench_validators.py [CORPUS_DIR] [--together /tmp/togvenv/bin/python] \\
        [--datatrove /tmp/dtvenv/bin/python]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diagnose_corpus  # noqa: E402

from gradian.diagnose.api import diagnose_full  # noqa: E402
from gradian.diagnose.settings import DiagnoseSettings  # noqa: E402


def gradian_rows(path: Path) -> tuple[dict[str, set[int]], list[str]]:
    """Rows flagged per rule code, and the error/warning findings (code:severity)."""
    fs, _, _ = diagnose_full(train=path, select=["D"], settings=DiagnoseSettings())
    rows: dict[str, set[int]] = defaultdict(set)
    for f in fs:
        rows[f.code] |= set(f.evidence.get("rows") or [])
    return rows, [f"{f.code}:{f.severity.value}" for f in fs if f.severity.value != "info"]


def cookbook_rows(path: Path) -> set[int] | None:
    """The OpenAI cookbook's format-error checks (examples/Chat_finetuning_data_prep.ipynb, "Format validation"),
    ported per row: the rows with any format error. None for files that are not chat files (every row would be
    'missing_messages_list')."""
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    if not any(isinstance(r, dict) and r.get("messages") for r in rows):
        return None
    bad = set()
    for i, ex in enumerate(rows):
        if not isinstance(ex, dict) or not ex.get("messages"):
            bad.add(i)
            continue
        msgs = ex["messages"]
        for m in msgs:
            if "role" not in m or "content" not in m:
                bad.add(i)
            if any(k not in ("role", "content", "name", "function_call", "weight") for k in m):
                bad.add(i)
            if m.get("role") not in ("system", "user", "assistant", "function"):
                bad.add(i)
            content, fc = m.get("content"), m.get("function_call")
            if (not content and not fc) or not isinstance(content, str):
                bad.add(i)
        if not any(m.get("role") == "assistant" for m in msgs):
            bad.add(i)
    return bad


def together_rows(path: Path, python: str | None) -> set[int] | None:
    """Together's check_file stops at the first fault: the one line it names (0-based here), or none."""
    if not python:
        return None
    code = ("import json,sys; from together.utils.files import check_file; "
            "print(json.dumps(check_file(sys.argv[1]), default=str))")  # fmt: skip
    env = {**os.environ, "TOGETHER_NO_BANNER": "1"}
    out = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True, check=True, env=env).stdout
    rep = json.loads(out.strip().splitlines()[-1])
    if rep.get("is_check_passed"):
        return set()
    line = rep.get("line_number")
    return {int(line) - 1} if line else {-1}  # -1: the file is refused without a line


def datatrove_rows(paths: list[Path], python: str | None) -> dict[str, dict] | None:
    """bench/datatrove_rows.py in datatrove's virtualenv over every file: per file, the rows any filter rejects, with
    the filters that reject each; plus the datatrove version and the filters run."""
    if not python:
        return None
    script = Path(__file__).resolve().parent / "datatrove_rows.py"
    cmd = [python, str(script), *map(str, paths)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd="/tmp").stdout
    return json.loads(out.strip().splitlines()[-1])


def dt_cell(flagged: dict[str, list[str]], planted: set[int]) -> tuple[bool, bool, str]:
    """Caught (row recall >= 0.8 at precision >= 0.5, the bar gradian meets) by the union of the filters, by the best
    single filter (as gradian's column takes its best rule), and the cell:
    'yes|no (recall/precision)', then the single filter catching the most planted rows, with its recall/precision."""
    rows = {int(k) for k in flagged}
    tp = len(rows & planted)
    rec, prec = tp / len(planted), (tp / len(rows) if rows else 0.0)
    by: dict[str, set[int]] = defaultdict(set)
    for k, fs in flagged.items():
        for f in fs:
            by[f.split(":")[0]].add(int(k))
    cell = f"{'yes' if rec >= 0.8 and prec >= 0.5 else 'no'} ({rec:.2f}/{prec:.2f})"
    one = False
    if by and tp:
        best = max(by, key=lambda f: (len(by[f] & planted), -len(by[f])))
        b = by[best]
        r1, p1 = len(b & planted) / len(planted), len(b & planted) / len(b)
        cell += f"; {best.replace('Filter', '')} {r1:.2f}/{p1:.2f}"
        one = r1 >= 0.8 and p1 >= 0.5
    return rec >= 0.8 and prec >= 0.5, one, cell


def score(flagged: set[int] | None, planted: set[int]) -> tuple[str, str, str]:
    if flagged is None:
        return "n/a", "", ""
    tp = len(flagged & planted)
    caught = "yes" if tp else "no"
    rec = f"{tp / len(planted):.2f}"
    prec = f"{tp / len(flagged):.2f}" if flagged else "-"
    return caught, rec, prec


def clean_cell(rep: dict) -> str:
    """Rows any filter rejects on a clean set, as count/total (share), and the rows each filter rejects."""
    n, fl = rep["rows"], rep["flagged"]
    per: dict[str, int] = defaultdict(int)
    for fs in fl.values():
        for f in {x.split(":")[0] for x in fs}:
            per[f.replace("Filter", "")] += 1
    each = ", ".join(f"{f} {c}" for f, c in sorted(per.items(), key=lambda x: (-x[1], x[0])))
    return f"{len(fl)}/{n} ({len(fl) / n:.0%}){': ' + each if each else ''}"


def clean_table(corpus: Path, man: dict, tog: str | None, dt: dict | None) -> None:
    print("| clean set | gradian error/warning findings | together | cookbook rows flagged | datatrove rows rejected |")
    print("|---|---|---|---|---|")
    for name, f in man["clean"].items():
        _, ew = gradian_rows(corpus / f)
        t = together_rows(corpus / f, tog)
        c = cookbook_rows(corpus / f)
        t_s = "n/a" if t is None else ("passed" if not t else f"refused (line {min(t) + 1})")
        d_s = "n/a" if dt is None else clean_cell(dt["files"][str(corpus / f)])
        print(f"| {name} | {', '.join(ew) or 'none'} | {t_s} | {'n/a' if c is None else len(c)} | {d_s} |")


def main(argv: list[str]) -> int:
    corpus = Path(argv[0]) if argv and not argv[0].startswith("--") else Path("bench/results/diagnose_corpus")
    corpus = corpus.resolve()
    tog = argv[argv.index("--together") + 1] if "--together" in argv else None
    dt_py = argv[argv.index("--datatrove") + 1] if "--datatrove" in argv else None
    man = diagnose_corpus.build(corpus)
    files = [corpus / m["file"] for m in man["kinds"].values()] + [corpus / f for f in man["clean"].values()]
    dt = datatrove_rows(files, dt_py)
    if dt:
        print(f"datatrove {dt['version']}, filters (defaults): {', '.join(dt['filters'])}\n")
    print("| kind | base | planted | gradian caught | recall | precision | rules | together | cookbook | datatrove |")
    print("|---|---|---:|---|---:|---:|---|---|---|---|")
    totals = defaultdict(int)
    for kind, m in man["kinds"].items():
        path, planted = corpus / m["file"], set(m["rows"])
        rows, _ = gradian_rows(path)
        best = max(m["expect"], key=lambda c: (len(rows.get(c, set()) & planted), -len(rows.get(c, set()))))
        g = score(rows.get(best, set()), planted)  # the expected rule that catches the most planted rows
        t = score(together_rows(path, tog), planted)
        c = score(cookbook_rows(path), planted)
        for name, s in (("gradian", g), ("together", t), ("cookbook", c)):
            totals[name] += s[0] == "yes"
        d_s = "n/a"
        if dt:
            flagged = dt["files"][str(path)]["flagged"]
            ok, one, d_s = dt_cell(flagged, planted)
            totals["datatrove (recall >= 0.8 at precision >= 0.5)"] += ok
            totals["datatrove best filter (recall >= 0.8 at precision >= 0.5)"] += one
            totals["datatrove (any planted row)"] += bool({int(k) for k in flagged} & planted)
        fired = best if rows.get(best, set()) & planted else ""
        print(
            f"| {kind} | {m['base']} | {len(planted)} | {g[0]} | {g[1]} | {g[2]} | {fired} | {t[0]}"
            f"{' (' + t[1] + ')' if t[0] == 'yes' else ''} | {c[0]}{' (' + c[1] + ')' if c[0] == 'yes' else ''} "
            f"| {d_s} |"
        )
    print(f"\ncaught: {dict(totals)} of {len(man['kinds'])} kinds\n")
    clean_table(corpus, man, tog, dt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
