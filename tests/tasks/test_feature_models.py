"""The feature-based model of every task (ELMo 3.3): a frozen encoder's and a frozen ELMo's features of each word,
a BiLSTM, and an end per task: logits per word (tag), [max; mean]-pooled states (classify, pair, regress), span
boundaries (qa); with --elmo-output, ELMo again at the BiLSTM's output."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

from plm.cli.main import main
from plm.models import from_preset
from plm.storage.checkpoint import load_model, save_model
from plm.tasks.encoding import collate
from plm.tasks.feature_based import NO_BOUNDARY, feature_tagger
from plm.tasks.fine_tuned import load_task_model
from plm.tasks.readers import Answer, QAExample, TaggedSentence, TextExample
from plm.tasks.synthetic import synthetic_task
from plm.tasks.task_objective import build_task, encode_all, forward, model_inputs
from plm.tokenization.tokenizer import Tokenizer
from plm.training.optim import build_optimizer

VOCABULARY = "[PAD] [UNK] [CLS] [SEP] [MASK] the a cat dog sees run ##ner ##ning ##s jump ##ing".split()
FEATURES = (0, -1)  # the encoder's layers read, concatenated
HIDDEN = 8  # the BiLSTM's units per direction


@dataclass(frozen=True)
class Case:
    """One task's example, and what a reader finds in it by hand: its words and their first and last pieces.

    The example sits in a batch beside a longer one, whose padding must not reach it.
    """

    task: str
    labels: tuple[str, ...]
    example: Any
    longer: Any
    words: list[str]  # as written: ELMo reads "Runner", the lowercasing tokenizer "runner"
    firsts: list[int]
    lasts: list[int]


CASES = {
    # [CLS] the run ##ner sees a jump ##ing dog [SEP]
    "classify": Case("classify", ("bad", "good"), TextExample("The Runner sees a jumping dog", None, "good"),
                     TextExample("the cat sees a dog and the dog sees the running cat", None, "bad"),
                     ["The", "Runner", "sees", "a", "jumping", "dog"], [1, 2, 4, 5, 6, 8], [1, 3, 4, 5, 7, 8]),
    # [CLS] the run ##ner sees [SEP] a cat run ##s [SEP]: A's words, then B's
    "pair": Case("pair", ("first", "second"), TextExample("the Runner sees", "a cat runs", "first"),
                 TextExample("the cat sees a dog", "a dog sees the running cat", "second"),
                 ["the", "Runner", "sees", "a", "cat", "runs"], [1, 2, 4, 6, 7, 8], [1, 3, 4, 6, 7, 9]),
    # [CLS] a cat run ##s [SEP]
    "regress": Case("regress", (), TextExample("a Cat runs", None, 2.0),
                    TextExample("the dog sees a cat and the cat sees the dog", None, 1.0),
                    ["a", "Cat", "runs"], [1, 2, 3], [1, 2, 4]),
    # [CLS] which dog ? [SEP] the run ##ner sees a jump ##ing dog . [SEP]: the question's words, then the context's
    "qa": Case("qa", (), QAExample("q0", "Which dog ?", "the Runner sees a jumping dog .", (Answer("jumping", 18),)),
               QAExample("q1", "which cat ?", "a dog sees the cat and the running cat sees a dog .",
                         (Answer("running cat", 27),)),
               ["Which", "dog", "?", "the", "Runner", "sees", "a", "jumping", "dog", "."],
               [1, 2, 3, 5, 6, 8, 9, 10, 12, 13], [1, 2, 3, 5, 7, 8, 9, 11, 12, 13]),
    # [CLS] the run ##ner sees [SEP]
    "tag": Case("tag", ("O", "B-PER"), TaggedSentence(("The", "Runner", "sees"), ("O", "B-PER", "O")),
                TaggedSentence(("a", "cat", "sees", "the", "jumping", "dog"), ("O", "B-PER", "O", "O", "O", "B-PER")),
                ["The", "Runner", "sees"], [1, 2, 4], [1, 3, 4]),
}


@pytest.fixture
def tokenizer(tmp_path) -> Tokenizer:
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCABULARY) + "\n")
    return Tokenizer.from_vocab_txt(path)


def frozen_models(tokenizer):
    torch.manual_seed(0)
    encoder = from_preset("bert-micro", vocab_size=len(tokenizer)).eval()
    torch.manual_seed(1)
    return encoder, from_preset("elmo-micro").eval()


def model_for(case, tokenizer, elmo_output=True, **options):
    """The case's model and task; every scalar mix away from its start (the plain average, gamma 1), each its own,
    so that a mix read with another's weights, or none, shows."""
    encoder, elmo = frozen_models(tokenizer)
    task = build_task(case.task, tokenizer, encoder, case.labels, words=True, characters=True)
    torch.manual_seed(2)
    model = feature_tagger(encoder, FEATURES, task.outputs, case.labels, elmo=elmo, task=task.head,
                           elmo_output=elmo_output, hidden=HIDDEN, dropout=0.0, **options)
    with torch.no_grad():
        for k, mix in enumerate(scalar_mixes(model)):
            mix.scalars.copy_(torch.tensor([1.0, -0.5, 2.0]) * (k + 1))
            mix.gamma.fill_(0.7 + k)
    return model.eval(), task


def scalar_mixes(model):
    """ELMo's mix at the BiLSTM's input, and at its output when there is one."""
    output = model.tagger.output_mix
    return [model.tagger.combinations[1].mix] + ([output.mix] if output is not None else [])


def batch_of(case, task):
    features = encode_all(task, [case.example, case.longer])
    return features, collate([model_inputs(f) for f in features], task.tokenizer.pad_id)


def by_hand(case, model, tokenizer):
    """The BiLSTM's states of the case's example alone (W, 2 * HIDDEN (+ ELMo's)), from the frozen models and
    torch.nn's LSTM with the model's weights: the encoder's layers at the first pieces found by hand, ELMo's
    layers of the words written by hand, each scalar mix written out as gamma * sum_j softmax(s)_j h_j."""
    example = case.example
    if case.task == "qa":
        first, second = example.question, example.context
    elif case.task == "tag":
        first, second = " ".join(example.words), None
    else:
        first, second = example.text, example.text_pair
    a, b = tokenizer.encode(first), tokenizer.encode(second) if second is not None else []
    ids = [tokenizer.cls_id, *a, tokenizer.sep_id] + ([*b, tokenizer.sep_id] if b else [])
    segments = [0] * (len(a) + 2) + [1] * (len(ids) - len(a) - 2)
    ids, segments = torch.tensor([ids]), torch.tensor([segments])
    states = model.encoder(ids, torch.ones_like(ids), token_type_ids=segments, output_hidden_states=True).hidden_states
    encoder_words = torch.cat([states[layer][0, case.firsts] for layer in FEATURES], dim=-1)  # (W, 2 * 32)
    layers = model.elmo.embed([case.words])[0]  # (L + 1, W, 2 * projection)

    def mixed(mix):
        weights = torch.exp(mix.scalars) / torch.exp(mix.scalars).sum()
        return mix.gamma * sum(w * layer for w, layer in zip(weights, layers))

    mixes = scalar_mixes(model)
    words = torch.cat([encoder_words, mixed(mixes[0])], dim=-1)  # [x_k; ELMo_k]
    lstm = nn.LSTM(words.shape[-1], HIDDEN, num_layers=2, batch_first=True, bidirectional=True)
    lstm.load_state_dict(model.tagger.lstm.state_dict())
    hidden = lstm(words[None])[0][0]  # (W, 2 * HIDDEN)
    return torch.cat([hidden, mixed(mixes[1])], dim=-1) if len(mixes) == 2 else hidden  # [h_k; ELMo_k]


@pytest.mark.parametrize("name", CASES)
def test_the_output_is_the_bilstm_over_the_frozen_features_and_the_task_s_end(name, tokenizer):
    case = CASES[name]
    model, task = model_for(case, tokenizer)
    features, batch = batch_of(case, task)
    with torch.no_grad():
        output = forward(model, batch)  # as training and prediction call it
        states = by_hand(case, model, tokenizer)
        classifier = model.tagger.classifier
        if name in ("classify", "pair", "regress"):
            pooled = torch.cat([states.max(0).values, states.mean(0)])  # [max; mean] over the words
            torch.testing.assert_close(output.logits[0], classifier(pooled))
            assert output.logits.shape == (2, max(1, len(case.labels)))
        elif name == "tag":
            logits = output.logits[0, : len(features[0]["input_ids"])]
            torch.testing.assert_close(logits[case.firsts], classifier(states))
            others = [t for t in range(len(logits)) if t not in case.firsts]
            assert logits[others].abs().max() == 0
        else:
            start, end = classifier(states).unbind(-1)  # each word's
            length = len(features[0]["input_ids"])
            for logits, pieces, scores in ((output.start_logits, case.firsts, start),
                                           (output.end_logits, case.lasts, end)):
                row = logits[0, :length]
                torch.testing.assert_close(row[pieces], scores)  # a start at a word's first piece, an end at its last
                assert row[0] == 0  # [CLS]: the null answer
                others = [t for t in range(1, length) if t not in pieces]
                assert (row[others] == NO_BOUNDARY).all()  # no span starts or ends inside a word or at [SEP]


def test_a_qa_answer_inside_a_word_trains_on_the_whole_word(tokenizer):
    """"jump" of "jumping" is one piece; a model over words scores a start at "jump" and an end at "##ing" only."""
    case = CASES["qa"]
    example = QAExample("q2", case.example.question, case.example.context, (Answer("jump", 18),))
    encoder, _ = frozen_models(tokenizer)
    [pieces] = build_task("qa", tokenizer, encoder).encode(example)
    [words] = build_task("qa", tokenizer, encoder, words=True).encode(example)
    assert (pieces["start_positions"], pieces["end_positions"]) == (10, 10)
    assert (words["start_positions"], words["end_positions"]) == (10, 11)


@pytest.mark.parametrize("name", CASES)
def test_only_the_task_model_learns_the_encoder_and_elmo_stay_frozen(name, tokenizer):
    case = CASES[name]
    model, task = model_for(case, tokenizer, mix_l2=0.1)
    model.train()
    assert model.tagger.training and not model.encoder.training and not model.elmo.training  # no dropout in them
    _, batch = batch_of(case, task)
    optimizer = build_optimizer("adamw", model, 1e-2, 0.01, (0.9, 0.999), 1e-8)  # the Trainer's, with weight decay
    optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for p in model.tagger.parameters()}  # no Adam moments for the frozen models
    before = {name: value.clone() for name, value in model.state_dict().items()}
    (task.loss(forward(model, batch), batch) + model.penalty()).backward()
    for frozen in (model.encoder, model.elmo):
        assert all(p.grad is None and not p.requires_grad for p in frozen.parameters())
    for part, parameter in model.tagger.named_parameters():  # the LSTM, the end and both of ELMo's mixes
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, part
    optimizer.step()
    for part, value in model.state_dict().items():
        assert (not torch.equal(value, before[part])) == part.startswith("tagger."), part


@pytest.mark.parametrize("name", CASES)
def test_save_and_load_give_the_same_outputs_and_the_same_task(name, tokenizer, tmp_path):
    case = CASES[name]
    model, task = model_for(case, tokenizer)
    _, batch = batch_of(case, task)
    if name == "qa":  # the tau the dev set chose goes with the model
        task.threshold = 1.5
        task.calibrate(model)
    save_model(model, tmp_path / "model", tokenizer)
    loaded, loaded_task = load_task_model(tmp_path / "model")  # what plm predict and plm eval task read
    assert loaded.config == model.config
    assert loaded_task.name == {"pair": "classify"}.get(name, name)
    assert loaded_task.words and loaded_task.characters and loaded_task.labels == case.labels
    if name == "qa":
        assert loaded_task.threshold == 1.5 and not loaded_task.fit_threshold
    _, again = batch_of(case, loaded_task)  # the same words and characters
    assert again.keys() == batch.keys() and all(torch.equal(again[key], batch[key]) for key in batch)
    with torch.no_grad():
        expected, got = forward(model, batch), forward(loaded, batch)
    for field in ("logits", "start_logits", "end_logits"):
        if hasattr(expected, field):
            torch.testing.assert_close(getattr(got, field), getattr(expected, field))


def test_a_feature_tagger_saved_before_the_other_tasks_still_loads(tokenizer, tmp_path):
    """Its config.json has no task, elmo_output or null_threshold (nor, older still, the mix options)."""
    case = CASES["tag"]
    model, task = model_for(case, tokenizer, elmo_output=False)
    save_model(model, tmp_path / "old", tokenizer)
    description = json.loads((tmp_path / "old" / "config.json").read_text())
    for field in ("task", "elmo_output", "null_threshold", "mix_layer_norm", "mix_dropout", "mix_l2"):
        del description["config"]["tagger"][field]
    (tmp_path / "old" / "config.json").write_text(json.dumps(description))
    loaded = load_model(tmp_path / "old")
    assert loaded.config == model.config and loaded.config.tagger.task == "tag"
    _, batch = batch_of(case, task)
    with torch.no_grad():
        torch.testing.assert_close(forward(loaded, batch).logits, forward(model, batch).logits)


def test_elmo_at_the_output_is_a_second_mix_of_its_own_concatenated_to_the_bilstm_s_states(tokenizer):
    case = CASES["tag"]
    with_output, task = model_for(case, tokenizer, elmo_output=True, mix_l2=0.5)
    without, _ = model_for(case, tokenizer, elmo_output=False)  # the same seed: the same LSTM
    inner, outer = scalar_mixes(with_output)
    assert inner is not outer and not {id(p) for p in inner.parameters()} & {id(p) for p in outer.parameters()}
    penalty = 0.5 * (inner.scalars.square().sum() + outer.scalars.square().sum())  # lambda * ||s||^2 of both mixes
    assert with_output.penalty().item() == pytest.approx(penalty.item())
    extra = 2 * with_output.config.elmo.projection_dim
    assert with_output.tagger.classifier.in_features == without.tagger.classifier.in_features + extra
    assert not any(name.startswith("tagger.output_mix") for name in without.state_dict())
    _, batch = batch_of(case, task)
    with torch.no_grad():
        without.tagger.classifier.weight.copy_(with_output.tagger.classifier.weight[:, : 2 * HIDDEN])
        without.tagger.classifier.bias.copy_(with_output.tagger.classifier.bias)
        changed = forward(with_output, batch).logits
        outer.gamma.fill_(0.0)  # ELMo_k at the output is then zero: [h_k; 0] scores as h_k alone
        torch.testing.assert_close(forward(with_output, batch).logits, forward(without, batch).logits)
    assert (changed - forward(without, batch).logits).abs().max() > 1e-3


def test_finetune_features_and_elmo_learn_the_built_in_classification_task(tmp_path, capsys, one_thread):
    torch.manual_seed(1)
    save_model(from_preset("elmo-micro"), tmp_path / "elmo")
    out = tmp_path / "run"
    args = ["finetune", "--task", "classify", "--features", "0", "--elmo", str(tmp_path / "elmo"), "--elmo-output",
            "--synthetic-size", "64", "--batch-size", "16", "--epochs", "6", "--lr", "3e-3", "--lstm-dim", "256",
            "--no-progress", "--out", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]  # one a step
    assert len(losses) == 24 and sum(losses[-4:]) < 0.6 * sum(losses[:4])  # the last epoch's against the first's
    model = load_model(out)
    assert (model.family, model.config.tagger.task, model.config.tagger.elmo_output) == ("feature-tagger",
                                                                                       "classify", True)

    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps({"text": e.text, "label": e.label}) + "\n"
                            for e in synthetic_task("classify", 16, seed=1)))  # the run's dev set
    assert main(["eval", "task", "--model", str(out), str(data), "--json", str(tmp_path / "scores.json")]) == 0
    assert main(["predict", "--model", str(out), str(data), "--out", str(tmp_path / "p.jsonl")]) == 0
    capsys.readouterr()
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    right = sum(row["prediction"] == row["label"] for row in rows) / len(rows)
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert scores["accuracy"] == pytest.approx(right) and scores["examples"] == len(rows) == 16
    assert right > 0.8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "choice", "--features", "0"], "the feature-based model reads one sequence per example"),
        (["--task", "classify", "--features", "0", "--elmo-output"], "--elmo-output adds ELMo at the BiLSTM's"),
        (["--task", "pair", "--features", "0", "--pooling", "mean"], "max- and mean-pools its BiLSTM's states"),
    ],
)
def test_wrong_uses_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    code = main(["finetune", *args, "--synthetic-size", "8", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()
