"""Write a copy of a JSONL/JSON data file without the given rows (the fix for row-level findings).

    python -m gradian.diagnose.droprows train.jsonl --rows 3,17,42 -o train.clean.jsonl
    python -m gradian.diagnose.droprows train.jsonl --findings findings.json --select D107,D104 -o train.clean.jsonl

Row numbers are the 0-based data-row indices that `gradian diagnose` reports (blank lines are not rows).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def rows_from_findings(path: Path, select: list[str]) -> set[int]:
    data = json.loads(path.read_text(encoding="utf-8"))
    items = data["findings"] if isinstance(data, dict) else data
    out: set[int] = set()
    for f in items:
        if select and f["code"] not in select and f["name"] not in select:
            continue
        out.update(int(i) for i in (f.get("evidence") or {}).get("rows") or [])
    return out


def drop_rows(src: Path, dst: Path, rows: set[int]) -> int:
    text = src.read_text(encoding="utf-8")
    if src.suffix == ".json":
        data = json.loads(text)
        kept = [r for i, r in enumerate(data) if i not in rows]
        dst.write_text(json.dumps(kept, ensure_ascii=False, indent=1), encoding="utf-8")
        return len(data) - len(kept)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    kept = [ln for i, ln in enumerate(lines) if i not in rows]
    dst.write_text("\n".join(kept) + ("\n" if kept else ""), encoding="utf-8")
    return len(lines) - len(kept)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gradian.diagnose.droprows", description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--rows", default="", help="comma-separated 0-based row indices")
    ap.add_argument("--findings", type=Path, help="a `gradian diagnose --format json` output")
    ap.add_argument("--select", default="", help="codes or names to take rows from (default: all)")
    ap.add_argument("-o", "--out", type=Path, required=True)
    a = ap.parse_args(argv)
    rows = {int(x) for x in a.rows.split(",") if x.strip()}
    if a.findings:
        rows |= rows_from_findings(a.findings, [s.strip() for s in a.select.split(",") if s.strip()])
    n = drop_rows(a.file, a.out, rows)
    print(f"wrote {a.out}: dropped {n} row(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
