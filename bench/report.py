"""Recording results: ``bench/results.json`` (one entry per benchmark) rendered as RESULTS.md.

A run records only the benchmarks it ran; the others keep their last recorded figures, each row
saying when and at what scale it was measured.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
from pathlib import Path
from typing import Any

from bench.harness import Result

HERE = Path(__file__).resolve().parent
JSON_PATH = HERE / "results.json"
MD_PATH = HERE / "RESULTS.md"
ANALYSIS_PATH = HERE / "ANALYSIS.md"  # hand-written notes appended to RESULTS.md


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), {platform.system()} {platform.machine()}"


def rerender() -> None:
    """Rewrite RESULTS.md from results.json (e.g. after editing ANALYSIS.md)."""
    MD_PATH.write_text(render(json.loads(JSON_PATH.read_text())))


def record(results: list[Result], run: dict[str, Any]) -> None:
    entries = json.loads(JSON_PATH.read_text()) if JSON_PATH.exists() else {}
    for r in results:
        entries[r.name] = {"result": dataclasses.asdict(r), "run": run}
    JSON_PATH.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")
    MD_PATH.write_text(render(entries))


def _ratio(value: float | None) -> str:
    return f"{value:.2f}x" if value else "n/a"


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def render(entries: dict[str, Any]) -> str:
    lines = [
        "# Benchmark results",
        "",
        "Written by `scripts/bench.sh` (`python -m bench`); do not edit by hand. Each benchmark",
        "measures changelake and its baseline in the same process, alternating repetitions, after an",
        "untimed warm-up. Times are medians. `scale` shrinks row counts (1.0 = the sizes in the",
        "issues); only scale 1.0 figures count against the targets. `met?` judges the wall-time",
        "ratio; `CPU ratio` is the same ratio over CPU seconds (Spark JVM + Python), which stays",
        "steady when other processes share the machine.",
        "",
        "| benchmark | changelake | baseline | ratio | target | met? | CPU ratio | rows | scale"
        " | date |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in entries.items():
        r, run = entry["result"], entry["run"]
        lines.append(
            f"| {name} | {_seconds(r['changelake_s'])} | {_seconds(r['baseline_s'])}"
            f" | {r['ratio']:.2f}x ({r['ratio_meaning']}) | {r['target']}"
            f" | {'yes' if r['met'] else '**no**'}"
            f" | {_ratio(r.get('cpu_ratio'))}"
            f" | {r['rows']:,} | {run['scale']:g}"
            f" | {run['date']} |"
        )
    lines += ["", "## Details", ""]
    for name, entry in entries.items():
        r, run = entry["result"], entry["run"]
        lines += [
            f"### {name}",
            "",
            f"- what: {r['description']}",
            f"- baseline: {r['baseline']}",
            f"- notes: {r['notes']}" if r["notes"] else "- notes: none",
            f"- machine: {run['machine']}; Spark {run['spark']} with master {run['master']};"
            f" Python {run['python']}",
            f"- load average (1 min) before / after the run: {run['load_before']:.2f} /"
            f" {run['load_after']:.2f}. {run['load_note']}",
            "",
        ]
    if ANALYSIS_PATH.exists():
        lines += [ANALYSIS_PATH.read_text().rstrip(), ""]
    return "\n".join(lines)
