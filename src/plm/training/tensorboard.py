"""Training metrics in TensorBoard (``--report-to tensorboard``): what metrics.jsonl holds, as scalars.

The run's ``tensorboard/`` folder gets one scalar per metric of each logged line (losses, validation scores, the
learning rate, tokens per second, elapsed seconds) at the line's step. A resumed run continues the same curves:
its writer purges, for TensorBoard's readers, what the stopped run logged after the checkpoint it resumes from, as
the trainer drops those lines from metrics.jsonl.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plm.errors import PLMError
from plm.training.run_directory import TENSORBOARD_DIR

REPORTERS = ("none", "tensorboard")  # --report-to's choices


def require_tensorboard() -> Any:
    """The TensorBoard writer class of torch, which needs the tensorboard package (plm's tensorboard extra).

    Returns:
        ``torch.utils.tensorboard.SummaryWriter``.

    Raises:
        PLMError: the package is not installed.
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise PLMError("`report_to` tensorboard needs the tensorboard package: pip install 'plm[tensorboard]'"
                       ) from None
    return SummaryWriter


class TensorBoardLog:
    """Scalars of the run's metrics in ``RUN/tensorboard/`` (``torch.utils.tensorboard``).

    Args:
        run: the run directory.
        resumed_from: the step of the checkpoint a resumed run starts from; None for a new run.

    Raises:
        PLMError: the tensorboard package is not installed.
    """

    def __init__(self, run: Path, resumed_from: int | None) -> None:
        SummaryWriter = require_tensorboard()
        # purge_step: TensorBoard hides what this folder holds from that step on, written before this session
        self.writer = SummaryWriter(str(run / TENSORBOARD_DIR),
                                    purge_step=None if resumed_from is None else resumed_from + 1)

    def write(self, metrics: dict[str, Any]) -> None:
        """Add one logged line's metrics at its step, and flush them to disk (a killed run keeps them).

        Args:
            metrics: a metrics.jsonl line: ``step`` and the metrics' values.
        """
        step = int(metrics["step"])
        for name, value in metrics.items():
            if name != "step" and isinstance(value, (int, float)):
                self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()
