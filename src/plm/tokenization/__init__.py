"""Tokenizers, and the inputs of ELMo.

Byte-level BPE, WordPiece and Unigram through Hugging Face ``tokenizers`` with plm's special-token roles,
the tokenizers of released translation models (Marian's SentencePiece, fairseq's Moses and BPE), the word
vocabulary of ELMo's softmax, and the characters its char-CNN reads. What every tokenizer of either kind does
is [`TokenizerLike`][plm.tokenization.protocol.TokenizerLike].
"""

from typing import TYPE_CHECKING

from plm.lazy_exports import lazy_getattr
from plm.tokenization.protocol import TokenizerLike

if TYPE_CHECKING:
    from plm.tokenization.tokenizer import Tokenizer

__all__ = ["Tokenizer", "TokenizerLike"]


# Tokenizer is imported at its first use, as plm's own names are (see plm.__init__).
__getattr__ = lazy_getattr(globals(), {"Tokenizer": "plm.tokenization.tokenizer"})
