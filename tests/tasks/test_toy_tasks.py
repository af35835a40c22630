"""Every task head learns its built-in toy task (plm.tasks.synthetic) from a fresh model in seconds.

These are the end-to-end checks of the heads: a label put on the wrong piece, a span
read from the wrong window, choices scored against the wrong label or a loss that
ignores the head leaves the score at chance, far below each bar here.
"""

from __future__ import annotations

import pytest

from plm.tasks.finetune import FinetuneData, FinetuneSetup, finetune

# task -> (the dev metric, chance level, the bar a correct implementation clears, extra settings).
# The bars are well under what a run reaches (see docs/finetuning.md, the built-in toy tasks) and far above chance.
TOY_TASKS = {
    "classify": ("val_accuracy", 0.5, 0.95, {}),
    "pair": ("val_accuracy", 0.5, 0.95, {}),
    "regress": ("val_pearson", 0.0, 0.7, {}),
    "tag": ("val_f1", 0.0, 0.85, {}),
    # windows of 5 context tokens, 3 apart: most answers lie in a later window, some in two
    "qa": ("val_exact_match", 0.25, 0.7, {"max_length": 14, "stride": 3}),  # FinetuneData fields
    "choice": ("val_accuracy", 0.25, 0.6, {}),
}


@pytest.mark.parametrize("task", TOY_TASKS)
def test_each_head_learns_its_toy_task(task, tmp_path, one_thread):
    metric, chance, bar, settings = TOY_TASKS[task]
    # the bars were set from fp32 runs on the CPU; on a GPU, bf16 autocast lands elsewhere
    setup = FinetuneSetup(task=task, model=None, progress=False, device="cpu", data=FinetuneData(**settings))

    result = finetune(setup, tmp_path / "run")

    assert result.best[metric] >= bar > chance, f"{task}: {metric} {result.best[metric]:.3f}, chance {chance}"
