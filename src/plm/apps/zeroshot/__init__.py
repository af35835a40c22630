"""Zero-shot evaluation of a causal LM as in GPT-2 (§3): detokenisers, LAMBADA, cloze, summarisation.

Each task reads a JSONL file (:mod:`plm.apps.zeroshot.jsonl`) and scores any
:class:`plm.models.CausalLM` with its tokenizer, plm's own or one loaded from Hugging Face.
"""
