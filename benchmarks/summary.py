"""One table of every benchmark's figures, from ``benchmarks/results.json`` (``make bench`` writes it, then runs this).

Each benchmark replaces its own section of the file when it runs, so the table can mix
runs: the date and machine of each are printed with it. The ratio is plm's figure over
its peer's (above 1: plm is faster; for a memory row, "lower is better", below 1: plm
needs less), and the limit column sets the figure against the machine's measured
matmul peak (MFU) or memory bandwidth (decoding).

    python benchmarks/summary.py                 # a markdown table, as docs/speed.md shows it
    python benchmarks/summary.py --results FILE
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_common import RESULTS, figure


def machine_line(machine: dict) -> str:
    isa = f", {machine['isa']}" if "isa" in machine else ""  # recorded since the bf16 rows
    precision = machine.get("matmul_peak_precision", "fp32")
    return (f"{machine['cpu']}{isa} ({machine['device']}, {machine['cores']} cores, {machine['threads']} threads): "
            f"{machine['memory_bandwidth_gb_s']} GB/s, {machine['matmul_peak_gflop_s']} GFLOP/s {precision} matmul")


def table(results: dict) -> str:
    lines = [
        "| benchmark | config | measure | precision | plm | peer | plm / peer | limit |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for name, section in results["benchmarks"].items():
        for row in section["rows"]:
            peer = figure(row["peer"]) if row["peer"] is not None else ""
            ratio = f"{row['ratio']:.2f}x" if row["ratio"] is not None else ""
            precision = row.get("precision", "fp32")  # rows from before precisions were recorded are fp32
            lines.append(f"| {name} | {row['config']} | {row['measure']} | {precision} | {figure(row['plm'])} | {peer} "
                         f"| {ratio} | {row['limit']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results file the benchmarks wrote")
    args = parser.parse_args()
    if not args.results.is_file():
        parser.exit(2, f"summary: no {args.results}: run make bench (or one of benchmarks/bench_*.py) first\n")
    results = json.loads(args.results.read_text())
    versions = ", ".join(f"{package} {version}" for package, version in results["versions"].items() if version)
    print(table(results))
    print()
    for name, section in results["benchmarks"].items():
        print(f"- {name}: {section['date']}, against {section['peer']}; {machine_line(section['machine'])}")
    print(f"- versions: {versions}")


if __name__ == "__main__":
    main()
