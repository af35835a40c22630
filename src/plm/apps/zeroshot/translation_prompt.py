r"""Translation by prompting (GPT-2 §3.7): example pairs ``source = target``, then ``source =``; greedy decoding.

The paper conditions the model "on a context of example pairs of the format english
sentence = french sentence and then after a final prompt of english sentence =" decodes
greedily and takes "the first generated sentence as the translation". With K examples::

    {example source 1} = {example target 1}\n ... {example source K} = {example target K}\n{source} =

The direction is the files': English sources and French references translate en→fr,
the other way round fr→en. The examples are the first K lines of a pair of example
files, or of the evaluated files themselves, whose first K lines are then not scored.
Greedy decoding runs until a new line, and the first sentence of what the model wrote
is its translation. sacreBLEU's corpus BLEU and chrF compare the translations with
the references ([`score_translations`][plm.objectives.translation.score_translations]). A prompt too long for
the model loses its first examples, never the sentence to translate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from plm.apps.zeroshot.evaluation import ZeroShotOptions, ZeroShotResult
from plm.apps.zeroshot.prompting import Prompt, greedy_answers, split_examples
from plm.apps.zeroshot.summarize import first_sentences
from plm.data.sentence_pairs import SentencePair, read_parallel
from plm.errors import PLMError
from plm.objectives.translation import score_translations

SEPARATOR = " = "


@dataclass(frozen=True)
class TranslationPromptResult(ZeroShotResult):
    """The BLEU of the model's translations, and the translations.

    Attributes:
        bleu: sacreBLEU's corpus BLEU, 0-100.
        chrf: sacreBLEU's corpus chrF, 0-100.
        exact_match: the fraction of translations equal to their reference, in [0, 1].
        sentences: the sentences translated.
        shots: the example pairs in each prompt.
        prompts_cut: the prompts that lost their first examples to fit the model.
        translations: the translation of each sentence, in file order.
    """

    bleu: float
    chrf: float
    exact_match: float
    sentences: int
    shots: int
    prompts_cut: int
    translations: list[str]

    per_item = ("translations",)


def translation_prompts(
    examples: Sequence[SentencePair], sources: Sequence[str], source_path: str, first_line: int = 1
) -> list[Prompt]:
    """The prompt of each sentence: the example pairs, one ``source = target`` a line, then ``source =``.

    Args:
        examples: the example pairs.
        sources: the sentences to translate.
        source_path: their file, for messages.
        first_line: the line of the file the first sentence is on.

    Returns:
        One prompt per sentence.
    """
    context = "".join(f"{pair.source}{SEPARATOR}{pair.target}\n" for pair in examples)
    return [Prompt(context, source + SEPARATOR.rstrip(), f"{source_path}:{line}")
            for line, source in enumerate(sources, start=first_line)]


def evaluate_translation_prompt(
    options: ZeroShotOptions,
    src: str | Path,
    ref: str | Path,
    shots: int = 5,
    examples_src: str | Path | None = None,
    examples_ref: str | Path | None = None,
    max_new_tokens: int = 64,
) -> TranslationPromptResult:
    """Corpus BLEU of the model's greedy translations of ``src`` against ``ref``.

    Args:
        options: the model, its tokenizer and how to run them; the limit counts the sentences after the examples.
        src: the sentences to translate, one a line.
        ref: their references, line for line.
        shots: the example pairs in each prompt.
        examples_src: a file of example sentences (None: the first lines of ``src``, then not scored).
        examples_ref: their translations, line for line; given together with ``examples_src``.
        max_new_tokens: the most tokens of a translation.

    Returns:
        The result.

    Raises:
        PLMError: only one of the example files, files
            [`read_parallel`][plm.data.sentence_pairs.read_parallel] refuses, too few examples or sentences, or a
            sentence that does not fit the model.
    """
    if (examples_src is None) != (examples_ref is None):
        raise PLMError("give both example files (the sentences and their translations), or neither")
    given = None
    if examples_src is not None and examples_ref is not None:
        given = read_parallel(examples_src, examples_ref)
    examples, pairs = split_examples(read_parallel(src, ref), shots, given, str(examples_src or src))
    pairs = pairs[: options.limit]
    first_line = 1 + (shots if given is None else 0)
    prompts = translation_prompts(examples, [pair.source for pair in pairs], str(src), first_line)
    answers = greedy_answers(options.model, options.tokenizer, prompts, max_new_tokens, options.batch_size,
                             options.progress, desc="translate")
    translations = [first_sentences(answer.text, 1) for answer in answers]
    scores = score_translations(translations, [[pair.target for pair in pairs]])
    return TranslationPromptResult(
        bleu=scores.bleu,
        chrf=scores.chrf,
        exact_match=scores.exact_match,
        sentences=scores.sentences,
        shots=shots,
        prompts_cut=sum(answer.cut for answer in answers),
        translations=translations,
    )
