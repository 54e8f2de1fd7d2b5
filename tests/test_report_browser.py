"""report.html in a real browser (headless Chromium): the verdict, the cluster table and the SVG plots render, hostile
dataset text shows as text, and no script runs; the token-harm highlighting and the base vs fine-tune continuations
render, on constructed data and on a real prompt-only run of the bundled stories260K example. Keeps screenshots at
.ci/artifacts/report.png and .ci/artifacts/report_prompts.png.

Skipped when Chromium is not installed locally; CI (.ci/run) installs it, so there it runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "report"))
import report_data  # noqa: E402

from gradian.report import build_report, render_all  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / ".ci" / "artifacts"


def find_chromium() -> str | None:
    for cand in (os.environ.get("GRADIAN_CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser"):
        if cand and (Path(cand).is_file() or shutil.which(cand)):
            return shutil.which(cand) or cand
    return None


CHROMIUM = find_chromium()
if CHROMIUM is None and os.environ.get("GRADIAN_REQUIRE_BROWSER"):
    raise RuntimeError("GRADIAN_REQUIRE_BROWSER is set but Chromium is not installed (apt-get install -y chromium)")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed here (apt-get install -y chromium); CI installs it and runs this test",
)


def chromium(*args: str, timeout: int = 90) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            *args,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


class Dom(HTMLParser):
    """Elements, ids and text of the DOM Chromium dumped."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.marks: list[tuple[dict, str]] = []  # <mark> elements: attributes and text
        self._mark: dict | None = None
        self.tags: list[str] = []
        self.ids: set[str] = set()
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if tag == "mark":
            self._mark = dict(attrs)
            self.marks.append((self._mark, ""))
        self.tags.append(tag)
        self.attrs += attrs
        self.ids |= {v for k, v in attrs if k == "id" and v}
        self._in_title = tag == "title" and "svg" not in self.tags
        if self._in_title:
            self.title = ""

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        if tag == "mark":
            self._mark = None

    def handle_data(self, data):
        self.text.append(data)
        if self._mark is not None:
            self.marks[-1] = (self._mark, self.marks[-1][1] + data)
        if self._in_title and not self.title:
            self.title = data


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    d = report_data.make_inputs()
    report = build_report(
        d["attribution"],
        findings=d["findings"],
        embeddings=d["embeddings"],
        train_examples=d["train"],
        eval_examples=d["eval"],
        logs=d["logs"],
    )
    out = tmp_path_factory.mktemp("browser")
    render_all(report, out)
    return out / "report.html"


def test_no_script_tags_in_output(page):
    html = page.read_text(encoding="utf-8").lower()
    assert "<script" not in html  # the page uses no JavaScript at all, so any <script> would be injected
    assert not re.search(r"<[^>]*\son[a-z]+\s*=", html), "an event-handler attribute in a tag"


def test_dom_renders_and_hostile_text_is_text(page):
    res = chromium("--dump-dom", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    dom = Dom()
    dom.feed(res.stdout)
    assert dom.title == "Gradian report", dom.title  # not 'pwned'
    assert "script" not in dom.tags, "an injected <script> element made it into the DOM"
    assert "img" not in dom.tags, "an injected <img> element made it into the DOM"
    assert not [k for k, _ in dom.attrs if k.startswith("on")], "an event-handler attribute made it into the DOM"
    text = "".join(dom.text)
    assert "<script>document.title='pwned'</script>" in text
    assert "onerror=\"document.title='pwned'\"" in text
    for section in ("verdict", "regressed", "clusters", "top-rows-section", "setup-findings", "plots"):
        assert section in dom.ids, section
    assert "verdict-box" in dom.ids and "cluster-table" in dom.ids
    assert "12 training rows" in text and "carry 96% of the harm" in text and "verdict-groups" in dom.ids
    assert "verdict-evidence" in dom.ids and "details" in dom.tags  # the headline's bullets; the rest folded
    assert "zorbax" in text
    assert dom.tags.count("svg") >= 5
    assert {"polyline", "rect", "circle"} <= set(dom.tags)
    for fig in ("plot-loss", "plot-nll", "plot-harm", "plot-cluster-harm", "plot-map"):
        assert fig in dom.ids, fig


def dump(page: Path) -> Dom:
    res = chromium("--dump-dom", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    dom = Dom()
    dom.feed(res.stdout)
    return dom


def shading(mark: dict) -> float:
    m = re.search(r"rgba\(\d+,\s*\d+,\s*\d+,\s*([0-9.]+)\)", mark.get("style") or "")
    return float(m.group(1)) if m else 0.0


def test_token_harm_and_generations_render(page):
    dom = dump(page)
    assert dom.title == "Gradian report" and "script" not in dom.tags
    assert {"generations", "generations-table"} <= dom.ids
    text = "".join(dom.text)
    assert "Lily. She liked to play with her ball." in text and " Zorbax. <script>" in text  # hostile text as text
    assert "generated completion" in text and "had only a prompt" in text
    marks = [(a, t) for a, t in dom.marks if "tok" in (a.get("class") or "")]
    assert len(marks) == 3 * 6  # the label tokens of the three split rows
    strongest = max(marks, key=lambda m: shading(m[0]))
    assert strongest[1] == " Zor" and shading(strongest[0]) > 0.5
    assert any(t.startswith(" <script>") for _, t in marks)
    assert all(a.get("title", "").startswith("harm ") for a, _ in marks)


@pytest.fixture(scope="module")
def real_page(tmp_path_factory) -> Path:
    """The full pipeline on the bundled example with the eval completions removed (the first 120 training rows)."""
    import json

    from gradian.pipeline import attribute_and_report

    ex = REPO / "examples" / "stories260k"
    work = tmp_path_factory.mktemp("browser-real")
    rows = [json.loads(x) for x in (ex / "data" / "eval.jsonl").read_text().splitlines() if x.strip()]
    (work / "eval.jsonl").write_text("".join(json.dumps({"prompt": r["prompt"]}) + "\n" for r in rows))
    lines = (ex / "data" / "train.jsonl").read_text().splitlines()[:120]
    (work / "train.jsonl").write_text("\n".join(lines) + "\n")
    attribute_and_report(
        ex / "run", base=str(ex / "base"), train=work / "train.jsonl", eval=work / "eval.jsonl", out=work / "out",
        progress=False,
    )  # fmt: skip
    return work / "out" / "report.html"


def test_real_prompt_only_report_in_browser(real_page):
    dom = dump(real_page)
    assert "generations-table" in dom.ids and "top-rows" in dom.ids
    text = "".join(dom.text)
    assert "generated completion" in text
    assert "Zorblax" in text  # what the fine-tune writes where the base model writes Lily
    marks = [(a, t) for a, t in dom.marks if "tok" in (a.get("class") or "")]
    assert len(marks) > 100 and max(shading(a) for a, _ in marks) > 0.5
    shot = ARTIFACTS / "report_prompts.png"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot.unlink(missing_ok=True)
    res = chromium("--window-size=1280,5200", f"--screenshot={shot}", real_page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_screenshot_artifact(page):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    res = chromium("--window-size=1280,5200", f"--screenshot={shot}", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
