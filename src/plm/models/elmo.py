"""ELMo: a character-aware bidirectional LSTM language model (Peters et al., 2018).

Each word's context-independent representation x_k comes from its characters: a
char-CNN with several filter widths, max-pooled over the word, highway layers and a
projection. A forward LSTM language model reads x_1..x_k and predicts t_{k+1}; a
backward one reads x_N..x_k and predicts t_{k-1}. Each has L layers of ``nn.LSTM``
with a projection (``proj_size``; the paper's 4096 units projected to 512), joined by
residual connections from the second layer on; the two directions share the token
representation and the softmax. Training maximises the sum of both log-likelihoods.

For a task, each word gets the 2L+1 representations of the seed, packed as L+1 layers
([`Elmo.embed`][plm.models.elmo.Elmo.embed]): the token layer [x_k; x_k], then [h_fwd_{k,j}; h_bwd_{k,j}] for
each LSTM layer j; [`ScalarMix`][plm.models.scalar_mix.ScalarMix] mixes them.

AllenNLP's released biLMs ([`plm.hf.allennlp_elmo`][plm.hf.allennlp_elmo]) differ in three switches of the
config: their cells and projected states are clipped ([`ClippedLSTM`][plm.models.elmo.ClippedLSTM]), they read
each sentence between ``<S>`` and ``</S>``, and they come without their softmax.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from plm.errors import PLMError
from plm.models.base import PretrainedModel
from plm.models.recipe import Hyperparameters, PaperScale, PretrainingRecipe
from plm.progress import progress_bar
from plm.tokenization.characters import CHARACTERS, MAX_CHARACTERS, PADDING, add_sentence_boundaries, batch_to_ids

# On the CPU, torch runs an LSTM with proj_size through its own fused kernel instead of oneDNN's, and says so.
warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")

PAPER_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))


@dataclass(frozen=True)
class ElmoConfig:
    """The biLM's shape; the defaults are the paper's (AllenNLP's "original").

    Sizes below 1, negative highway layers, filters outside (width 1..MAX_CHARACTERS, count >= 1), an
    ``lstm_dim`` not above ``projection_dim``, cutoffs that do not increase within the vocabulary, or a clip
    that is not positive are a PLMError.

    Attributes:
        ADDED_FIELDS: fields added since models were first saved, with the value a model saved before them had.
        vocab_size: the words the softmax predicts (the 1B Word Benchmark's by default); unused without one.
        context_length: only bounds the training sequences (``--block-size``); the LSTMs read sentences of any
            length.
        char_dim: the width of the character embeddings.
        filters: (width, count) pairs of the char-CNN.
        highway_layers: the highway layers after the char-CNN.
        projection_dim: the width of the token representation and of the LSTMs' projected states.
        lstm_dim: the LSTMs' units.
        layers: L, the LSTM layers of each direction.
        dropout: the dropout on the LSTMs' inputs and before the softmax.
        adaptive_cutoffs: switch the full softmax for ``nn.AdaptiveLogSoftmaxWithLoss`` with those cluster
            boundaries (word ids run from the most frequent word down, as it needs); empty: the full softmax.
        cell_clip: clip each LSTM cell to [-cell_clip, cell_clip] at every step, as bilm-tf did; None: no clip.
        projection_clip: clip each projected state likewise; None: no clip.
        sentence_boundaries: the biLM reads each sentence between ``<S>`` and ``</S>`` and drops their states
            from its outputs, as AllenNLP's does; False: it reads the words given.
        softmax: False for a biLM without its softmax (AllenNLP's released weights keep none): it embeds, but
            computes no language-model loss.
    """

    ADDED_FIELDS: ClassVar[dict[str, object]] = {
        "cell_clip": None, "projection_clip": None, "sentence_boundaries": False, "softmax": True
    }

    vocab_size: int = 793471  # the 1B Word Benchmark's
    context_length: int = 256
    char_dim: int = 16
    filters: tuple[tuple[int, int], ...] = PAPER_FILTERS
    highway_layers: int = 2
    projection_dim: int = 512
    lstm_dim: int = 4096
    layers: int = 2
    dropout: float = 0.1
    adaptive_cutoffs: tuple[int, ...] = ()
    cell_clip: float | None = None
    projection_clip: float | None = None
    sentence_boundaries: bool = False
    softmax: bool = True

    def __post_init__(self) -> None:
        for name in ("char_dim", "projection_dim", "lstm_dim"):
            if getattr(self, name) < 1:
                raise PLMError(f"ElmoConfig.{name} should be positive, got {getattr(self, name)}")
        if self.highway_layers < 0:
            raise PLMError(f"ElmoConfig.highway_layers should be >= 0, got {self.highway_layers}")
        if not self.filters or any(not (1 <= width <= MAX_CHARACTERS and count >= 1) for width, count in self.filters):
            raise PLMError(
                f"ElmoConfig.filters should be (width 1..{MAX_CHARACTERS}, count >= 1) pairs, got {self.filters}"
            )
        if self.lstm_dim <= self.projection_dim:
            raise PLMError(f"ElmoConfig.lstm_dim ({self.lstm_dim}) must exceed projection_dim ({self.projection_dim})")
        cutoffs = self.adaptive_cutoffs
        if cutoffs and (list(cutoffs) != sorted(set(cutoffs)) or cutoffs[0] < 1 or cutoffs[-1] >= self.vocab_size):
            raise PLMError(
                f"ElmoConfig.adaptive_cutoffs should increase within 1..{self.vocab_size - 1}, got {cutoffs}"
            )
        for name in ("cell_clip", "projection_clip"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise PLMError(f"ElmoConfig.{name} should be positive or None, got {getattr(self, name)}")


PRESETS = {
    # The paper's biLM (AllenNLP's "original"): 4096 units, 512-dim projections, 2 layers, 2 highway layers.
    "elmo-original": ElmoConfig(),
    # Small ones for CPU work; the vocabulary follows the word vocabulary they are trained with.
    "elmo-mini": ElmoConfig(vocab_size=8192, filters=((1, 32), (2, 32), (3, 64), (4, 128), (5, 128)),
                            highway_layers=1, projection_dim=128, lstm_dim=512),
    "elmo-micro": ElmoConfig(vocab_size=512, context_length=64, char_dim=4, filters=((1, 4), (2, 4), (3, 8)),
                             highway_layers=1, projection_dim=8, lstm_dim=16),
}

RECIPE = PretrainingRecipe(
    preset="elmo-mini",
    tokenizer="words",
    objective="bilm",
    objectives=("bilm",),
    # CPU scale: Adam learns a small biLM in minutes where Adagrad needs many epochs.
    hyperparameters=Hyperparameters(lr=2e-3, min_lr=2e-4, warmup=100, schedule="cosine", betas=(0.9, 0.999),
                                    weight_decay=0.0),
    # The paper gives no optimizer; its code (bilm-tf, train_elmo.py) uses Adagrad at 0.2 with accumulators
    # starting at 1, no schedule, batches of 128 x 20 words, dropout 0.1, gradients clipped at norm 10.
    paper=Hyperparameters(optimizer="adagrad", lr=0.2, min_lr=0.2, warmup=0, schedule="constant", eps=1e-10,
                          weight_decay=0.0),
    source="bilm-tf train_elmo.py (the released code of Peters et al., 2018)",
    block_size=20,  # bilm-tf unrolls 20 words
    # bilm-tf's train_elmo.py: batch_size 128 per GPU on n_gpus 3, so 384 sequences a step, of unroll_steps 20
    # words, for n_epochs 10 (seed 000 line 929: trained for 10 epochs on the 1B Word Benchmark).
    paper_scale=PaperScale(batch_size=128 * 3, block_size=20, epochs=10, source="bilm-tf train_elmo.py"),
)


class Highway(nn.Module):
    """y = g * x + (1 - g) * relu(W x), g = sigmoid(W_g x), per layer (Srivastava et al., 2015).

    The gates' biases start at 1, toward carrying x through.

    Args:
        dim: the width of x.
        layers: the highway layers.
    """

    def __init__(self, dim: int, layers: int) -> None:
        super().__init__()
        linears = [nn.Linear(dim, 2 * dim) for _ in range(layers)]
        for linear in linears:
            nn.init.constant_(linear.bias[dim:], 1.0)  # the gate starts open toward carrying x through
        self.layers = nn.ModuleList(linears)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the highway layers.

        Args:
            x: (..., dim).

        Returns:
            (..., dim).
        """
        for layer in self.layers:
            transformed, gate = layer(x).chunk(2, dim=-1)
            gate = torch.sigmoid(gate)
            x = gate * x + (1 - gate) * F.relu(transformed)
        return x


class CharacterCNN(nn.Module):
    """Char ids (batch, words, chars) -> token representations x_k (batch, words, projection_dim).

    A word's representation depends on its characters alone, so each distinct spelling
    in the batch is encoded once and copied to its positions: in a 16 x 20 training
    batch of WikiText-2 about 45% of the words are repeats ("the", ",", "."), and
    encoding them again took a sixth of a step.

    Args:
        config: the biLM's config (character width, filters, highway layers, projection).
    """

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__()
        self.embedding = nn.Embedding(CHARACTERS, config.char_dim)
        nn.init.uniform_(self.embedding.weight, -1.0, 1.0)  # as bilm-tf
        self.convolutions = nn.ModuleList(nn.Conv1d(config.char_dim, count, width) for width, count in config.filters)
        self.widest = max(width for width, _ in config.filters)
        width = sum(count for _, count in config.filters)
        self.highway = Highway(width, config.highway_layers)
        self.projection = nn.Linear(width, config.projection_dim)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        """Embed each word from its characters: convolutions max-pooled over the word, highway, projection.

        Args:
            chars: (batch, words, chars) character ids, padding `plm.tokenization.characters.PADDING`.

        Returns:
            (batch, words, projection_dim).
        """
        batch, words, _ = chars.shape
        # Windows past the longest word plus the widest filter are all padding and so are those just before
        # them: cutting them off leaves every max the same and saves most of the work (words are short).
        longest = int((chars != PADDING).sum(dim=-1).max()) if chars.numel() else 0
        chars = chars[..., : longest + self.widest]
        # spellings: (U, chars), the distinct rows; occurrence: (B * W,), each word's row in spellings
        spellings, occurrence = torch.unique(chars.reshape(batch * words, chars.shape[-1]), dim=0, return_inverse=True)
        x = self.embedding(spellings)  # (U, chars, char_dim)
        convolutions = cast(Iterable[nn.Conv1d], self.convolutions)  # a ModuleList does not type its modules
        pooled = torch.cat([F.relu(convolve(x, conv).amax(dim=1)) for conv in convolutions], dim=-1)
        return self.projection(self.highway(pooled))[occurrence].view(batch, words, -1)  # pooled: (U, filters)


def convolve(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """``conv`` over (N, chars, dim) as one matmul of the windows: (N, chars - width + 1, filters).

    The same numbers as ``conv(x.transpose(1, 2)).transpose(1, 2)``, several times
    faster on the CPU for these few input channels. Max-pooling comes next, then the
    relu (the same as relu first: it is monotone).

    Args:
        x: (N, chars, dim) character embeddings.
        conv: the convolution, with a bias.

    Returns:
        (N, chars - width + 1, filters).
    """
    count, dim, width = conv.weight.shape
    assert conv.bias is not None  # CharacterCNN's convolutions have one
    # windows: (N, chars - width + 1, dim * width), in the weight's (dim, width) order
    windows = x.unfold(1, width, 1).flatten(2)
    return torch.addmm(conv.bias, windows.flatten(0, 1), conv.weight.view(count, dim * width).t()).view(
        *windows.shape[:2], count
    )


class ClippedLSTM(nn.LSTM):
    """One ``nn.LSTM`` layer with a projection whose cell and projected state are clipped: bilm-tf's cell.

    c_t = f * c_{t-1} + i * g, clipped to [-cell_clip, cell_clip]; h_t = W_hr (o * tanh(c_t)), clipped to
    [-projection_clip, projection_clip]: TensorFlow's ``LSTMCell`` with ``cell_clip`` and ``proj_clip``, which
    the released ELMo biLMs were trained with. ``nn.LSTM`` cannot clip inside its recurrence, so this runs it a
    step at a time; the parameters are ``nn.LSTM``'s, so it initialises, saves and loads as one.

    Args:
        dim: the width of the input and of the projected state.
        lstm_dim: the units.
        cell_clip: the cell's bound, or None.
        projection_clip: the projected state's bound, or None.
    """

    def __init__(self, dim: int, lstm_dim: int, cell_clip: float | None, projection_clip: float | None) -> None:
        super().__init__(dim, lstm_dim, proj_size=dim, batch_first=True)
        self.cell_clip, self.projection_clip = cell_clip, projection_clip

    def forward(  # type: ignore[override]  # nn.LSTM.forward also takes packed sequences and initial states
        self, x: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Run the layer over ``x`` from zero states.

        Args:
            x: (batch, time, dim).

        Returns:
            The states (batch, time, dim), and the last state and cell as ``nn.LSTM`` returns them:
            (1, batch, dim) and (1, batch, lstm_dim).
        """
        weight_ih, weight_hh, bias_ih, bias_hh, weight_hr = self.all_weights[0]  # the one layer's
        # The input's part of the gates, every step at once: (batch, time, 4 * lstm_dim), in torch's order i, f, g, o.
        gates_from_input = F.linear(x, weight_ih, bias_ih + bias_hh)
        h = x.new_zeros(x.shape[0], self.proj_size)
        c = x.new_zeros(x.shape[0], self.hidden_size)
        states = []
        for step in gates_from_input.unbind(1):
            i, f, g, o = (step + h @ weight_hh.t()).chunk(4, dim=-1)
            c = clip(torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g), self.cell_clip)
            h = clip((torch.sigmoid(o) * torch.tanh(c)) @ weight_hr.t(), self.projection_clip)
            states.append(h)
        return torch.stack(states, dim=1), (h[None], c[None])


def clip(x: torch.Tensor, bound: float | None) -> torch.Tensor:
    """``x`` clipped to [-bound, bound]; unchanged when ``bound`` is None.

    Args:
        x: any tensor.
        bound: the bound, or None.

    Returns:
        The clipped tensor.
    """
    return x if bound is None else x.clamp(-bound, bound)


@dataclass
class BiLMOutput:
    """What the biLM computes for a batch; the losses are summed over words, present when targets were given.

    Attributes:
        token: x_k (batch, words, projection_dim).
        forward: the forward LSTM's states, one (batch, words, projection_dim) tensor per layer.
        backward: the backward LSTM's states, likewise.
        forward_loss: the forward LM's summed negative log-likelihood, or None.
        backward_loss: the backward LM's, or None.
    """

    token: torch.Tensor
    forward: list[torch.Tensor]
    backward: list[torch.Tensor]
    forward_loss: torch.Tensor | None = None
    backward_loss: torch.Tensor | None = None

    def layers(self) -> torch.Tensor:
        """(batch, L + 1, words, 2 * projection_dim): [x; x], then [forward_j; backward_j] for j = 1..L.

        Returns:
            The stacked layers.
        """
        stacked = [torch.cat([self.token, self.token], dim=-1)]
        stacked += [torch.cat(pair, dim=-1) for pair in zip(self.forward, self.backward)]
        return torch.stack(stacked, dim=1)


class Elmo(PretrainedModel):
    """ELMo's biLM: a char-CNN token encoder, a forward and a backward LSTM stack, one shared softmax (or none).

    Args:
        config: the model's config.
    """
    family = "elmo"
    config_class = ElmoConfig

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        self.token_encoder = CharacterCNN(config)
        self.forward_lstms = self._lstm_stack(config)
        self.backward_lstms = self._lstm_stack(config)
        self.dropout = nn.Dropout(config.dropout)
        self.softmax: nn.AdaptiveLogSoftmaxWithLoss | nn.Linear | None = None
        if config.softmax and config.adaptive_cutoffs:
            self.softmax = nn.AdaptiveLogSoftmaxWithLoss(
                config.projection_dim, config.vocab_size, list(config.adaptive_cutoffs), div_value=4.0
            )
        elif config.softmax:
            self.softmax = nn.Linear(config.projection_dim, config.vocab_size)

    @staticmethod
    def _lstm_stack(config: ElmoConfig) -> nn.ModuleList:
        """L one-layer LSTMs (not one L-layer LSTM): the residual connections need each layer's output."""
        dim, lstm_dim = config.projection_dim, config.lstm_dim
        if config.cell_clip is None and config.projection_clip is None:  # torch's fused LSTM
            return nn.ModuleList(nn.LSTM(dim, lstm_dim, proj_size=dim, batch_first=True) for _ in range(config.layers))
        return nn.ModuleList(
            ClippedLSTM(dim, lstm_dim, config.cell_clip, config.projection_clip) for _ in range(config.layers)
        )

    def forward(
        self,
        chars: torch.Tensor,
        mask: torch.Tensor | None = None,
        next_words: torch.Tensor | None = None,
        previous_words: torch.Tensor | None = None,
    ) -> BiLMOutput:
        """The biLM over ``chars``, (batch, words, chars) from `batch_to_ids`.

        States at padding positions are left as computed (not zeroed): [`embed`][plm.models.elmo.Elmo.embed] zeroes
        them. With ``sentence_boundaries`` the LSTMs read ``<S>`` first and ``</S>`` after each sentence's last word,
        and the outputs leave them out: they are as wide as ``chars``.

        Args:
            chars: (batch, words, chars) character ids.
            mask: (batch, words), 0 at padding; None: every row is full. The backward LM reads each row from its
                last word.
            next_words: (batch, words) word ids the forward LM predicts at each position, or None.
            previous_words: (batch, words) word ids the backward LM predicts, or None.

        Returns:
            The token layer and each layer's states, with ``forward_loss`` and ``backward_loss`` (summed negative
            log-likelihoods) for the targets given.

        Raises:
            PLMError: targets given to a biLM without a softmax.
        """
        lengths = None if mask is None else mask.sum(dim=1)
        if self.config.sentence_boundaries:
            chars, lengths = add_sentence_boundaries(chars, lengths)
        token = self.token_encoder(chars)
        forward = self._run(self.forward_lstms, token)
        # The backward LM reads each sentence from its last word: reversed within its length, padding stays behind.
        backward = [reverse(h, lengths) for h in self._run(self.backward_lstms, reverse(token, lengths))]
        if self.config.sentence_boundaries:  # drop the positions of <S> and </S>: (batch, words, dim) again
            token, forward, backward = token[:, 1:-1], [h[:, 1:-1] for h in forward], [h[:, 1:-1] for h in backward]
        output = BiLMOutput(token, forward, backward)
        if next_words is not None:
            output.forward_loss = self.word_loss(forward[-1], next_words)
        if previous_words is not None:
            output.backward_loss = self.word_loss(backward[-1], previous_words)
        return output

    def _run(self, lstms: nn.ModuleList, token: torch.Tensor) -> list[torch.Tensor]:
        """Each layer's states (batch, words, projection_dim); from the second layer on, input + LSTM(input)."""
        states, h = [], token
        for index, lstm in enumerate(lstms):
            out, _ = lstm(self.dropout(h))
            h = out + h if index > 0 else out
            states.append(h)
        return states

    def word_loss(self, states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Summed -log p(target | state) through the shared softmax; states (B, W, dim), targets (B, W).

        Args:
            states: (B, W, projection_dim), the top layer's states.
            targets: (B, W) word ids.

        Returns:
            The summed loss, a float32 scalar.

        Raises:
            PLMError: a biLM without a softmax.
        """
        if self.softmax is None:
            raise PLMError("this ELMo has no softmax (AllenNLP's released weights keep none): it embeds words, "
                           "but computes no language-model loss")
        states, targets = self.dropout(states).flatten(0, 1), targets.flatten()
        if isinstance(self.softmax, nn.AdaptiveLogSoftmaxWithLoss):
            return -self.softmax(states.float(), targets).output.sum()
        return F.cross_entropy(self.softmax(states).float(), targets, reduction="sum")

    @torch.no_grad()
    def embed(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        """The frozen biLM's features of ``sentences`` (lists of words), as ELMo hands them to a task.

        No dropout and no gradient, whatever mode the model is in.

        Args:
            sentences: the sentences, each a list of words.

        Returns:
            (batch, L + 1, max_words, 2 * projection_dim) float: layer 0 is the token layer repeated to that width,
            layers 1..L hold the forward state in the first half and the backward state in the second. Padding
            positions are zero vectors.

        Raises:
            PLMError: ``sentences`` that are not lists of non-empty strings.
        """
        chars, mask = batch_to_ids(sentences)
        if chars.shape[1] == 0:  # no words at all
            return torch.zeros(len(sentences), self.config.layers + 1, 0, 2 * self.config.projection_dim)
        chars, mask = chars.to(self.device), mask.to(self.device)
        with evaluating(self):
            layers = self(chars, mask).layers()
        return (layers * mask[:, None, :, None]).float()

    @torch.no_grad()
    def token_vectors(self, words: Sequence[str], batch_size: int = 4096) -> torch.Tensor:
        """The context-free token representation x of each word (len(words), projection_dim): the char-CNN alone.

        Args:
            words: the words.
            batch_size: words encoded at once.

        Returns:
            (len(words), projection_dim) float.

        Raises:
            PLMError: words that are not non-empty strings.
        """
        vectors = []
        with evaluating(self):
            for start in range(0, len(words), batch_size):
                chars, _ = batch_to_ids([words[start : start + batch_size]])  # one "sentence" of up to batch_size words
                vectors.append(self.token_encoder(chars.to(self.device))[0].float())
        return torch.cat(vectors) if vectors else torch.zeros(0, self.config.projection_dim)


def reverse(x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """Reverse (batch, time, dim) along time within each row's length; positions past it stay where they are.

    Its own inverse. Without lengths every row is full and this is a flip.

    Args:
        x: (batch, time, dim).
        lengths: (batch,) each row's length, or None.

    Returns:
        The reversed tensor, shaped as ``x``.
    """
    if lengths is None:
        return x.flip(1)
    positions = torch.arange(x.shape[1], device=x.device)
    index = lengths[:, None] - 1 - positions  # (batch, time)
    index = torch.where(index >= 0, index, positions)
    return x.gather(1, index[..., None].expand_as(x))


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode for the block, then back in the mode it was in.

    Args:
        model: the model.

    Yields:
        Nothing; the mode is restored when the block ends.
    """
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


# Using the features: whole files, mixes, and the nearest-neighbour demo ----------------------------

MIXES = ("average", "top", "last")


def embed_sentences(model: Elmo, sentences: Sequence[Sequence[str]], mix: str | None = None,
                    batch_size: int = 64, progress: bool = False) -> torch.Tensor:
    """`Elmo.embed` over many sentences in batches, padded to the longest; optionally mixed.

    Args:
        model: the ELMo.
        sentences: the sentences, each a list of words.
        mix: None keeps the L + 1 layers; ``average`` is their mean (a scalar mix with equal weights,
            gamma = 1); ``top`` (or ``last``) the top LSTM layer.
        batch_size: sentences per batch.
        progress: show a progress bar.

    Returns:
        (N, L + 1, words, 2 * dim) without a mix, else (N, words, 2 * dim), on the CPU; padding stays zero.

    Raises:
        PLMError: an unknown ``mix``, or sentences that are not lists of non-empty strings.
    """
    if mix is not None and mix not in MIXES:
        raise PLMError(f"unknown mix {mix!r}; choose one of {', '.join(MIXES)}")
    width = max((len(sentence) for sentence in sentences), default=0)
    parts = []
    for start in progress_bar(range(0, len(sentences), batch_size), disable=not progress, desc="embed", unit="batch"):
        layers = model.embed(sentences[start : start + batch_size]).cpu()
        parts.append(F.pad(layers, (0, 0, 0, width - layers.shape[2])))  # (batch, L + 1, width, 2 * dim)
    layers = torch.cat(parts) if parts else torch.zeros(0, model.config.layers + 1, 0, 2 * model.config.projection_dim)
    if mix == "average":
        return layers.mean(dim=1)
    if mix in ("top", "last"):
        return layers[:, -1]
    return layers


def contextual_neighbors(model: Elmo, sentences: Sequence[Sequence[str]], word: str, query: Sequence[str],
                         neighbors: int = 5) -> list[tuple[int, float]]:
    """The sentences whose top-layer vector of ``word`` is nearest (cosine) to its vector in ``query``.

    A sentence equal to the query is left out. The vector of a sentence is that of the word's first
    occurrence.

    Args:
        model: the ELMo.
        sentences: the sentences to search, each a list of words.
        word: the word.
        query: a sentence that holds ``word``.
        neighbors: the most neighbours returned.

    Returns:
        (sentence index, similarity) pairs, nearest first.

    Raises:
        PLMError: a query without ``word``.
    """
    candidates = [
        index for index, sentence in enumerate(sentences) if word in sentence and list(sentence) != list(query)
    ]
    if word not in query:
        raise PLMError(f"the query sentence does not contain {word!r}")
    vectors = _occurrence_vectors(model, [query, *(sentences[index] for index in candidates)], word)
    similarity = vectors[1:] @ vectors[0]
    order = similarity.argsort(descending=True)[:neighbors].tolist()
    return [(candidates[i], similarity[i].item()) for i in order]


def static_neighbors(model: Elmo, word: str, vocabulary: Sequence[str], neighbors: int = 5) -> list[tuple[str, float]]:
    """The words of ``vocabulary`` nearest (cosine) to ``word`` by the context-free token layer.

    Args:
        model: the ELMo.
        word: the word.
        vocabulary: the candidates (``word`` itself and repeats left out).
        neighbors: the most neighbours returned.

    Returns:
        (word, similarity) pairs, nearest first.
    """
    others = [other for other in dict.fromkeys(vocabulary) if other != word]
    vectors = F.normalize(model.token_vectors([word, *others]), dim=-1)
    similarity = vectors[1:] @ vectors[0]
    order = similarity.argsort(descending=True)[:neighbors].tolist()
    return [(others[i], similarity[i].item()) for i in order]


def _occurrence_vectors(model: Elmo, sentences: Sequence[Sequence[str]], word: str) -> torch.Tensor:
    """Unit top-layer vectors of the first ``word`` in each sentence: (len(sentences), 2 * dim)."""
    top = embed_sentences(model, sentences, mix="top")
    positions = torch.tensor([list(sentence).index(word) for sentence in sentences])
    return F.normalize(top[torch.arange(len(sentences)), positions], dim=-1)
