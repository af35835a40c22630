"""Zero-shot evaluation of a causal LM as in GPT-2 (§3).

Detokenisers, LAMBADA, cloze (CBT, Winograd), summarisation, CoQA, translation and open-domain
question answering.

Each task reads its benchmark's file (JSONL or JSON through [`plm.apps.zeroshot.jsonl`][plm.apps.zeroshot.jsonl],
aligned text files for translation) and scores any [`CausalLM`][plm.models.base.CausalLM] with its tokenizer, plm's own
or one loaded from Hugging Face. The tasks that read the model's answer share
[`plm.apps.zeroshot.prompting`][plm.apps.zeroshot.prompting].
"""
