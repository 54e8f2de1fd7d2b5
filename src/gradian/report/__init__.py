"""The report: clusters of training rows in gradient space joined with diagnose's findings and the verdict
(:mod:`gradian.verdict`), rendered as report.html (inline SVG plots, no JavaScript), report.md and report.json.

API: ``build_report(...)`` -> :class:`Report` (report.json is its ``to_dict()``, read back with ``Report.from_dict``);
``render_all(report, out_dir)`` writes the files;
``save_report_inputs(...)`` saves what ``gradian report OUT_DIR`` needs to re-render (see ``gradian.report.cli``).
"""

from __future__ import annotations

_WHERE = {
    "build_report": "build",
    "rerender": "cli",
    "save_report_inputs": "cli",
    "Clustering": "clusters",
    "fit_clusters": "clusters",
    "summarize_clusters": "clusters",
    "md_escape": "render",
    "render_all": "render",
    "render_html": "render",
    "render_markdown": "render",
    "Report": "schema",
}


def __getattr__(name: str):  # lazy: `gradian --help` must not pay for numpy
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"gradian.report.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'gradian.report' has no attribute {name!r}")


__all__ = [
    "Clustering",
    "Report",
    "build_report",
    "fit_clusters",
    "md_escape",
    "render_all",
    "render_html",
    "render_markdown",
    "rerender",
    "save_report_inputs",
    "summarize_clusters",
]
