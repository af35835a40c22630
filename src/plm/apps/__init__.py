"""Applications on a model and its tokenizer.

Text generation, fill-mask and embeddings, perplexity, translation and its scores, attention maps,
train/test overlap, zero-shot tasks, and side-by-side runs.
"""

from typing import TYPE_CHECKING

from plm.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from plm.apps.perplexity import perplexity
    from plm.apps.text_pipelines import embed_texts, file_perplexity, fill_mask, generate_text
    from plm.apps.translation import load_seq2seq
    from plm.objectives.translation import translate

# Imported at first use, as plm's own names are (see plm.__init__).
_EXPORTS = {
    "perplexity": "plm.apps.perplexity",
    **dict.fromkeys(("embed_texts", "file_perplexity", "fill_mask", "generate_text"), "plm.apps.text_pipelines"),
    "load_seq2seq": "plm.apps.translation",
    "translate": "plm.objectives.translation",
}

__all__ = ["embed_texts", "file_perplexity", "fill_mask", "generate_text", "load_seq2seq", "perplexity", "translate"]


__getattr__ = lazy_getattr(globals(), _EXPORTS)
