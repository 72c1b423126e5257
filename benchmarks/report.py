"""Turn a benchmark JSON report into markdown (the tables of docs/performance.md).

    python -m benchmarks.report benchmarks/results/20260101-120000.json > tables.md
"""
from __future__ import annotations

import json
import sys

from .common import Table


def to_markdown(report: dict) -> str:
    m = report.get("machine", {})
    out = ["Machine: " + ", ".join(f"{k} {v}" for k, v in m.items()), ""]
    for name, entry in report.get("benchmarks", {}).items():
        out.append(f"### {name}\n")
        if "error" in entry:
            out.append(f"crashed: {entry['error']}\n")
            continue
        for t in entry["tables"]:
            table = Table(t["title"], t["headers"], t["rows"], t["notes"])
            out.append(table.markdown() + "\n")
        if entry.get("targets"):
            out.append("Targets:\n")
            for t in entry["targets"]:
                tag = {True: "PASS", False: "**FAIL**", None: "N/A"}[t["passed"]]
                if t.get("kind") == "info":
                    tag = "INFO"
                out.append(f"- {tag} {t['name']}: {t['detail']}")
            out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        print(to_markdown(json.load(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
