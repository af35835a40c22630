"""What a task made of ELMo's layers: the learned weights of its scalar mixes (Peters et al., 2018, section 5.5).

A task that reads ELMo learns ELMo_k = gamma * sum_j s_j h_{k,j} with s = softmax of its own scalars, one mix at the
input of its BiLSTM and, with ELMo at the output too, a second mix there (see
[`FeatureTagger`][plm.tasks.feature_based.FeatureTagger]). The paper's Figure 2 shows these s_j for each task and
each place: at the input the tasks favour the first LSTM layer (most of all coreference and SQuAD), at the output
the weights are more even, with some lean to the lower layers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from plm.apps.elmo_probes import layer_names
from plm.errors import PLMError, with_article
from plm.models.base import PretrainedModel
from plm.models.scalar_mix import ScalarMix
from plm.storage.atomic_files import write_png
from plm.tasks.bilstm import LayerCombination
from plm.tasks.feature_based import FeatureTagger


@dataclass(frozen=True)
class MixWeights:
    """One of ELMo's scalar mixes in a fine-tuned model.

    Attributes:
        place: where ELMo_k joins the task model: ``input`` ([x_k; ELMo_k], the BiLSTM's input) or ``output``
            ([h_k; ELMo_k], beside the BiLSTM's states).
        layers: the biLM's layers: ``token``, ``lstm 1`` .. ``lstm L``.
        weights: s_j = softmax(scalars)_j of each layer; they sum to 1.
        gamma: the scale of the mix.
    """

    place: str
    layers: tuple[str, ...]
    weights: tuple[float, ...]
    gamma: float


def elmo_mix_weights(model: PretrainedModel) -> list[MixWeights]:
    """The softmax-normalised layer weights and gamma of each of ELMo's scalar mixes in a feature-based model.

    Args:
        model: a [`FeatureTagger`][plm.tasks.feature_based.FeatureTagger] fine-tuned with an ELMo.

    Returns:
        The input mix, then the output mix where the model has ELMo at its BiLSTM's output.

    Raises:
        PLMError: a model that is not feature-based, or one without an ELMo.
    """
    if not isinstance(model, FeatureTagger):
        raise PLMError(f"{with_article(model.family)} model has no ELMo scalar mix; fine-tune a feature-based model "
                       "with an ELMo for one")
    if model.config.elmo is None:
        raise PLMError("the feature-based model reads no ELMo, so it has no ELMo scalar mix")
    places = (("input", model.tagger.combinations[1]),  # ELMo is the second feature source, the encoder the first
              ("output", model.tagger.output_mix))
    return [read_mix(place, combination.mix) for place, combination in places
            if isinstance(combination, LayerCombination) and combination.mix is not None]


def read_mix(place: str, mix: ScalarMix) -> MixWeights:
    """A scalar mix's weights softmax(s) and gamma, its layers named as the biLM's.

    Args:
        place: ``input`` or ``output``.
        mix: the mix.

    Returns:
        Its weights.
    """
    weights = mix.weights.detach().float().cpu()
    return MixWeights(place, tuple(layer_names(len(weights))), tuple(weights.tolist()), float(mix.gamma.detach()))


def plot_mix_weights(mixes: Sequence[MixWeights], path: str | os.PathLike[str], title: str) -> None:
    """A PNG bar plot of each mix's layer weights, a panel per mix, the plain average 1 / (L + 1) dashed.

    Args:
        mixes: the mixes.
        path: the PNG file, written atomically.
        title: the figure's title.

    Raises:
        PLMError: the file cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, panels = pyplot.subplots(1, len(mixes), figsize=(3.2 * len(mixes) + 0.8, 3.4), sharey=True,
                                     squeeze=False)
    for axes, mix in zip(panels[0], mixes):
        axes.bar(range(len(mix.weights)), mix.weights, color="tab:blue")
        axes.axhline(1 / len(mix.weights), color="gray", linestyle="dashed", linewidth=1)
        axes.set_xticks(range(len(mix.layers)), mix.layers)
        axes.set_ylim(0, 1)
        axes.set_title(f"{mix.place} (gamma {mix.gamma:.3f})")
    panels[0][0].set_ylabel("softmax-normalised weight s_j")
    figure.suptitle(title)
    figure.tight_layout()
    write_png(figure, path)
