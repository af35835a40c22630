"""The quality suite: plm's default recipe against an independent reference, for every family (``make quality``).

    python benchmarks/quality/run.py                                # every group, full budget
    python benchmarks/quality/run.py --groups seq2seq --scale 0.1   # one group, a tenth of the steps

Each group (``seq2seq.py``, ``pretrain.py``, ``finetune.py``) is a module with
``run(settings) -> list[Row]`` that can also be run alone. The results of all the rows
run go to ``--out``: ``results.md``, ``results.json`` and one plot of the curves per row.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, report, settings_from, settings_parser  # noqa: E402

GROUPS = ("seq2seq", "pretrain", "finetune")


def main() -> None:
    parser = settings_parser(__doc__.splitlines()[0])
    parser.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated, from {', '.join(GROUPS)}")
    args = parser.parse_args()
    settings = settings_from(args)
    rows: list[Row] = []
    for group in args.groups.split(","):
        rows += importlib.import_module(group).run(settings)
    report(rows, settings.out, args)


if __name__ == "__main__":
    main()
