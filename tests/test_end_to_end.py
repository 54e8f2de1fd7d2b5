"""End to end, through the real CLI and real runs: the issue's must-shows.

- On the bundled example the verdict names the planted rows (precision and recall), with their share of harm.
- On a run where the harmful rows are also truncated, the verdict says the cause is mechanical and gives the fix.
- The quickstart's commands for the bundled example run as written.

Each expensive run happens once (module-scoped fixtures, ``--batch-size 16``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from gradian.report.render import md_escape

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "e2e"))
import truncated_run  # noqa: E402

EXAMPLE = REPO / "examples" / "stories260k"
QUICKSTART = REPO / "docs" / "getting-started" / "quickstart.md"
DOC_OUT = "gradian-out"  # the quickstart's --out; the tests write to a tmp dir instead
FAST = ["--no-progress", "--batch-size", "16"]
# Placeholders for a user's own run (the tutorial's): CI cannot have them, and the quickstart has none.
PLACEHOLDERS = ("my-lora", "support-lora", "path/or", "path/to", "hub-id")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)  # the venv's `gradian` script
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["COLUMNS"] = "200"  # keep rich from wrapping the verdict mid-sentence
    return env


def _run(argv: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)


def _example_argv(out: Path) -> list[str]:
    e = "examples/stories260k"
    return ["attribute", "--run", f"{e}/run", "--base", f"{e}/base", "--train", f"{e}/data/train.jsonl",
            "--eval", f"{e}/data/eval.jsonl", "--out", str(out)]  # fmt: skip


# --- 1. the bundled example ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundled")
    argv = _example_argv(out)
    proc = _run([sys.executable, "-m", "gradian", *argv, *FAST])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"argv": argv, "out": out, "proc": proc, "report": json.loads((out / "report.json").read_text("utf-8"))}


def test_bundled_example_verdict_names_the_planted_rows(bundled):
    report, out = bundled["report"], bundled["out"]
    planted = json.loads((EXAMPLE / "data" / "planted.json").read_text("utf-8"))
    harmful = set(planted["harmful_cluster"]["indices"])
    v = report["verdict"]
    assert v["kind"] == "concentrated" and v["cause"] == "content", v["text"]
    drop = set(v["drop_rows"])
    assert len(drop & harmful) >= 0.7 * len(drop), sorted(drop - harmful)  # precision (31 of 43 when measured)
    assert len(drop & harmful) >= 0.8 * len(harmful), sorted(harmful - drop)  # recall (31 of 36)
    assert f"carry {100 * v['how']['head_share']:.0f}% of the harm" in v["text"]
    assert v["confidence"]["level"] in ("high", "medium"), v["confidence"]
    (group,) = v["groups"]
    assert group["cause"] == "content" and "zorblax" in group["terms"]
    html = (out / "report.html").read_text("utf-8")
    assert 'id="verdict-groups"' in html and "zorblax" in html
    assert (out / "drop_rows.txt").is_file()
    # read in 30 seconds: one headline sentence that says what to do, at most three bullets, the rest folded
    assert len(v["headline"].split()) <= 25 and "drop them" in v["headline"], v["headline"]
    assert 1 <= len(v["evidence"]) <= 3 and 0.0 < v["expected_recovery"] <= 1.0
    assert 'id="verdict-evidence"' in html and '<details id="verdict-details">' in html
    md = (out / "report.md").read_text("utf-8")
    assert md_escape(v["headline"]) in md and all(f"- {md_escape(e)}" in md for e in v["evidence"])
    assert v["headline"] in bundled["proc"].stdout
    assert "Traceback" not in bundled["proc"].stdout + bundled["proc"].stderr


def test_projected_scores_agree_with_exact_on_the_bundled_example(bundled, tmp_path):
    """The bundled adapter is small enough to run exact by default; --proj-dim 32 must keep the ranking (Spearman
    >= 0.9; 0.92 when measured)."""
    from scipy.stats import spearmanr

    assert bundled["report"]["settings"]["proj_dim"] == 0
    proc = _run([sys.executable, "-m", "gradian", *_example_argv(tmp_path), *FAST, "--proj-dim", "32"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    projected = json.loads((tmp_path / "report.json").read_text("utf-8"))
    assert projected["settings"]["proj_dim"] == 32
    exact = {e["index"]: e["score"] for e in bundled["report"]["examples"]}
    proj = {e["index"]: e["score"] for e in projected["examples"]}
    rows = sorted(exact)
    assert sorted(proj) == rows
    assert spearmanr([exact[i] for i in rows], [proj[i] for i in rows])[0] >= 0.9


# --- 2. harmful rows that are also truncated ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def truncated(tmp_path_factory):
    from gradian.pipeline import attribute_and_report

    d = tmp_path_factory.mktemp("truncated")
    info = truncated_run.build_run(d)
    res = attribute_and_report(
        d / "run",
        out=d / "out",
        base=str(truncated_run.BASE),
        train=d / "train.jsonl",
        eval=d / "eval.jsonl",
        batch_size=16,
        progress=False,
    )
    return {**info, "report": res.report.to_dict()}


def test_truncated_harmful_rows_give_a_mechanical_verdict(truncated):
    report, harmful = truncated["report"], set(truncated["harmful"])
    assert truncated["train"].n_truncated == len(harmful)  # only the planted rows are cut
    v = report["verdict"]
    assert v["kind"] == "concentrated" and v["cause"] == "mechanical", v["text"]
    (group,) = [g for g in v["groups"] if g["cause"] == "mechanical"]
    assert group["finding"]["code"] in ("D106", "D107")
    assert len(set(group["rows"]) & harmful) >= 0.8 * len(group["rows"])
    assert "The cause looks mechanical" in v["text"] and "truncation" in v["text"]
    # the truncation fix comes first among the next steps, ahead of dropping rows
    fix = [s for s in v["next_steps"] if "max_length" in s]
    assert fix and v["next_steps"].index(fix[0]) == 0, v["next_steps"]
    assert re.search(r"max_length to at least \d+", fix[0]), fix[0]


# --- 3. the quickstart, as written --------------------------------------------------------------------------------


def _quickstart_commands() -> tuple[str, list[tuple[str, bool]]]:
    """The bash prelude (the example's variable assignments) and every `gradian ...` command of the quickstart, in
    order, each with whether it is a placeholder for the user's own run (a placeholder path, or a variable that a
    placeholder assignment set)."""
    text = QUICKSTART.read_text("utf-8")
    prelude, commands, fake_vars = [], [], set()
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if m := re.match(r"^([A-Za-z_]+)=", line):
                if any(p in line for p in PLACEHOLDERS):
                    fake_vars.add(m.group(1))
                else:
                    prelude.append(line)
                    fake_vars.discard(m.group(1))
            elif line.startswith("gradian "):
                fake = any(p in line for p in PLACEHOLDERS) or any(f"${v}" in line for v in fake_vars)
                commands.append((line, fake))
    return "\n".join(prelude), commands


def test_quickstart_commands_run_as_written(bundled, tmp_path):
    prelude, commands = _quickstart_commands()
    assert "E=examples/stories260k" in prelude
    runnable = [c for c, fake in commands if not fake]
    assert {c.split()[1] for c in runnable} >= {"doctor", "diagnose", "attribute", "verify"}, runnable
    # every command is the bundled example's: the quickstart runs as written
    text = QUICKSTART.read_text("utf-8")
    assert not any(fake for _, fake in commands), commands
    slow = os.environ.get("GRADIAN_E2E_VERIFY") == "1"
    ran = []
    for cmd in runnable:
        sub = cmd.split()[1]
        argv_sh = cmd.replace(DOC_OUT, str(bundled["out"]) if sub != "attribute" else str(tmp_path / "we"))
        if sub == "attribute":
            # The doc's command is the one test 1 ran: compare the expanded argv and reuse its output.
            printed = subprocess.run(["bash", "-c", f"{prelude}\nprintf '%s\\n' {argv_sh}"], cwd=REPO,
                                     capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
            assert printed[0] == "gradian"
            assert printed[1:] == bundled["argv"][:-1] + [str(tmp_path / "we")], printed
            ran.append(cmd)
            continue
        if sub == "verify" and not slow:
            continue  # re-trains twice (~80 s each on 2 CPUs); GRADIAN_E2E_VERIFY=1 runs it
        proc = subprocess.run(["bash", "-c", f"set -e\n{prelude}\n{argv_sh}"], cwd=REPO, env=_env(),
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        out = proc.stdout + proc.stderr
        assert "Traceback" not in out, (cmd, out[-3000:])
        # diagnose exits 1 when it finds an error (the doc says so; the example has planted truncation)
        expected = (1,) if sub == "diagnose" else (0,)
        assert proc.returncode in expected, (cmd, proc.returncode, out[-3000:])
        if sub == "diagnose":
            assert "D106" in out and "D107" in out
        ran.append(cmd)
    assert any(c.startswith("gradian doctor") for c in ran) and any(c.startswith("gradian diagnose") for c in ran)
    # the doc states the exit code users will see from diagnose
    assert "exits 1" in text


def test_diagnose_row_budget_reads_the_first_rows_and_says_so(tmp_path):
    """A training file bigger than the setup checks' memory budget: they read its first rows, the report says so,
    and the rows the report shows still carry their text (read from the file in one streamed pass)."""
    out = tmp_path / "budget"
    proc = _run([sys.executable, "-m", "gradian", *_example_argv(out), *FAST, "--diagnose-rows", "100"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    rep = json.loads((out / "report.json").read_text())
    note = "gradian diagnose and the cluster labels read the first 100 of the training file's rows"
    assert any(n.startswith(note) for n in rep["notes"]), rep["notes"]
    assert len(rep["examples"]) > 300  # attribution still scored every row
    for f in rep["findings"]:
        rows = (f.get("evidence") or {}).get("rows") or []
        assert all(int(r) < 100 for r in rows), (f["code"], rows[:5])
    shown = rep["examples"][:20]
    assert any(e["index"] >= 100 for e in shown)
    assert all(e.get("text") for e in shown)  # text fetched for top rows beyond the first 100
