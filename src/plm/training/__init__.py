"""Training: the loop, optimizers and schedules, data parallelism, recipes."""

from typing import TYPE_CHECKING

from plm.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from plm.training.pretrain import PretrainSetup
    from plm.training.train_seq2seq import Seq2SeqSetup
    from plm.training.trainer import Trainer, TrainingConfig

# Imported at first use, as plm's own names are (see plm.__init__): the command line imports
# plm.training.distributed alone. The functions pretrain and train_seq2seq are not here: each has the name of
# its module, which `import plm.training.pretrain` makes the package's attribute.
_EXPORTS = {
    "PretrainSetup": "plm.training.pretrain",
    "Seq2SeqSetup": "plm.training.train_seq2seq",
    **dict.fromkeys(("Trainer", "TrainingConfig"), "plm.training.trainer"),
}

__all__ = ["PretrainSetup", "Seq2SeqSetup", "Trainer", "TrainingConfig"]


__getattr__ = lazy_getattr(globals(), _EXPORTS)
