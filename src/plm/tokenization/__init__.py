"""Tokenizers, and the inputs of ELMo.

Byte-level BPE, WordPiece and Unigram through Hugging Face ``tokenizers`` with plm's special-token roles,
the tokenizers of released translation models (Marian's SentencePiece, fairseq's Moses and BPE), the word
vocabulary of ELMo's softmax, and the characters its char-CNN reads.
"""
