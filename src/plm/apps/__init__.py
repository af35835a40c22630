"""Applications on a model and its tokenizer.

Text generation, fill-mask and embeddings, perplexity, translation and its scores, attention maps,
train/test overlap, zero-shot tasks, and side-by-side runs.
"""

from typing import TYPE_CHECKING

from plm.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from plm.apps.text_pipelines import embed_texts, file_perplexity, fill_mask, generate_text
    from plm.apps.translation import load_seq2seq
    from plm.objectives.translation import translate

# Imported at first use, as plm's own names are (see plm.__init__). The function perplexity is not here: it has
# the name of its module, which `import plm.apps.perplexity` makes the package's attribute.
_EXPORTS = {
    **dict.fromkeys(("embed_texts", "file_perplexity", "fill_mask", "generate_text"), "plm.apps.text_pipelines"),
    "load_seq2seq": "plm.apps.translation",
    "translate": "plm.objectives.translation",
}

__all__ = ["embed_texts", "file_perplexity", "fill_mask", "generate_text", "load_seq2seq", "translate"]


__getattr__ = lazy_getattr(globals(), _EXPORTS)
