"""Objectives by name: what each needs of the model, and how it is built from a run's data.

The pre-training recipe looks an objective up here by the name a user gives
(``clm``, ``mlm``, ``mlm+nsp``, ``mlm+sop``, ``bilm``) and knows nothing of its kind: the spec
says which pre-training heads the model must have, whether it takes masking
options, and builds the objective from [`ObjectiveData`][plm.objectives.builders.ObjectiveData].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from plm.data.prepared import PreparedCorpus
from plm.errors import PLMError
from plm.objectives.base import Objective
from plm.objectives.bilm import BiLMObjective, word_streams
from plm.objectives.clm import CausalLMObjective
from plm.objectives.masking import MASK_RATIOS
from plm.objectives.mlm import MaskedLMObjective

if TYPE_CHECKING:
    from plm.tokenization.tokenizer import Tokenizer


@dataclass(frozen=True)
class ObjectiveData:
    """Everything a builder may read: the text, the tokenizer and the batch shape.

    Attributes:
        prepared: the training and validation documents, tokenized.
        tokenizer: the model's tokenizer.
        block_size: the tokens (words, for the biLM) a model reads per sequence.
        batch_size: sequences per micro-batch.
        seed: the seed of the batches.
        validation_blocks: the most validation sequences: masked-LM examples, biLM blocks (a causal LM scores every
            token of its validation text).
        validation_sample_tokens: a causal LM's evaluations before the last score only about this many validation
            tokens, where the text has more (None: all of it every time); the last evaluation scores all of it.
        whole_word: mask whole words (masked LMs).
        max_ngram: the longest masked span, in words (masked LMs).
        mask_ratios: the shares of the selected tokens that become [MASK], a random token, or stay (masked LMs).
    """

    prepared: PreparedCorpus
    tokenizer: Tokenizer
    block_size: int
    batch_size: int
    seed: int
    validation_blocks: int
    whole_word: bool = False
    max_ngram: int = 1
    mask_ratios: tuple[float, float, float] = MASK_RATIOS
    validation_sample_tokens: int | None = None


@dataclass(frozen=True)
class ObjectiveSpec:
    """An objective's needs: the heads it trains, whether it masks, and its builder.

    Attributes:
        heads: the pre-training heads the model must have.
        masks_words: the objective takes masking options (``whole_word``, ``max_ngram``, ``mask_ratios``).
        build: makes the objective from a run's data.
        parallel_text: trains on sentence pairs (plm seq2seq train), not on a corpus.
    """

    heads: tuple[str, ...]
    masks_words: bool
    build: Callable[[ObjectiveData], Objective]
    parallel_text: bool = False  # trains on sentence pairs (plm seq2seq train), not on a corpus


def causal_lm(data: ObjectiveData) -> CausalLMObjective:
    """The causal LM objective on the prepared corpus' token ids, documents separated by eos.

    Args:
        data: the run's data.

    Returns:
        The objective.

    Raises:
        PLMError: a text too short for one block.
    """
    prepared = data.prepared
    return CausalLMObjective(prepared.train.tokens, prepared.validation.tokens, data.block_size, data.batch_size,
                             data.seed, data.tokenizer.start_id, data.validation_sample_tokens)


def masked_lm(pair_task: str) -> Callable[[ObjectiveData], MaskedLMObjective]:
    """The builder of the masked LM objective with pair task ``pair_task``.

    Args:
        pair_task: none, nsp or sop.

    Returns:
        A builder that makes the objective from a run's data (validation: ``validation_blocks // batch_size``
        batches, at least one).
    """
    def build(data: ObjectiveData) -> MaskedLMObjective:
        prepared = data.prepared
        return MaskedLMObjective(
            prepared.train,
            prepared.validation,
            data.tokenizer,
            max_length=data.block_size,
            batch_size=data.batch_size,
            pair_task=pair_task,
            whole_word=data.whole_word,
            max_ngram=data.max_ngram,
            mask_ratios=data.mask_ratios,
            seed=data.seed,
            validation_batches_max=max(1, data.validation_blocks // data.batch_size),
        )

    return build


def bidirectional_lm(data: ObjectiveData) -> BiLMObjective:
    """The biLM objective on the words of a corpus prepared with a word vocabulary.

    Args:
        data: the run's data.

    Returns:
        The objective.

    Raises:
        PLMError: a corpus prepared with a tokenizer that is not a word vocabulary, or a text too short for
            one block.
    """
    streams = word_streams(data.prepared, data.tokenizer)
    return BiLMObjective(streams, data.block_size, data.batch_size, data.seed, data.validation_blocks)


def needs_parallel_text(data: ObjectiveData) -> Objective:
    """Refuse to build the seq2seq objective from a corpus: it trains on sentence pairs.

    Args:
        data: the run's data.

    Raises:
        PLMError: always.
    """
    raise PLMError("the seq2seq objective trains on sentence pairs, not on a corpus: use plm seq2seq train")


OBJECTIVES: dict[str, ObjectiveSpec] = {
    "clm": ObjectiveSpec(heads=(), masks_words=False, build=causal_lm),
    "mlm": ObjectiveSpec(heads=("mlm",), masks_words=True, build=masked_lm("none")),
    "mlm+nsp": ObjectiveSpec(heads=("mlm", "nsp"), masks_words=True, build=masked_lm("nsp")),
    "mlm+sop": ObjectiveSpec(heads=("mlm", "sop"), masks_words=True, build=masked_lm("sop")),
    "bilm": ObjectiveSpec(heads=(), masks_words=False, build=bidirectional_lm),
    "seq2seq": ObjectiveSpec(heads=(), masks_words=False, build=needs_parallel_text, parallel_text=True),
}


def objective_spec(name: str) -> ObjectiveSpec:
    """The spec of objective ``name``.

    Args:
        name: a key of `OBJECTIVES`.

    Returns:
        The spec.

    Raises:
        PLMError: an unknown objective.
    """
    if name not in OBJECTIVES:
        raise PLMError(f"unknown objective {name!r}; choose one of {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]
