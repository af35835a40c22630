"""plm's models in llama.cpp: GGUF files written with the ``gguf`` package, llama.cpp's own writer.

[`write_gguf`][plm.llama_cpp.gguf_export.write_gguf] writes a GPT-2-layout model with its byte-level BPE tokenizer
as one file that llama.cpp, and the tools built on it, load. The ``gguf`` package is an extra
(``pip install 'plm[gguf]'``).
"""

from plm.llama_cpp.gguf_export import GGUF_TYPES, write_gguf

__all__ = ["GGUF_TYPES", "write_gguf"]
