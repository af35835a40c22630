"""Attention heatmaps: which source token each output token read (seq2seq), or each token's self-attention.

For a sentence pair the rows are the target tokens the decoder predicts (y_1 .. y_m
</s>) and the columns the source tokens: the RNN's attention, or a Transformer's
encoder-decoder attention of one layer and head. For an encoder or a GPT model both
axes are the tokens of one text, and the map is the self-attention of one layer and
head (the seed's "it" -> "animal" picture). SDPA keeps no weights, so the Transformer
maps are recorded with [`attention_weights`][plm.core.attention.attention_weights] (an explicit softmax).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from plm.core import MultiHeadAttention, attention_weights
from plm.data.sentence_pairs import Seq2SeqTokenizers
from plm.errors import PLMError
from plm.models.base import Seq2SeqModel
from plm.objectives.translation import recipe_decoding, translate_ids
from plm.storage.atomic_files import write_png
from plm.tokenization.protocol import TokenizerLike
from plm.tokenization.tokenizer import Tokenizer


@dataclass(frozen=True)
class AttentionMap:
    """``weights`` (rows, columns): row i's attention over the columns; the tokens label both axes.

    ``layers`` and ``heads`` are the choice the model offers (1 and 1 for an RNN's one attention).

    Attributes:
        weights: (rows, columns) the attention weights, fp32 on the CPU.
        rows: the tokens of the rows (the queries).
        columns: the tokens of the columns (the keys).
        title: what the map shows ("cross-attention, layer 5, head 2").
        layers: the attention layers the model offers.
        heads: the heads of the layer shown.
    """

    weights: torch.Tensor
    rows: list[str]
    columns: list[str]
    title: str
    layers: int = 1
    heads: int = 1


def token_labels(tokenizer: TokenizerLike, ids: Sequence[int]) -> list[str]:
    """How each token reads: its own text without surrounding spaces; "␣" for a token of spaces only.

    Args:
        tokenizer: the tokenizer of ``ids``.
        ids: the token ids.

    Returns:
        One label per token (plm's tokenizers give the token itself where its text is empty).
    """
    labels = []
    for token in ids:
        text = tokenizer.decode([token])
        spelling = tokenizer.backend.id_to_token(token) if isinstance(tokenizer, Tokenizer) else None
        labels.append(text.strip() or ("␣" if text else spelling or ""))
    return labels


def pick(weights: dict[str, torch.Tensor], layer: int, head: int | None, what: str) -> tuple[torch.Tensor, int, int]:
    """One layer's and head's weights out of recorded ones, checked; with the numbers of layers and heads.

    Args:
        weights: recorded weights {name: (1, H, T, S)}, in layer order.
        layer: the layer (negative: from the last).
        head: the head (None: the mean of the layer's heads).
        what: the attention's name, for the error messages.

    Returns:
        The (T, S) weights, the number of layers and the number of heads.

    Raises:
        PLMError: no weights, or a layer or head out of range.
    """
    names = list(weights)
    if not names:
        raise PLMError(f"the model has no {what} to show")
    if not -len(names) <= layer < len(names):
        raise PLMError(
            f"layer {layer} is out of range: the model has {len(names)} {what} layers (0 to {len(names) - 1}, or "
            f"-{len(names)} to -1 counted from the last)"
        )
    recorded = weights[names[layer]]
    heads = recorded.shape[1]
    if head is not None and not 0 <= head < heads:
        raise PLMError(f"head {head} is out of range: layer {layer} has {heads} heads (0 to {heads - 1})")
    return (recorded[0].mean(0) if head is None else recorded[0, head]), len(names), heads


def describe(what: str, layer: int, head: int | None, layers: int) -> str:
    """A map's title: "cross-attention, layer 5, head 2", or "..., layer 5, heads averaged".

    Args:
        what: the attention's name.
        layer: the layer (negative: from the last).
        head: the head, or None for the heads' mean.
        layers: the number of layers, to number a negative layer.

    Returns:
        The title.
    """
    return f"{what}, layer {layer % layers}, " + ("heads averaged" if head is None else f"head {head}")



def pair_attention(
    model: Seq2SeqModel, tokenizers: Seq2SeqTokenizers, source: str, target: str | None = None,
    layer: int = 0, head: int | None = 0,
) -> AttentionMap:
    """The attention of the decoder over ``source`` while it reads ``target`` (default: its own greedy translation).

    ``layer`` and ``head`` pick a Transformer's encoder-decoder attention as [`pick`][plm.apps.attention_map.pick] does.

    Args:
        model: the encoder-decoder.
        tokenizers: its tokenizers.
        source: the source sentence.
        target: the target sentence, or None to translate ``source`` greedily.
        layer: the layer (negative: from the last).
        head: the head (None: the mean of the layer's heads).

    Returns:
        The map: target tokens down, source tokens across.

    Raises:
        PLMError: a model without attention, or a layer or head out of range.
    """
    if target is None:
        [target_ids] = translate_ids(model, tokenizers, [source], recipe_decoding(model.family, num_beams=1))
    else:
        [target_ids] = tokenizers.encode_targets([target])
    return decoder_attention(model, tokenizers, source, target_ids, layer, head)


@torch.inference_mode()
def decoder_attention(
    model: Seq2SeqModel, tokenizers: Seq2SeqTokenizers, source: str, target_ids: Sequence[int], layer: int = 0,
    head: int | None = 0,
) -> AttentionMap:
    """`pair_attention` over target ids ``<s> y_1 .. y_m </s>``, such as a search chose them.

    Args:
        model: the encoder-decoder.
        tokenizers: its tokenizers.
        source: the source sentence.
        target_ids: the target ids, ``<s>`` first.
        layer: the layer (negative: from the last).
        head: the head (None: the mean of the layer's heads).

    Returns:
        The map: the target tokens the decoder predicts (``y_1 .. </s>``) down, source tokens across.

    Raises:
        PLMError: a model without attention, or a layer or head out of range.
    """
    [source_ids] = tokenizers.encode_sources([source])
    device = next(model.parameters()).device
    with attention_weights(model) as recorded:
        output = model(torch.tensor([source_ids], device=device), torch.tensor([target_ids[:-1]], device=device))
        cross = {name: w for name, w in recorded.items() if "cross" in name and w is not None}
    if getattr(output, "attentions", None) is not None:  # an RNN: one attention, no layers or heads
        weights, title, layers, heads = output.attentions[0], f"{model.config.attention} attention", 1, 1
    elif getattr(model.config, "attention", None) == "none":
        raise PLMError("this model has no attention: its decoder reads only the final encoder state")
    else:
        weights, layers, heads = pick(cross, layer, head, "encoder-decoder attention")
        title = describe("cross-attention", layer, head, layers)
    return AttentionMap(weights.float().cpu(), token_labels(tokenizers.target, target_ids[1:]),
                        token_labels(tokenizers.source, source_ids), title, layers, heads)


@torch.inference_mode()
def self_attention(
    model: torch.nn.Module, tokenizer: Tokenizer, text: str, layer: int = 0, head: int | None = 0
) -> AttentionMap:
    """Self-attention of layer ``layer``, head ``head`` of an encoder or a causal LM over ``text``.

    The layer and head are chosen as in [`pick`][plm.apps.attention_map.pick].

    Args:
        model (torch.nn.Module): the model, with ``MultiHeadAttention`` layers.
        tokenizer: its tokenizer.
        text: the text.
        layer: the layer (negative: from the last).
        head: the head (None: the mean of the layer's heads).

    Returns:
        The map, the text's tokens on both axes.

    Raises:
        PLMError: a model without attention layers, a text without tokens, or a layer or head out of range.
    """
    if not any(isinstance(module, MultiHeadAttention) for module in model.modules()):
        raise PLMError(f"{model.family} models have no attention layers to draw")
    ids = tokenizer.encode(text)
    if not ids:
        raise PLMError("the text has no tokens")
    with attention_weights(model) as recorded:
        model(torch.tensor([ids], device=next(model.parameters()).device))
        weights, layers, heads = pick({name: w for name, w in recorded.items() if w is not None}, layer, head,
                                      "self-attention")
    labels = token_labels(tokenizer, ids)
    return AttentionMap(weights.float().cpu(), labels, labels, describe("self-attention", layer, head, layers), layers,
                        heads)


def plot(attention: AttentionMap, path: str | os.PathLike[str]) -> None:
    """A PNG heatmap: rows down the left, columns along the top, weights from white (0) to dark (1).

    Args:
        attention: the map.
        path: the PNG file, written atomically.

    Raises:
        PLMError: the file cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    rows, columns = len(attention.rows), len(attention.columns)
    figure, axes = pyplot.subplots(figsize=(max(4.0, 0.45 * columns + 2), max(3.0, 0.4 * rows + 1.5)))
    image = axes.imshow(attention.weights.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    axes.set_xticks(range(columns), attention.columns, rotation=90)
    axes.set_yticks(range(rows), attention.rows)
    axes.xaxis.tick_top()
    axes.set_title(attention.title, pad=12)
    figure.colorbar(image, ax=axes, fraction=0.04)
    figure.tight_layout()
    write_png(figure, path)
