"""report.html in a real browser (headless Chromium): the verdict, the cluster table and the SVG plots render, hostile
dataset text shows as text, and no script runs. Keeps a screenshot at .ci/artifacts/report.png.

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
        self.tags: list[str] = []
        self.ids: set[str] = set()
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs
        self.ids |= {v for k, v in attrs if k == "id" and v}
        self._in_title = tag == "title" and "svg" not in self.tags
        if self._in_title:
            self.title = ""

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False

    def handle_data(self, data):
        self.text.append(data)
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
    assert "explains 96% of the regression" in text
    assert "zorbax" in text
    assert dom.tags.count("svg") >= 5
    assert {"polyline", "rect", "circle"} <= set(dom.tags)
    for fig in ("plot-loss", "plot-nll", "plot-harm", "plot-cluster-harm", "plot-map"):
        assert fig in dom.ids, fig


def test_screenshot_artifact(page):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    res = chromium("--window-size=1280,5200", f"--screenshot={shot}", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
