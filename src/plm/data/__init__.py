"""Data: the text to train on, its token ids, and the batches read from them.

The text comes from :mod:`plm.data.corpus` and :mod:`plm.data.sources`; it is prepared once into memory-mapped
token ids (:mod:`plm.data.prepare`, :mod:`plm.data.prepared`), which :mod:`plm.data.tokens` draws batches from.
"""

from plm.data.corpus import Corpus, Document, default_corpus, read_corpus, read_text
from plm.data.prepare import PrepareOptions, join_prepared, prepare_corpus, prepare_pairs
from plm.data.prepared import PreparedCorpus, PreparedPairs, PreparedSplit
from plm.data.tokens import BlockSampler, validation_blocks

__all__ = [
    "BlockSampler",
    "Corpus",
    "Document",
    "PrepareOptions",
    "PreparedCorpus",
    "PreparedPairs",
    "PreparedSplit",
    "default_corpus",
    "join_prepared",
    "prepare_corpus",
    "prepare_pairs",
    "read_corpus",
    "read_text",
    "validation_blocks",
]
