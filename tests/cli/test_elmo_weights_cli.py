"""plm elmo weights: the softmax-normalised layer weights and gamma of ELMo's scalar mixes in a fine-tuned model (the
paper's Figure 2), as a table, as JSON and as a bar plot."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from plm.apps.elmo_weights import elmo_mix_weights
from plm.cli.main import main
from plm.errors import PLMError
from plm.models import from_preset
from plm.storage.checkpoint import save_model
from plm.tasks.feature_based import feature_tagger

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small classifier fine-tuned on the built-in task with an ELMo at the BiLSTM's input and output, at a
    learning rate that moves the mixes' scalars away from their start (the plain average)."""
    directory = tmp_path_factory.mktemp("elmo-weights")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(1)
        save_model(from_preset("elmo-micro"), directory / "elmo")
        assert main(["finetune", "--task", "classify", "--features", "0", "--elmo", str(directory / "elmo"),
                     "--elmo-output", "--synthetic-size", "16", "--batch-size", "8", "--epochs", "2", "--lr", "5e-2",
                     "--lstm-dim", "8", "--no-progress", "--out", str(directory / "run")]) == 0
    finally:
        torch.set_num_threads(threads)
    return directory


def softmax(scalars: np.ndarray) -> np.ndarray:
    return np.exp(scalars) / np.exp(scalars).sum()


def test_the_printed_weights_are_the_softmax_of_the_saved_scalars(fine_tuned: Path, capsys) -> None:
    run, plot, numbers = fine_tuned / "run", fine_tuned / "weights.png", fine_tuned / "weights.json"
    capsys.readouterr()
    assert main(["elmo", "weights", "--model", str(run), "--out", str(plot), "--json", str(numbers)]) == 0
    printed = capsys.readouterr().out
    saved = load_file(run / "best" / "model.safetensors")  # the run's best model, read apart from plm
    expected = {place: (softmax(saved[f"tagger.{key}.mix.scalars"]), float(saved[f"tagger.{key}.mix.gamma"]))
                for place, key in (("input", "combinations.1"), ("output", "output_mix"))}
    assert all(abs(weights - 1 / 3).max() > 1e-3 for weights, _ in expected.values())  # trained away from the average
    rows = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in printed.splitlines()
            if re.match(r"  (input|output) ", line)}
    assert re.search(r"mix\s+token\s+lstm 1\s+lstm 2\s+gamma", printed)
    written = json.loads(numbers.read_text())
    for place, (weights, gamma) in expected.items():
        assert rows[place] == pytest.approx([*weights, gamma], abs=6e-5)  # printed to 4 places
        assert list(written[place]["weights"]) == ["token", "lstm 1", "lstm 2"]
        assert list(written[place]["weights"].values()) == pytest.approx(weights, abs=1e-6)
        assert written[place]["gamma"] == pytest.approx(gamma)
    assert plot.read_bytes()[:8] == PNG and plot.stat().st_size > 5000


def test_without_elmo_at_the_output_there_is_the_input_mix_alone_and_the_encoder_s_mix_is_not_elmo_s() -> None:
    torch.manual_seed(0)
    model = feature_tagger(from_preset("bert-micro"), (0, -1), 2, combine="mix", elmo=from_preset("elmo-micro"))
    with torch.no_grad():
        model.tagger.combinations[0].mix.scalars.copy_(torch.tensor([3.0, -3.0]))  # the encoder's two layers
        model.tagger.combinations[1].mix.scalars.copy_(torch.tensor([0.0, 1.0, 2.0]))
        model.tagger.combinations[1].mix.gamma.fill_(0.5)
    (mix,) = elmo_mix_weights(model)
    assert (mix.place, mix.layers, mix.gamma) == ("input", ("token", "lstm 1", "lstm 2"), 0.5)
    assert mix.weights == pytest.approx(softmax(np.array([0.0, 1.0, 2.0])))
    with pytest.raises(PLMError, match="reads no ELMo"):
        elmo_mix_weights(feature_tagger(from_preset("bert-micro"), (0,), 2))


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "{elmo}"], "an elmo model has no ELMo scalar mix"),
    (["--model", "{run}", "--out", "{dir}/weights.jpg"], "the plot is a PNG image"),
])
def test_wrong_uses_are_one_line_and_exit_2(fine_tuned: Path, capsys, argv: list[str], message: str) -> None:
    names = {"elmo": fine_tuned / "elmo", "run": fine_tuned / "run", "dir": fine_tuned}
    code = main(["elmo", "weights", *(word.format(**names) for word in argv)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
