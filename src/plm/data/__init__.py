"""Data: the text to train on (:mod:`plm.data.corpus`) and its token ids (:mod:`plm.data.tokens`)."""

from plm.data.corpus import Corpus, Document, default_corpus, read_corpus, read_text
from plm.data.tokens import BlockSampler, cached_token_ids, encode_documents, validation_blocks

__all__ = [
    "BlockSampler",
    "Corpus",
    "Document",
    "cached_token_ids",
    "default_corpus",
    "encode_documents",
    "read_corpus",
    "read_text",
    "validation_blocks",
]
