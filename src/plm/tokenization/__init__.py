"""Tokenizers, and the inputs of ELMo.

Byte-level BPE, WordPiece and Unigram through Hugging Face ``tokenizers`` with plm's special-token roles,
the word vocabulary of ELMo's softmax, and the characters its char-CNN reads.
"""
