"""Heads: small modules over any encoder's hidden states.

The pretraining heads of BERT and ALBERT (masked-token prediction, next-sentence or
sentence-order prediction), the pooler they sit on, what an encoder with them returns
([`PretrainingOutput`][plm.models.pretraining_heads.PretrainingOutput]), and mean pooling for sentence embeddings. The
task (fine-tuning) heads are in [`plm.tasks.heads`][plm.tasks.heads]. A head never owns the word embeddings it is tied
to: the model hands the embedding matrix to [`MaskedLMHead`][plm.models.pretraining_heads.MaskedLMHead] at call time, so
a checkpoint holds the tied matrix once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm.core.block import ACTIVATIONS
from plm.core.outputs import ModelOutput
from plm.cpu.linear import linear
from plm.errors import PLMError

# Pretraining heads a config can ask for: ``mlm`` and one sentence-pair head.
MLM = "mlm"
NSP = "nsp"  # next-sentence prediction (BERT)
SOP = "sop"  # sentence-order prediction (ALBERT)
PAIR_HEADS = (NSP, SOP)
PRETRAINING_HEADS = (MLM, *PAIR_HEADS)


def check_pretraining_heads(heads: tuple[str, ...], pooler: bool) -> None:
    """Raise a PLMError for an unknown head, a repeated one, NSP with SOP, or a pair head without pooler.

    Args:
        heads: the pre-training heads a config asks for.
        pooler: the config builds a pooler.

    Raises:
        PLMError: an unknown or repeated head, both sentence-pair heads, or a pair head without the pooler.
    """
    unknown = [head for head in heads if head not in PRETRAINING_HEADS]
    if unknown:
        raise PLMError(
            f"unknown pretraining head(s) {', '.join(map(repr, unknown))}; choose from {', '.join(PRETRAINING_HEADS)}"
        )
    if len(set(heads)) != len(heads):
        raise PLMError(f"pretraining heads {heads} name a head twice")
    pair = [head for head in heads if head in PAIR_HEADS]
    if len(pair) > 1:
        raise PLMError("a model has one sentence-pair head: nsp or sop, not both")
    if pair and not pooler:
        raise PLMError(f"the {pair[0]} head reads the pooled [CLS] vector; it needs pooler=True")


POOLER_ACTIVATIONS = {"tanh": torch.tanh, **ACTIVATIONS}


@dataclass
class PretrainingOutput(ModelOutput):
    """An encoder's outputs: the hidden states, then what its pooler and pre-training heads give.

    A field is None without its module.

    Attributes:
        pooler_output: (batch, hidden), the pooled [CLS] vector.
        logits: the MLM head's, (batch, time, vocab), or (masked, vocab) for the masked positions only.
        pair_logits: (batch, 2), the NSP/SOP head's.
    """

    pooler_output: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    pair_logits: torch.Tensor | None = None


class Pooler(nn.Module):
    """act(W h_[CLS] + b): the sentence vector that BERT's NSP and classifiers read.

    BERT's activation is tanh; DeBERTa's classifier pools the same way with GELU.

    Args:
        dim: H, the hidden size.
        activation: tanh or one of `ACTIVATIONS`.

    Raises:
        PLMError: an unknown activation.
    """

    def __init__(self, dim: int, activation: str = "tanh") -> None:
        super().__init__()
        if activation not in POOLER_ACTIVATIONS:
            raise PLMError(f"unknown pooler activation {activation!r}; choose one of {', '.join(POOLER_ACTIVATIONS)}")
        self.dense = nn.Linear(dim, dim)
        self.activation = POOLER_ACTIVATIONS[activation]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Pool the first ([CLS]) position.

        Args:
            hidden: (B, T, H) hidden states.

        Returns:
            (B, H) pooled vectors.
        """
        return self.activation(self.dense(hidden[:, 0]))  # (B, H)


class MaskedLMHead(nn.Module):
    """Predict a token from its hidden state: LayerNorm(act(W h)) E^T + b.

    The transform maps the hidden size to the embedding size (equal in BERT, E < H in
    ALBERT), and the decoder is the word-embedding matrix E (V x embedding size),
    passed in by the model, plus a bias of its own.

    Args:
        dim: H, the hidden size.
        embedding_dim: E, the embedding size.
        vocab_size: V.
        activation: one of `ACTIVATIONS`.
        norm_eps: the LayerNorm's epsilon.

    Raises:
        PLMError: an unknown activation.
    """

    def __init__(
        self, dim: int, embedding_dim: int, vocab_size: int, activation: str = "gelu", norm_eps: float = 1e-12
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise PLMError(f"unknown activation {activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        self.dense = nn.Linear(dim, embedding_dim)
        self.activation = ACTIVATIONS[activation]
        self.norm = nn.LayerNorm(embedding_dim, eps=norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        """The logits of every token of the vocabulary.

        Args:
            hidden: (..., H) hidden states.
            word_embeddings: (V, E), the tied word-embedding matrix.

        Returns:
            Logits (..., V).
        """
        return linear(self.norm(self.activation(self.dense(hidden))), word_embeddings, self.bias)


class PairHead(nn.Module):
    """Two-way classifier on the pooled output: is B the next segment (NSP) / in order (SOP)?

    Args:
        dim: H, the hidden size.
        dropout: the dropout on the pooled vector.
    """

    def __init__(self, dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(dim, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """Classify the sentence pair.

        Args:
            pooled: (B, H) pooled vectors.

        Returns:
            Logits (B, 2).
        """
        return self.classifier(self.dropout(pooled))  # (B, 2)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Average of the hidden states (B, T, H) over real tokens (mask 1) -> (B, H).

    Args:
        hidden: (B, T, H) hidden states.
        attention_mask: (B, T), 1 = token, 0 = padding; None: every position.

    Returns:
        (B, H) means.
    """
    if attention_mask is None:
        return hidden.mean(dim=1)
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)


@torch.inference_mode()
def sentence_embeddings(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    normalize: bool = True,
) -> torch.Tensor:
    """Sentence vectors (B, H) of an encoder: mean of the last hidden states over real tokens.

    With ``normalize`` each vector is scaled to unit L2 norm, so a dot product is the
    cosine similarity (as Sentence-BERT models such as all-MiniLM-L6-v2 are used).

    Args:
        model: the encoder.
        input_ids: (B, T).
        attention_mask: (B, T), 1 = token, 0 = padding, or None.
        token_type_ids: (B, T) segments, or None.
        normalize: scale each vector to unit L2 norm.

    Returns:
        (B, H) vectors.
    """
    output = model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    pooled = mean_pool(output.last_hidden_state, attention_mask)
    return F.normalize(pooled, p=2, dim=-1) if normalize else pooled
