"""Data: the text to train on, its token ids, and the batches read from them.

The text comes from [`plm.data.corpus`][plm.data.corpus] and [`plm.data.sources`][plm.data.sources]; it is prepared once
into memory-mapped token ids ([`plm.data.prepare`][plm.data.prepare], [`plm.data.prepared`][plm.data.prepared]), which
[`plm.data.tokens`][plm.data.tokens] draws batches from.
"""

from typing import TYPE_CHECKING

from plm.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from plm.data.corpus import Corpus, Document, default_corpus, read_corpus, read_text
    from plm.data.prepare import PrepareOptions, join_prepared, prepare_corpus, prepare_pairs
    from plm.data.prepared import PreparedCorpus, PreparedPairs, PreparedSplit
    from plm.data.sentence_pairs import ParallelText, Seq2SeqTokenizers
    from plm.data.tokens import BlockSampler, validation_blocks

# Imported at first use, as plm's own names are (see plm.__init__): a prepare's worker imports
# plm.data.encoded alone.
_EXPORTS = {
    **dict.fromkeys(("Corpus", "Document", "default_corpus", "read_corpus", "read_text"), "plm.data.corpus"),
    **dict.fromkeys(("PrepareOptions", "join_prepared", "prepare_corpus", "prepare_pairs"), "plm.data.prepare"),
    **dict.fromkeys(("PreparedCorpus", "PreparedPairs", "PreparedSplit"), "plm.data.prepared"),
    **dict.fromkeys(("ParallelText", "Seq2SeqTokenizers"), "plm.data.sentence_pairs"),
    **dict.fromkeys(("BlockSampler", "validation_blocks"), "plm.data.tokens"),
}

__all__ = [
    "BlockSampler",
    "Corpus",
    "Document",
    "ParallelText",
    "PrepareOptions",
    "PreparedCorpus",
    "PreparedPairs",
    "PreparedSplit",
    "Seq2SeqTokenizers",
    "default_corpus",
    "join_prepared",
    "prepare_corpus",
    "prepare_pairs",
    "read_corpus",
    "read_text",
    "validation_blocks",
]


__getattr__ = lazy_getattr(globals(), _EXPORTS)
