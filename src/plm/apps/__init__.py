"""Applications on a model and its tokenizer.

Text generation, fill-mask and embeddings, perplexity, translation and its scores, attention maps,
train/test overlap, zero-shot tasks, and side-by-side runs.
"""
