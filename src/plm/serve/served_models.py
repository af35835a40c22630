"""The models a server holds: each one's kind, the endpoints it serves and the work each endpoint does.

A model's kind follows from its class, as everywhere in plm: a [`CausalLM`][plm.models.base.CausalLM] generates,
an [`Encoder`][plm.models.encoder.Encoder] embeds sentences (and fills masks when it kept its masked-LM head), a
[`Seq2SeqModel`][plm.models.base.Seq2SeqModel] translates, ELMo embeds, a fine-tuned task model classifies, and any of
them built on attention layers shows its attention. Each kind is a [`Service`][plm.serve.served_models.Service] whose
methods are its endpoints, named as they are; they are the library's own functions (the
ones behind ``plm generate``, ``fill-mask``, ``embed``, ``translate``, ``predict`` and
``attention``) with JSON in and out, and they run on the server's model thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from plm.apps.attention_map import AttentionMap, decoder_attention, pair_attention, self_attention
from plm.apps.text_pipelines import DEFAULT_NEW_TOKENS, embed_texts, encode_prompts, fill_mask
from plm.apps.translation import seq2seq_tokenizers
from plm.core import MultiHeadAttention
from plm.data.sentence_pairs import Seq2SeqTokenizers
from plm.decoding.generation_config import GenerationConfig
from plm.device import resolve_device
from plm.errors import PLMError
from plm.loading import inference_weights, opened, tokenizer_beside
from plm.models import CausalLM, Encoder, PretrainedModel, Seq2SeqModel
from plm.models.elmo import Elmo, embed_sentences
from plm.objectives.translation import recipe_decoding, translate_ids
from plm.serve.batching import GenerationJob
from plm.serve.requests import RequestError
from plm.tasks.feature_based import FeatureTagger
from plm.tasks.fine_tuned import model_task
from plm.tasks.model import TaskModel
from plm.tasks.readers import ChoiceExample, QAExample, TaggedSentence, TextExample
from plm.tasks.task_objective import QuestionAnswering, Task, encode_all, model_outputs
from plm.tokenization.characters import split_words
from plm.tokenization.protocol import TokenizerLike
from plm.tokenization.tokenizer import Tokenizer

# Each endpoint, and what a model needs to serve it (said when a request asks a model that cannot).
ENDPOINTS = {
    "generate": "a causal LM (GPT-1, GPT-2)",
    "fill-mask": "an encoder with its masked-LM head (BERT, ALBERT, DeBERTa pre-trained with MLM)",
    "embed": "an encoder (BERT, ALBERT, DeBERTa) or ELMo",
    "translate": "an encoder-decoder (the Transformer, an RNN, a released Marian or FSMT model)",
    "classify": "a fine-tuned task model (plm finetune)",
    "attention": "attention layers (a GPT, an encoder, a Transformer, an RNN with attention, a task model on them)",
}


class Service:
    """One loaded model as the server offers it: its name, its kind, the endpoints it serves.

    Args:
        name: the model's name in the API.
        model: the model.
        tokenizer: its tokenizer (an encoder-decoder's: its source side's, which may be a released model's).

    Attributes:
        kind: what the API calls models of this kind ("causal LM", "encoder" ...).
        endpoints: what models of this kind serve; [`serves`][plm.serve.served_models.Service.serves] may say no for
            one.
    """

    kind: ClassVar[str]
    endpoints: ClassVar[tuple[str, ...]]  # what models of this kind serve; `serves` may say no for one

    def __init__(self, name: str, model: PretrainedModel, tokenizer: TokenizerLike) -> None:
        self.name = name
        self.model = model
        self.tokenizer = tokenizer

    @classmethod
    def open(cls, name: str, model: PretrainedModel, directory: Path) -> Service:
        """The service of a model loaded from ``directory``, with the tokenizer saved beside it.

        Args:
            name: the model's name in the API.
            model: the model.
            directory: the model's directory.

        Returns:
            The service.

        Raises:
            PLMError: no tokenizer beside the model, or one that does not belong to it.
        """
        return cls(name, model, tokenizer_beside(directory, model))

    def serves(self, endpoint: str) -> bool:
        """Whether this model serves ``endpoint``: one of its kind's, and (attention) it has attention layers.

        Args:
            endpoint: an endpoint's name (see `ENDPOINTS`).

        Returns:
            True when it does.
        """
        if endpoint == "attention":
            return "attention" in self.endpoints and self.has_attention()
        return endpoint in self.endpoints

    def has_attention(self) -> bool:
        """Whether the model has attention layers whose weights can be shown.

        Returns:
            True when one of its modules is a [`MultiHeadAttention`][plm.core.attention.MultiHeadAttention].
        """
        return any(isinstance(module, MultiHeadAttention) for module in self.model.modules())

    @property
    def capabilities(self) -> list[str]:
        """The endpoints this model serves, in the order of `ENDPOINTS`."""
        return [endpoint for endpoint in ENDPOINTS if self.serves(endpoint)]

    def describe(self) -> dict[str, Any]:
        """What GET /models says of the model: its name, family, kind, endpoints, and what a client needs.

        Returns:
            ``name``, ``family``, ``kind`` and ``capabilities``, and the kind's
            [`details`][plm.serve.served_models.Service.details].
        """
        return {"name": self.name, "family": self.model.family, "kind": self.kind,
                "capabilities": self.capabilities, **self.details()}

    def details(self) -> dict[str, Any]:
        """What a client of this kind of model needs to know besides its endpoints (none by default).

        Returns:
            The details by name.
        """
        return {}

    def attention(self, text: str, layer: int, head: int | None, target: str | None) -> dict[str, Any]:
        """The self-attention of one layer and head (None: the layer's heads averaged) over ``text``.

        Args:
            text: the text.
            layer: the layer (negative: from the last).
            head: the head, or None for the layer's mean.
            target: must be None: a model that reads one text has no target.

        Returns:
            ``attention`` (target/query rows x source/key columns), the tokens of each axis, the map's title and the
            layers and heads the model offers (see [`attention_json`][plm.serve.served_models.attention_json]).

        Raises:
            RequestError: a ``target``.
            PLMError: a text without tokens, or a layer or head out of range.
        """
        if target is not None:
            raise RequestError("'target' is for encoder-decoders; this model reads one text")
        assert isinstance(self.tokenizer, Tokenizer)  # the kinds that read one text read it with plm's tokenizers
        return attention_json(self_attention(self.model, self.tokenizer, text, layer, head))


class CausalLMService(Service):
    """A causal LM (GPT-1, GPT-2): it generates, and shows its attention."""
    model: CausalLM  # SERVICES gives each kind of model its service
    tokenizer: Tokenizer
    kind = "causal LM"
    endpoints = ("generate", "attention")

    def details(self) -> dict[str, Any]:
        """The model's context, the most tokens a prompt and its continuation take.

        Returns:
            ``context``.
        """
        return {"context": self.model.context_length()}

    def generation(self, prompt: str, max_new_tokens: int | None, temperature: float, top_k: int, top_p: float,
                   sample: bool, seed: int | None) -> GenerationJob:
        """A checked generation request, for the batcher: the prompt's ids as ``plm generate`` encodes them.

        Args:
            prompt: the text to continue.
            max_new_tokens: the most tokens to generate; None: ``plm generate``'s default, within the context.
            temperature: as for [`job`][plm.serve.served_models.CausalLMService.job].
            top_k: as for `job`.
            top_p: as for `job`.
            sample: as for `job`.
            seed: as for `job`.

        Returns:
            The job, not yet submitted.

        Raises:
            RequestError: a prompt that leaves no room in the context, or a ``max_new_tokens`` that does not fit.
            PLMError: invalid decoding options, or an empty prompt the tokenizer cannot start.
        """
        [ids] = encode_prompts(self.tokenizer, [prompt])
        context = self.model.context_length()
        room = context - len(ids)
        if room < 1:
            raise RequestError(f"the prompt is {len(ids)} tokens, which leaves no room for new ones in the model's "
                               f"context of {context}; shorten it")
        max_new_tokens = max_new_tokens or min(DEFAULT_NEW_TOKENS, room)  # as plm generate chooses
        if max_new_tokens > room:
            raise RequestError(f"'max_new_tokens' {max_new_tokens} does not fit: the prompt takes {len(ids)} of the "
                               f"model's {context} positions; ask for at most {room}")
        return self.job(ids, max_new_tokens, temperature, top_k, top_p, sample, seed)

    def job(self, ids: list[int], max_new_tokens: int, temperature: float, top_k: int, top_p: float, sample: bool,
            seed: int | None) -> GenerationJob:
        """The generation job of a prompt's token ids (that leave ``max_new_tokens`` of room in the context).

        Jobs of equal options share a batch, whichever endpoint made them.

        Args:
            ids: the prompt's token ids.
            max_new_tokens: the most tokens to generate.
            temperature: the sampling temperature.
            top_k: sample among the k most likely tokens (0: all).
            top_p: sample among the most likely tokens whose probabilities add up to p.
            sample: sample; else greedy, unless the other options ask for sampling.
            seed: the sampler's seed, or None.

        Returns:
            The job, not yet submitted.

        Raises:
            PLMError: invalid decoding options.
        """
        options = GenerationConfig(temperature=temperature, top_k=top_k, top_p=top_p,
                                   do_sample=True if sample else None)
        options.validate()
        return GenerationJob(self.model, self.tokenizer, ids, max_new_tokens, options, seed)

    @torch.inference_mode()
    def echo(self, ids: list[int], alternatives: int) -> list[dict[str, Any]]:
        """A prompt's tokens with their log-probabilities, as a completion echoes them (on the model thread).

        Each token is scored given those before it, in one forward pass over the prompt; the first has nothing
        before it, so its ``logprob`` and ``top_logprobs`` are None, as OpenAI gives them.

        Args:
            ids: the prompt's token ids, at most the model's context.
            alternatives: how many of the most likely tokens at each place to give beside the prompt's own.

        Returns:
            Per token its ``id``, ``text`` (its piece of the prompt's text, as a generated token's), ``logprob``
            and, after the first, ``top_logprobs`` (each alternative's ``id``, ``text`` and ``logprob``) where
            ``alternatives`` asks for them.
        """
        logits = self.model(torch.tensor([ids], device=self.model.device)).logits[0, :-1].float()  # (time - 1, vocab)
        logprobs = logits.log_softmax(-1)  # row i: the next token after ids[: i + 1]
        chosen = logprobs.gather(1, torch.tensor(ids[1:], dtype=torch.long, device=logprobs.device)[:, None])
        likely = logprobs.topk(min(alternatives, logprobs.shape[-1])) if alternatives else None
        pieces = token_pieces(self.tokenizer, ids)
        tokens: list[dict[str, Any]] = [{"id": ids[0], "text": pieces[0], "logprob": None, "top_logprobs": None}]
        for place, (token, piece, logprob) in enumerate(zip(ids[1:], pieces[1:], chosen.squeeze(1).tolist())):
            tokens.append({"id": token, "text": piece, "logprob": logprob})
            if likely is not None:
                tokens[-1]["top_logprobs"] = [
                    {"id": other, "text": self.tokenizer.decode([other]), "logprob": p}
                    for other, p in zip(likely.indices[place].tolist(), likely.values[place].tolist())]
        return tokens


def token_pieces(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    """Each token's piece of the text of ``ids``, the pieces adding up to it (special tokens read as nothing).

    A byte-level token can end inside a character; its piece is empty and the character goes with the token that
    completes it, as [`add`][plm.serve.batching.GenerationJob.add] gives a generated token's piece.

    Args:
        tokenizer: the tokenizer.
        ids: the token ids.

    Returns:
        One piece per token.
    """
    texts = tokenizer.decode_batch([ids[: end + 1] for end in range(len(ids))], skip_special_tokens=True)
    pieces, text = [], ""
    for end, whole in enumerate(texts):
        piece = "" if whole.endswith("\ufffd") and end < len(ids) - 1 else whole[len(text):]
        pieces.append(piece)
        text += piece
    return pieces


class EncoderService(Service):
    """An encoder (BERT, ALBERT, DeBERTa): it embeds, fills masks (with its masked-LM head), shows attention."""
    model: Encoder
    tokenizer: Tokenizer
    kind = "encoder"
    endpoints = ("fill-mask", "embed", "attention")

    def serves(self, endpoint: str) -> bool:
        """Whether this model serves ``endpoint``; fill-mask only with a masked-LM head.

        Args:
            endpoint: an endpoint's name.

        Returns:
            True when it does.
        """
        if endpoint == "fill-mask":
            return "mlm" in self.model.config.pretraining_heads
        return super().serves(endpoint)

    def details(self) -> dict[str, Any]:
        """The model's context and its tokenizer's mask token (None without one).

        Returns:
            ``context`` and ``mask_token``.
        """
        return {"context": self.model.config.context_length, "mask_token": self.tokenizer.special_tokens.get("mask")}

    def fill_mask(self, text: str, guesses: int) -> dict[str, Any]:
        """Each mask's ``guesses`` likeliest tokens with their probabilities, as ``plm fill-mask`` prints them.

        Args:
            text: a text with the tokenizer's mask token where a word is missing.
            guesses: how many guesses per mask.

        Returns:
            ``masks``: per mask, its guesses' ``token`` and ``probability``.

        Raises:
            PLMError: ``guesses`` out of range, or a text without a mask (see
                [`fill_mask`][plm.apps.text_pipelines.fill_mask]).
        """
        masks = fill_mask(self.model, self.tokenizer, text, guesses)
        return {"masks": [[{"token": token, "probability": p} for token, p in mask] for mask in masks]}

    def embed(self, texts: list[str]) -> dict[str, Any]:
        """Sentence embeddings as ``plm embed`` computes them: the mean of the last layer, L2-normalised.

        Args:
            texts: the texts.

        Returns:
            The vectors and their cosine similarities (see [`vectors_json`][plm.serve.served_models.vectors_json]).
        """
        return vectors_json(embed_texts(self.model, self.tokenizer, texts), "mean of the last hidden states")


class ElmoService(Service):
    """An ELMo: it embeds."""
    model: Elmo
    tokenizer: Tokenizer
    kind = "ELMo"
    endpoints = ("embed",)

    def embed(self, texts: list[str]) -> dict[str, Any]:
        """A vector per text: ELMo's layers averaged (a scalar mix of equal weights), then its words', normalised.

        Args:
            texts: the texts, split into words at whitespace.

        Returns:
            The vectors and their cosine similarities (see [`vectors_json`][plm.serve.served_models.vectors_json]).

        Raises:
            RequestError: a text without words.
        """
        sentences = [split_words(text) for text in texts]
        empty = next((number for number, words in enumerate(sentences, 1) if not words), None)
        if empty is not None:
            raise RequestError(f"text {empty} has no words")
        mixed = embed_sentences(self.model, sentences, mix="average")  # (texts, longest, 2 * dim), padding 0
        lengths = torch.tensor([len(sentence) for sentence in sentences], dtype=mixed.dtype)
        return vectors_json(F.normalize(mixed.sum(1) / lengths[:, None], dim=-1), "mean of the words' mixed layers")


class Seq2SeqService(Service):
    """An encoder-decoder (the Transformer, an RNN, a released Marian or FSMT model): it translates, shows attention.

    Args:
        name: the model's name in the API.
        model: the model.
        tokenizers: its source and target tokenizers.
    """
    model: Seq2SeqModel
    kind = "encoder-decoder"
    endpoints = ("translate", "attention")

    def __init__(self, name: str, model: Seq2SeqModel, tokenizers: Seq2SeqTokenizers) -> None:
        super().__init__(name, model, tokenizers.source)
        self.tokenizers = tokenizers

    @classmethod
    def open(cls, name: str, model: PretrainedModel, directory: Path) -> Service:
        """The service of an encoder-decoder loaded from ``directory``, with the tokenizers saved there.

        Args:
            name: the model's name in the API.
            model: the encoder-decoder.
            directory: the model's directory: plm's tokenizers, or a released Marian or FSMT model's.

        Returns:
            The service.

        Raises:
            PLMError: tokenizers that cannot be loaded, or that do not belong to the model.
        """
        assert isinstance(model, Seq2SeqModel)  # SERVICES opens this service for an encoder-decoder only
        return cls(name, model, seq2seq_tokenizers(directory, model))

    def has_attention(self) -> bool:
        """Whether the decoder attends over the source: not for an RNN without attention.

        Returns:
            True when it does.
        """
        return getattr(self.model.config, "attention", None) != "none"  # an RNN without attention reads no source token

    def details(self) -> dict[str, Any]:
        """The model's context and its family's beam width.

        Returns:
            ``context`` and ``beam``.
        """
        return {"context": self.model.context_length(), "beam": recipe_decoding(self.model.family).num_beams}

    def translate(self, text: str, beam: int | None) -> dict[str, Any]:
        """The translation, and the attention that produced it.

        The search is the family's, as ``plm translate`` does it (``beam`` in place of its beam); the attention is a
        Transformer's last layer of encoder-decoder attention, heads averaged (an RNN's one attention).

        Args:
            text: the source sentence.
            beam: the beam width; None: the family's.

        Returns:
            ``translation``, and the attention as [`attention_json`][plm.serve.served_models.attention_json] gives it
            (all None without attention).

        Raises:
            PLMError: a sentence too long for the model, or a beam wider than the target vocabulary.
        """
        config = recipe_decoding(self.model.family, **({"num_beams": beam} if beam is not None else {}))
        [ids] = translate_ids(self.model, self.tokenizers, [text], config)
        [translation] = self.tokenizers.decode_targets([ids[1:]])
        if not self.has_attention():
            return {"translation": translation, "attention": None, "source_tokens": None, "target_tokens": None}
        attention = decoder_attention(self.model, self.tokenizers, text, ids, layer=-1, head=None)
        return {"translation": translation, **attention_json(attention)}

    def attention(self, text: str, layer: int, head: int | None, target: str | None) -> dict[str, Any]:
        """The decoder's attention over ``text`` while it reads ``target`` (default: its greedy translation).

        Args:
            text: the source sentence.
            layer: the decoder layer (negative: from the last).
            head: the head, or None for the layer's mean.
            target: the target sentence, or None.

        Returns:
            ``attention`` (target/query rows x source/key columns), the tokens of each axis, the map's title and the
            layers and heads the model offers (see [`attention_json`][plm.serve.served_models.attention_json]).

        Raises:
            PLMError: a model without attention, or a layer or head out of range.
        """
        return attention_json(pair_attention(self.model, self.tokenizers, text, target, layer, head))


class TaskService(Service):
    """A fine-tuned task model (or feature-based tagger): it classifies, and shows its attention.

    Args:
        name: the model's name in the API.
        model: the model.
        tokenizer: its tokenizer.

    Attributes:
        task: the task the model was fine-tuned for.
    """
    kind = "task model"
    endpoints = ("classify", "attention")

    def __init__(self, name: str, model: TaskModel | FeatureTagger, tokenizer: Tokenizer) -> None:
        super().__init__(name, model, tokenizer)
        self.task: Task = model_task(model, tokenizer)

    def has_attention(self) -> bool:
        """Whether the model has attention layers to show: not a feature tagger, which reads more than text.

        Returns:
            True when it does.
        """
        return isinstance(self.model, TaskModel) and super().has_attention()  # a feature tagger reads more than text

    def details(self) -> dict[str, Any]:
        """The model's task, its labels and the fields a request gives.

        Returns:
            ``task``, ``labels`` and ``inputs``.
        """
        inputs = TASK_FORMS[self.task.name].inputs
        return {"task": self.task.name, "labels": list(self.task.labels), "inputs": list(inputs)}

    def classify(self, **fields: Any) -> dict[str, Any]:
        """The prediction ``plm predict`` makes for one example, with what the model's scores say about it.

        Args:
            **fields: the /classify request's fields; the task's form reads those it takes (see `TASK_FORMS`).

        Returns:
            The task form's answer: its ``prediction``, the key ``plm predict`` writes it under (a label, a score,
            a tag per word, an answer text or a choice's index), and what a form adds: a classifier's and a
            multiple choice's ``probabilities``, a tagger's ``words``, a QA model's ``candidates``.

        Raises:
            RequestError: fields the task needs and lacks, or fields it does not read.
            PLMError: an example the task cannot encode.
        """
        form = TASK_FORMS[self.task.name]
        example = form.example(self.task.name, fields)
        features = encode_all(self.task, [example])
        outputs = model_outputs(self.model, self.task, features)
        [prediction] = self.task.predict(outputs, features, [example])
        return form.answer(Prediction(self.task, example, features, outputs, prediction))


@dataclass(frozen=True)
class Prediction:
    """One example's prediction, with the model's outputs it was read from.

    Attributes:
        task: the task.
        example: the example.
        features: its features.
        outputs: the model's output on them, with the batch.
        value: the prediction.
    """

    task: Task
    example: Any
    features: list[dict[str, Any]]
    outputs: list[tuple[Any, dict[str, torch.Tensor]]]
    value: Any

    def probabilities(self) -> list[float]:
        """The softmax of the example's scores: over the classes, or over the choices.

        Returns:
            The probabilities.
        """
        return self.outputs[0][0].logits[0].float().softmax(-1).tolist()


@dataclass(frozen=True)
class TaskForm:
    """How one task's requests read: the fields it takes, the example they make, and what the answer says.

    Attributes:
        inputs: the fields the task reads.
        make: the example of its reader ([`plm.tasks.readers`][plm.tasks.readers]) that the fields make.
        answer: the answer to a request, from its prediction.
        optional: those of ``inputs`` that may be left out.
    """

    inputs: tuple[str, ...]
    make: Callable[[dict[str, Any]], Any]
    answer: Callable[[Prediction], dict[str, Any]]
    optional: tuple[str, ...] = ()

    def example(self, task: str, fields: dict[str, Any]) -> Any:
        """The example of a request's fields; one the task needs and lacks, or one it does not read, is refused.

        Args:
            task: the task's name, for the messages.
            fields: the request's /classify fields, None (or "") where not given.

        Returns:
            The example.

        Raises:
            RequestError: a missing or empty field, a field the task does not read, or (tag) a text without words.
        """
        reads = ", ".join(map(repr, self.inputs))
        missing = [name for name in self.inputs if fields[name] is None and name not in self.optional]
        if missing:
            raise RequestError(f"a {task} model reads {reads}; missing {', '.join(map(repr, missing))}")
        empty = [name for name in self.inputs if name not in self.optional and not str(fields[name]).strip()]
        if empty:  # nothing to classify: an answer would be the head's bias alone
            raise RequestError(f"a {task} model reads {reads}; {', '.join(map(repr, empty))} is empty")
        unread = [name for name, value in fields.items() if name not in self.inputs and value not in (None, "")]
        if unread:
            raise RequestError(f"a {task} model reads {reads}, not {', '.join(map(repr, unread))}")
        return self.make(fields)


def tagged_sentence(fields: dict[str, Any]) -> TaggedSentence:
    """The words of "text" as CoNLL has them, split at whitespace; no tags (they are what is asked for).

    Args:
        fields: the request's fields.

    Returns:
        The sentence.

    Raises:
        RequestError: a text without words.
    """
    words = tuple(fields["text"].split())
    if not words:
        raise RequestError("'text' has no words to tag")
    return TaggedSentence(words, ())


def qa_answer(p: Prediction) -> dict[str, Any]:
    """A QA model's answer text and its five best candidate spans with their scores.

    Args:
        p: the prediction of a qa task.

    Returns:
        ``prediction`` (the answer text) and ``candidates``.
    """
    assert isinstance(p.task, QuestionAnswering)  # this form is the qa task's
    [span] = p.task.spans(p.outputs, p.features, [p.example])
    return {"prediction": p.value,
            "candidates": [{"text": text, "score": score} for text, score in span.n_best[:5]]}


# Each answer names the model's output "prediction", as plm predict writes it (where "label", "tags" and "answers"
# are an example's gold ones).
TASK_FORMS = {
    "classify": TaskForm(("text", "text_pair"), lambda f: TextExample(f["text"], f["text_pair"]),
                         lambda p: {"prediction": p.value,
                                    "probabilities": dict(zip(p.task.labels, p.probabilities()))},
                         optional=("text_pair",)),
    "regress": TaskForm(("text", "text_pair"), lambda f: TextExample(f["text"], f["text_pair"]),
                        lambda p: {"prediction": p.value}, optional=("text_pair",)),
    "tag": TaskForm(("text",), tagged_sentence, lambda p: {"words": list(p.example.words), "prediction": p.value}),
    "qa": TaskForm(("question", "context"), lambda f: QAExample("request", f["question"], f["context"], ()), qa_answer),
    "choice": TaskForm(("context", "endings", "prefix"),
                       lambda f: ChoiceExample(f["context"], f["prefix"], tuple(f["endings"]), None),
                       lambda p: {"prediction": p.value, "probabilities": p.probabilities()}, optional=("prefix",)),
}


# The service of each model class, the first that matches (a task model is none of the others).
SERVICES: tuple[tuple[type | tuple[type, ...], type[Service]], ...] = (
    ((TaskModel, FeatureTagger), TaskService),
    (CausalLM, CausalLMService),
    (Encoder, EncoderService),
    (Seq2SeqModel, Seq2SeqService),
    (Elmo, ElmoService),
)


def load_service(
    path: str | Path, name: str, device: str | torch.device = "auto", quantization: str | None = None,
    precision: str = "fp32",
) -> Service:
    """The model in ``path`` (a plm or Hugging Face directory, or a training run) as a service called ``name``.

    Args:
        path: the model's directory or run, or a Hugging Face Hub id.
        name: its name in the API.
        device: where the weights go ("auto" picks one).
        quantization: a quantization to apply (see [`quantize`][plm.cpu.int8.quantize]), or None.
        precision: the weights' precision, ``fp32``, ``bf16``, ``fp16`` or ``auto`` (see
            [`inference_weights`][plm.loading.inference_weights]).

    Returns:
        The service of the model's kind.

    Raises:
        PLMError: a model that cannot be loaded, an unknown quantization, or a model of a kind plm does not
            serve.
    """
    directory, model = opened(path, resolve_device(device) if isinstance(device, str) else device)  # a Hub id too
    model = inference_weights(model, precision, quantization)
    for classes, service in SERVICES:
        if isinstance(model, classes):
            return service.open(name, model, directory)
    raise PLMError(f"{path}: plm serves no {model.family} models")


def service_names(paths: Sequence[str | Path]) -> list[str]:
    """Each model's name in the API: its directory's name, numbered from the second one of a name on (gpt, gpt-2).

    Args:
        paths: the models' paths, in order.

    Returns:
        One name per path.
    """
    names: list[str] = []
    for path in paths:
        base = Path(path).resolve().name or "model"
        name, number = base, 1
        while name in names:
            number += 1
            name = f"{base}-{number}"
        names.append(name)
    return names


def choose(services: Sequence[Service], name: str | None, endpoint: str) -> Service:
    """The model a request to ``endpoint`` goes to: the one it names, or the only one that serves the endpoint.

    Args:
        services: the server's models.
        name: the model the request names, or None.
        endpoint: the endpoint.

    Returns:
        The service.

    Raises:
        RequestError: an unknown name, a named model that does not serve the endpoint, or, without a name, no
            model or more than one that serves it.
    """
    if name is not None:
        service = next((s for s in services if s.name == name), None)
        if service is None:
            raise RequestError(f"unknown model {name!r}; this server has {', '.join(s.name for s in services)}")
        if not service.serves(endpoint):
            raise RequestError(
                f"model {name!r} ({service.kind}, family {service.model.family}) cannot serve /{endpoint}, "
                f"which needs {ENDPOINTS[endpoint]}; it serves {', '.join('/' + c for c in service.capabilities)}"
            )
        return service
    able = [service for service in services if service.serves(endpoint)]
    if not able:
        raise RequestError(f"no model on this server serves /{endpoint}, which needs {ENDPOINTS[endpoint]}")
    if len(able) > 1:
        raise RequestError(f"{len(able)} models serve /{endpoint} ({', '.join(s.name for s in able)}); "
                           "say which with \"model\"")
    return able[0]


def attention_json(attention: AttentionMap) -> dict[str, Any]:
    """An attention map as JSON: ``attention`` (target/query rows x source/key columns) and the tokens of each axis.

    Args:
        attention: the map.

    Returns:
        ``attention``, ``source_tokens``, ``target_tokens``, ``title``, ``layers`` and ``heads``.
    """
    return {"attention": attention.weights.tolist(), "source_tokens": attention.columns,
            "target_tokens": attention.rows, "title": attention.title, "layers": attention.layers,
            "heads": attention.heads}


def vectors_json(vectors: torch.Tensor, pooling: str) -> dict[str, Any]:
    """Unit vectors (texts, dim) as JSON, with their cosine similarities (their dot products).

    Args:
        vectors: (texts, dim), L2-normalised.
        pooling: how the vectors were pooled, for the answer.

    Returns:
        ``vectors``, ``dim``, ``pooling`` and ``similarity`` (texts x texts).
    """
    return {"vectors": vectors.tolist(), "dim": vectors.shape[1], "pooling": pooling,
            "similarity": (vectors @ vectors.T).tolist()}
