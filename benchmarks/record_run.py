"""Record a timed quality run (its scores file and wall-clock seconds) as a row of the results file.

benchmarks/gpu.sh calls it after the Multi30k recipe, so that the run's BLEU and the minutes it
took, everything included, stand in the results file beside the speed rows:

    python benchmarks/record_run.py multi30k RUN/test-scores.json --seconds 170 --command "..."
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from bench_common import Report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the row's benchmark name in the results file")
    parser.add_argument("scores", type=Path, help="the JSON that `plm eval bleu --json` wrote")
    parser.add_argument("--seconds", type=float, required=True, help="wall-clock seconds, everything included")
    parser.add_argument("--command", required=True, help="what ran")
    args = parser.parse_args()
    scores = json.loads(args.scores.read_text(encoding="utf-8"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    report = Report(args.name, "none: a quality run", settings=vars(args) | {"scores": str(args.scores)},
                    device=device, precision="bf16" if device == "cuda" else "fp32")
    report.add("transformer-small", f"sacreBLEU test_2016_flickr ({scores['sentences']} sentences)", scores["bleu"],
               limit=f"{args.seconds / 60:.2f} minutes everything included")
    report.notes.append(f"{args.command}; chrF {scores['chrf']:.1f}")
    report.finish()


if __name__ == "__main__":
    main()
