"""Zero-shot evaluation of a causal LM as in GPT-2 (§3).

Detokenisers, LAMBADA, cloze (CBT, Winograd), summarisation, CoQA, translation and open-domain
question answering.

Each task reads its benchmark's file (JSONL through [`json_rows`][plm.data.corpus.json_rows], JSON through
[`json_document`][plm.data.corpus.json_document], aligned text files for translation) and scores any
[`CausalLM`][plm.models.base.CausalLM] with its tokenizer, plm's own or one loaded from Hugging Face. Each
``evaluate_*`` function takes the model, its tokenizer and how to run them as one
[`ZeroShotOptions`][plm.apps.zeroshot.evaluation.ZeroShotOptions], its task's parameters beside it, and returns a
[`ZeroShotResult`][plm.apps.zeroshot.evaluation.ZeroShotResult]. The tasks that read the model's answer share
[`plm.apps.zeroshot.prompting`][plm.apps.zeroshot.prompting].
"""

from typing import TYPE_CHECKING

from plm.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from plm.apps.zeroshot.cloze import evaluate_cloze
    from plm.apps.zeroshot.coqa import evaluate_coqa
    from plm.apps.zeroshot.evaluation import ZeroShotOptions, ZeroShotResult
    from plm.apps.zeroshot.lambada import evaluate_lambada
    from plm.apps.zeroshot.open_qa import evaluate_open_qa
    from plm.apps.zeroshot.summarize import evaluate_summaries
    from plm.apps.zeroshot.translation_prompt import evaluate_translation_prompt

# Imported at first use, as plm's own names are (see plm.__init__): each `plm eval` command imports its task's
# module alone.
_EXPORTS = {
    "evaluate_cloze": "plm.apps.zeroshot.cloze",
    "evaluate_coqa": "plm.apps.zeroshot.coqa",
    **dict.fromkeys(("ZeroShotOptions", "ZeroShotResult"), "plm.apps.zeroshot.evaluation"),
    "evaluate_lambada": "plm.apps.zeroshot.lambada",
    "evaluate_open_qa": "plm.apps.zeroshot.open_qa",
    "evaluate_summaries": "plm.apps.zeroshot.summarize",
    "evaluate_translation_prompt": "plm.apps.zeroshot.translation_prompt",
}

__all__ = [
    "ZeroShotOptions",
    "ZeroShotResult",
    "evaluate_cloze",
    "evaluate_coqa",
    "evaluate_lambada",
    "evaluate_open_qa",
    "evaluate_summaries",
    "evaluate_translation_prompt",
]


__getattr__ = lazy_getattr(globals(), _EXPORTS)
