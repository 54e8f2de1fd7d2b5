"""A small inline-SVG plotting helper: line, grouped bar, scatter and histogram charts, no dependencies.

Every string that reaches the SVG (titles, axis labels, tick labels, tooltips) goes through :func:`esc`
(``html.escape(quote=True)``), so dataset text is safe in labels and ``<title>`` tooltips.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gradian.numbers import finite_float

# Okabe-Ito, colour-blind safe; then a few extra distinct tones for up to 12 clusters.
PALETTE = [
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#7F7F7F",
    "#332288",
    "#882255",
    "#44AA99",
    "#999933",
    "#000000",
]

W, H = 640, 300
ML, MR, MT, MB = 64, 16, 46, 52


def esc(value: object) -> str:
    """HTML-escape anything for text or attribute context (quote=True)."""
    return html.escape(str(value), quote=True)


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e4 or a < 1e-3:
        return f"{v:.1e}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks: list[float] = []
    t = start
    while t <= hi + step * 1e-9 and len(ticks) < 50:
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 12))
        t += step
    return ticks or [lo]


@dataclass
class Axes:
    x0: float
    x1: float
    y0: float
    y1: float
    width: int = W
    height: int = H

    def sx(self, x: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return ML + (x - self.x0) / span * (self.width - ML - MR)

    def sy(self, y: float) -> float:
        span = (self.y1 - self.y0) or 1.0
        return self.height - MB - (y - self.y0) / span * (self.height - MT - MB)


@dataclass
class Chart:
    """An SVG document under construction."""

    title: str
    width: int = W
    height: int = H
    parts: list[str] = field(default_factory=list)

    def render(self, desc: str = "") -> str:
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {self.width} {self.height}" '
            f'width="{self.width}" height="{self.height}" role="img" aria-label="{esc(self.title)}">'
            f"<title>{esc(self.title)}</title>"
        )
        if desc:
            head += f"<desc>{esc(desc)}</desc>"
        head += f'<rect x="0" y="0" width="{self.width}" height="{self.height}" fill="#fff"/>'
        head += f'<text x="{ML}" y="20" class="ct" font-size="14" font-weight="600">{esc(self.title)}</text>'
        return head + "".join(self.parts) + "</svg>"

    def add(self, s: str) -> None:
        self.parts.append(s)


def _frame(chart: Chart, ax: Axes, xlabel: str, ylabel: str, *, xticks: bool = True) -> None:
    for t in nice_ticks(ax.y0, ax.y1):
        y = ax.sy(t)
        chart.add(f'<line x1="{ML}" x2="{ax.width - MR}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        chart.add(
            f'<text x="{ML - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#444">{esc(_fmt(t))}</text>'
        )
    if xticks:
        for t in nice_ticks(ax.x0, ax.x1, 6):
            x = ax.sx(t)
            chart.add(
                f'<text x="{x:.1f}" y="{ax.height - MB + 16}" text-anchor="middle" font-size="11" fill="#444">'
                f"{esc(_fmt(t))}</text>"
            )
    chart.add(
        f'<line x1="{ML}" x2="{ax.width - MR}" y1="{ax.height - MB}" y2="{ax.height - MB}" stroke="#888"/>'
        f'<line x1="{ML}" x2="{ML}" y1="{MT}" y2="{ax.height - MB}" stroke="#888"/>'
    )
    chart.add(
        f'<text x="{(ML + ax.width - MR) / 2:.1f}" y="{ax.height - 10}" text-anchor="middle" font-size="12" '
        f'fill="#222">{esc(xlabel)}</text>'
    )
    cy = (MT + ax.height - MB) / 2
    chart.add(
        f'<text x="14" y="{cy:.1f}" text-anchor="middle" font-size="12" fill="#222" '
        f'transform="rotate(-90 14 {cy:.1f})">{esc(ylabel)}</text>'
    )


def _legend(chart: Chart, names: Sequence[str], colors: Sequence[str]) -> None:
    x = chart.width - MR
    for name, c in reversed(list(zip(names, colors, strict=False))):
        label = esc(name)
        w = 14 + 7 * len(str(name))
        x -= w + 10
        chart.add(
            f'<rect x="{x:.0f}" y="26" width="10" height="10" fill="{c}"/>'
            f'<text x="{x + 14:.0f}" y="35" font-size="11" fill="#222">{label}</text>'
        )


def _empty(title: str, message: str) -> str:
    c = Chart(title, height=120)
    c.add(f'<text x="{ML}" y="70" font-size="13" fill="#666">{esc(message)}</text>')
    return c.render()


def line_chart(
    title: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    *,
    xlabel: str = "",
    ylabel: str = "",
    markers: Sequence[tuple[float, str]] = (),
) -> str:
    """Lines (name, xs, ys); ``markers`` are vertical lines (x, tooltip) e.g. log findings at their steps."""
    pts = [(x, y) for _, xs, ys in series for x, y in zip(xs, ys, strict=False) if _finite(x) and _finite(y)]
    if not pts:
        return _empty(title, "no data")
    xs_all = [p[0] for p in pts] + [m[0] for m in markers if _finite(m[0])]
    ys_all = [p[1] for p in pts]
    x0, x1 = min(xs_all), max(xs_all)
    y0, y1 = min(ys_all), max(ys_all)
    pad = (y1 - y0) * 0.05 or abs(y1) * 0.1 or 1.0
    ax = Axes(x0, x1 if x1 > x0 else x0 + 1, y0 - pad, y1 + pad)
    chart = Chart(title)
    _frame(chart, ax, xlabel, ylabel)
    for x, tip in markers:
        if not _finite(x):
            continue
        px = ax.sx(x)
        chart.add(
            f'<g class="marker"><title>{esc(tip)}</title>'
            f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{MT}" y2="{ax.height - MB}" stroke="#D55E00" stroke-width="2" '
            f'stroke-dasharray="4 3"/><polygon points="{px - 5:.1f},{MT} {px + 5:.1f},{MT} {px:.1f},{MT + 8}" '
            f'fill="#D55E00"/></g>'
        )
    names, colors = [], []
    for i, (name, xs, ys) in enumerate(series):
        c = color(i)
        raw = [(float(x), float(y)) for x, y in zip(xs, ys, strict=False) if _finite(x) and _finite(y)]
        p = [(ax.sx(x), ax.sy(y)) for x, y in raw]
        if not p:
            continue
        names.append(name)
        colors.append(c)
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in p)
        chart.add(
            f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"><title>{esc(name)}</title></polyline>'
        )
        if len(p) <= 60:
            for (x, y), (xv, yv) in zip(p, raw, strict=True):
                chart.add(
                    f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{c}"><title>{esc(name)} at {esc(_fmt(xv))}: '
                    f"{esc(_fmt(yv))}</title></circle>"
                )
    _legend(chart, names, colors)
    return chart.render()


def bar_chart(
    title: str,
    categories: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    ylabel: str = "",
    xlabel: str = "",
    colors: Sequence[str] | None = None,
) -> str:
    """Grouped vertical bars: one group per category, one bar per series."""
    if not categories or not series:
        return _empty(title, "no data")
    vals = [v for _, vs in series for v in vs if _finite(v)]
    y0 = min(0.0, min(vals, default=0.0))
    y1 = max(0.0, max(vals, default=1.0))
    if y1 == y0:
        y1 = y0 + 1
    ax = Axes(0, len(categories), y0, y1 + (y1 - y0) * 0.05)
    chart = Chart(title)
    _frame(chart, ax, xlabel, ylabel, xticks=False)
    group_w = (ax.width - ML - MR) / len(categories)
    bar_w = max(1.0, group_w * 0.8 / len(series))
    cols = list(colors) if colors else [color(i) for i in range(len(series))]
    for gi, cat in enumerate(categories):
        gx = ML + gi * group_w + group_w * 0.1
        for si, (name, vs) in enumerate(series):
            v = vs[gi] if gi < len(vs) else float("nan")
            if not _finite(v):
                continue
            ya, yb = ax.sy(max(v, 0.0)), ax.sy(min(v, 0.0))
            chart.add(
                f'<rect x="{gx + si * bar_w:.1f}" y="{ya:.1f}" width="{bar_w:.1f}" height="{max(yb - ya, 0.5):.1f}" '
                f'fill="{cols[si % len(cols)]}"><title>{esc(cat)} | {esc(name)}: {esc(_fmt(v))}</title></rect>'
            )
        if len(categories) <= 30:
            label = str(cat)
            label = label if len(label) <= 14 else label[:13] + "…"
            chart.add(
                f'<text x="{ML + (gi + 0.5) * group_w:.1f}" y="{ax.height - MB + 16}" text-anchor="middle" '
                f'font-size="11" fill="#444">{esc(label)}</text>'
            )
    if len(series) > 1 or series[0][0]:
        _legend(chart, [s[0] for s in series], cols)
    return chart.render()


def histogram(
    title: str,
    values: Sequence[float],
    *,
    bins: int = 30,
    xlabel: str = "",
    ylabel: str = "rows",
    split_at_zero: bool = True,
) -> str:
    """A histogram; with ``split_at_zero`` bins at or above 0 are drawn in the warning colour."""
    vals = [float(v) for v in values if _finite(v)]
    if not vals:
        return _empty(title, "no data")
    lo, hi = min(vals), max(vals)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in vals:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    ax = Axes(lo, hi, 0, max(counts) * 1.05)
    chart = Chart(title)
    _frame(chart, ax, xlabel, ylabel)
    for i, c in enumerate(counts):
        if not c:
            continue
        a, b = lo + i * width, lo + (i + 1) * width
        xa, xb = ax.sx(a), ax.sx(b)
        y = ax.sy(c)
        fill = "#D55E00" if split_at_zero and a >= 0 else "#0072B2"
        chart.add(
            f'<rect x="{xa:.1f}" y="{y:.1f}" width="{max(xb - xa - 1, 0.5):.1f}" height="{ax.sy(0) - y:.1f}" '
            f'fill="{fill}"><title>{esc(_fmt(a))} to {esc(_fmt(b))}: {c} rows</title></rect>'
        )
    if split_at_zero and lo < 0 < hi:
        x = ax.sx(0)
        chart.add(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{MT}" y2="{ax.height - MB}" stroke="#222" stroke-dasharray="3 3"/>'
        )
    return chart.render()


def scatter(
    title: str,
    points: Sequence[tuple[float, float, int, str]],
    *,
    group_names: Sequence[str] = (),
    xlabel: str = "",
    ylabel: str = "",
    group_colors: Sequence[str] | None = None,
    height: int = 380,
) -> str:
    """Points (x, y, group, tooltip), coloured by group."""
    pts = [p for p in points if _finite(p[0]) and _finite(p[1])]
    if not pts:
        return _empty(title, "no data")
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    padx = (max(xs) - min(xs)) * 0.04 or 1.0
    pady = (max(ys) - min(ys)) * 0.04 or 1.0
    ax = Axes(min(xs) - padx, max(xs) + padx, min(ys) - pady, max(ys) + pady, height=height)
    chart = Chart(title, height=height)
    _frame(chart, ax, xlabel, ylabel)
    cols = list(group_colors) if group_colors else PALETTE
    r = 3.5 if len(pts) <= 500 else 2.2
    for x, y, g, tip in pts:
        chart.add(
            f'<circle cx="{ax.sx(x):.1f}" cy="{ax.sy(y):.1f}" r="{r}" fill="{cols[g % len(cols)]}" '
            f'fill-opacity="0.75"><title>{esc(tip)}</title></circle>'
        )
    if group_names:
        _legend(chart, group_names, [cols[i % len(cols)] for i in range(len(group_names))])
    return chart.render()


def _finite(v: object) -> bool:
    return finite_float(v) is not None
