"""Training: the loop, optimizers and schedules, data parallelism, recipes."""

from typing import TYPE_CHECKING

from plm.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from plm.training.pretrain import PretrainSetup, pretrain
    from plm.training.train_seq2seq import Seq2SeqSetup, train_seq2seq
    from plm.training.trainer import Trainer, TrainingConfig

# Imported at first use, as plm's own names are (see plm.__init__): the command line imports
# plm.training.distributed alone.
_EXPORTS = {
    **dict.fromkeys(("PretrainSetup", "pretrain"), "plm.training.pretrain"),
    **dict.fromkeys(("Seq2SeqSetup", "train_seq2seq"), "plm.training.train_seq2seq"),
    **dict.fromkeys(("Trainer", "TrainingConfig"), "plm.training.trainer"),
}

__all__ = ["PretrainSetup", "Seq2SeqSetup", "Trainer", "TrainingConfig", "pretrain", "train_seq2seq"]


__getattr__ = lazy_getattr(globals(), _EXPORTS)
