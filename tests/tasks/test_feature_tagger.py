"""The feature-based tagger through plm finetune: a frozen encoder's (and ELMo's) word features, a BiLSTM over words."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from plm.cli.flags import config_from_args
from plm.cli.main import build_parser, main
from plm.models import from_preset
from plm.storage.checkpoint import load_model, save_model
from plm.tasks.encoding import IGNORE, collate, first_pieces
from plm.tasks.feature_based import feature_tagger
from plm.tasks.finetune import FinetuneData, FinetuneHead, FinetuneSetup, prepare_sweep
from plm.tasks.readers import TaggedSentence, read_conll
from plm.tasks.synthetic import synthetic_task
from plm.tasks.task_objective import TaskObjective, build_task, encode_all, model_inputs, model_outputs
from plm.tokenization.tokenizer import Tokenizer
from plm.training.optim import build_optimizer
from plm.training.trainer import Trainer, TrainingConfig

VOCABULARY = "[PAD] [UNK] [CLS] [SEP] [MASK] the a cat dog sees run ##ner ##ning ##s jump ##ing".split()
LABELS = ("O", "B-PER", "I-PER")
SENTENCES = [
    TaggedSentence(("the", "runner", "sees", "a", "jumping", "dog"), ("O", "B-PER", "O", "O", "B-PER", "I-PER")),
    TaggedSentence(("a", "cat", "runs"), ("O", "B-PER", "O")),
]


@pytest.fixture
def tokenizer(tmp_path) -> Tokenizer:
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCABULARY) + "\n")
    return Tokenizer.from_vocab_txt(path)



def encoder_for(tokenizer: Tokenizer):
    torch.manual_seed(0)
    return from_preset("bert-micro", vocab_size=len(tokenizer))


def tiny_elmo():
    torch.manual_seed(1)
    return from_preset("elmo-micro")


def batch_of(task, sentences=SENTENCES):
    features = encode_all(task, sentences)
    return features, collate([model_inputs(f) for f in features], task.tokenizer.pad_id)


def test_the_bilstm_reads_words_at_their_first_pieces(tokenizer):
    encoder = encoder_for(tokenizer).eval()
    torch.manual_seed(2)
    model = feature_tagger(encoder, (-2, -1), len(LABELS), LABELS, hidden=8, dropout=0.0).eval()
    task = build_task("tag", tokenizer, encoder, LABELS)
    features, batch = batch_of(task)
    logits = model(batch["input_ids"], batch["attention_mask"], batch["word_starts"]).logits  # (B, T, labels)

    # The oracle: torch.nn's LSTM and Linear, with the tagger's weights, over each sentence's first pieces alone.
    lstm = nn.LSTM(2 * 32, 8, num_layers=2, batch_first=True, bidirectional=True)
    lstm.load_state_dict(model.tagger.lstm.state_dict())
    linear = nn.Linear(16, len(LABELS))
    linear.load_state_dict(model.tagger.classifier.state_dict())
    states = encoder(batch["input_ids"], batch["attention_mask"], output_hidden_states=True).hidden_states
    for row, feature in enumerate(features):
        firsts = [t for t, first in enumerate(first_pieces(feature["word_ids"])) if first]
        assert len(firsts) == len(SENTENCES[row].words)
        words = torch.cat([states[-2][row, firsts], states[-1][row, firsts]], dim=-1)[None]  # (1, W, 2 * dim)
        expected = linear(lstm(words)[0])[0]
        torch.testing.assert_close(logits[row, firsts], expected)
        others = [t for t in range(logits.shape[1]) if t not in firsts]
        assert logits[row, others].abs().max() == 0  # continuation pieces, specials and padding carry no logits
    # "runner" and "jumping" split: [CLS] the run ##ner sees a jump ##ing dog [SEP]
    assert [t for t, first in enumerate(first_pieces(features[0]["word_ids"])) if first] == [1, 2, 4, 5, 6, 8]


def test_only_the_tagger_learns_the_encoder_stays_frozen(tokenizer):
    encoder = encoder_for(tokenizer)
    model = feature_tagger(encoder, (0, -1), len(LABELS), LABELS, combine="mix", hidden=8)
    model.train()
    assert model.tagger.training and not model.encoder.training  # no dropout in the features
    objective = TaskObjective(build_task("tag", tokenizer, encoder, LABELS), SENTENCES, SENTENCES, batch_size=2)
    before = {name: value.clone() for name, value in model.state_dict().items()}
    optimizer = build_optimizer("adamw", model, 1e-2, 0.01, (0.9, 0.999), 1e-8)  # the Trainer's, with weight decay
    optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for p in model.tagger.parameters()}  # no Adam moments for the frozen encoder
    objective.loss(model, objective.batch(0, 0))["task"].backward()
    optimizer.step()
    assert all(p.grad is None for p in model.encoder.parameters())
    for name, value in model.state_dict().items():
        changed = not torch.equal(value, before[name])
        assert changed == name.startswith("tagger."), name
    assert model.tagger.combinations[0].mix.scalars.grad.abs().sum() > 0  # the scalar mix learns too


def test_elmo_reads_exactly_the_words_that_kept_a_first_piece(tokenizer):
    encoder, elmo = encoder_for(tokenizer), tiny_elmo()
    model = feature_tagger(encoder, (0,), len(LABELS), LABELS, elmo=elmo, hidden=8).eval()
    with torch.no_grad():
        model.tagger.combinations[1].mix.scalars.copy_(torch.tensor([1.0, -0.5, 2.0]))
        model.tagger.combinations[1].mix.gamma.fill_(0.7)
    # 7 tokens: [CLS] the run ##ner sees a [SEP]; "jumping" and "dog" are cut off.
    task = build_task("tag", tokenizer, encoder, LABELS, max_length=7, characters=True)
    _, batch = batch_of(task)
    sources, word_mask, _ = model.features(batch["input_ids"], batch["attention_mask"], batch["word_starts"],
                                           batch["char_ids"])
    kept = [["the", "runner", "sees", "a"], ["a", "cat", "runs"]]
    expected = elmo.embed(kept)  # (B, L + 1, W, 2 * projection)
    torch.testing.assert_close(sources[1], expected)
    mix = model.tagger.combinations[1]
    torch.testing.assert_close(mix(sources[1]), mix(expected))
    assert word_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]


def test_cached_features_give_the_same_logits_and_run_the_frozen_models_once_per_sentence(tokenizer):
    encoder, elmo = encoder_for(tokenizer), tiny_elmo()
    model = feature_tagger(encoder, (0, -1), len(LABELS), LABELS, elmo=elmo, hidden=8).eval()
    task = build_task("tag", tokenizer, encoder, LABELS, characters=True)
    _, batch = batch_of(task)
    inputs = {k: batch[k] for k in model.inputs if k in batch}
    expected = model(**inputs).logits
    model.cache_features()
    calls = []
    encoder_in_model = model.encoder
    encoder_in_model.register_forward_hook(lambda module, args, output: calls.append(len(args[0])))  # rows
    first = model(**inputs).logits
    # The second sentence alone (its own padding width), then the batch again: all from the cache.
    alone = {k: v[1:2, : int(batch["attention_mask"][1].sum())] if v.dim() == 2 else v[1:2] for k, v in inputs.items()}
    alone["char_ids"] = inputs["char_ids"][1:2, : int(batch["word_starts"][1].sum())]
    single = model(**alone).logits
    again = model(**inputs).logits
    assert calls == [2]  # one encoder pass, over the two sentences, for all three calls
    model.cache_features()  # empty again: the short sentence first, then the batch computes only the long one
    calls.clear()
    single = model(**alone).logits
    again = model(**inputs).logits
    assert calls == [1, 1]
    torch.testing.assert_close(again, expected)
    model.cache_features()  # the long sentence first: the batch then computes the short one, fewer words wide
    calls.clear()
    longest = {
        k: v[0:1, : int(batch["attention_mask"][0].sum())] if v.dim() == 2 else v[0:1] for k, v in inputs.items()
    }
    longest["char_ids"] = inputs["char_ids"][0:1, : int(batch["word_starts"][0].sum())]
    model(**longest)
    torch.testing.assert_close(model(**inputs).logits, expected)
    assert calls == [1, 1]
    torch.testing.assert_close(first, expected)
    torch.testing.assert_close(again, expected)
    torch.testing.assert_close(single[0], expected[1, : single.shape[1]])


def test_save_and_load_give_the_same_logits(tokenizer, tmp_path):
    encoder, elmo = encoder_for(tokenizer), tiny_elmo()
    model = feature_tagger(encoder, (-3, -1), len(LABELS), LABELS, combine="sum", elmo=elmo, hidden=8).eval()
    task = build_task("tag", tokenizer, encoder, LABELS, characters=True)
    _, batch = batch_of(task)
    save_model(model, tmp_path / "tagger", tokenizer)
    loaded = load_model(tmp_path / "tagger")
    assert loaded.config == model.config
    assert not any(p.requires_grad for p in [*loaded.encoder.parameters(), *loaded.elmo.parameters()])
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "word_starts", "char_ids")}
    torch.testing.assert_close(loaded(**inputs).logits, model(**inputs).logits)  # float noise only


def test_the_bilstm_is_berts_768_per_direction_unless_asked_and_a_saved_model_keeps_its_size(tokenizer, tmp_path):
    """BERT 5.3's "768-dimensional" two-layer BiLSTM, 768 units each way, is the recipe's; `lstm_dim` sizes it."""
    encoder = encoder_for(tokenizer)
    assert FinetuneHead().lstm_dim == 768
    lstm = feature_tagger(encoder, (0,), len(LABELS), LABELS).tagger.lstm
    assert (lstm.hidden_size, lstm.num_layers, lstm.bidirectional) == (768, 2, True)
    save_model(feature_tagger(encoder, (0,), len(LABELS), LABELS, hidden=24), tmp_path / "tagger", tokenizer)
    assert load_model(tmp_path / "tagger").tagger.lstm.hidden_size == 24


def test_a_config_without_the_bilstm_size_loads_as_the_256_of_before(tokenizer, tmp_path):
    model = feature_tagger(encoder_for(tokenizer), (0,), len(LABELS), LABELS, hidden=256)
    save_model(model, tmp_path / "tagger", tokenizer)
    path = tmp_path / "tagger" / "config.json"
    saved = json.loads(path.read_text())
    del saved["config"]["tagger"]["hidden"]
    path.write_text(json.dumps(saved))
    loaded = load_model(tmp_path / "tagger")
    assert loaded.config.tagger.hidden == 256
    torch.testing.assert_close(loaded.state_dict(), model.state_dict())


DOCUMENTS = ("-DOCSTART- -X- -X- O\n\nthe O\nrunner B-PER\n\na O\ncat B-PER\nruns O\n\n"
             "-DOCSTART- -X- -X- O\n\nthe O\ndog B-PER\n")  # two documents: two sentences, then one


def test_a_sentence_read_in_its_document_sees_its_neighbours_and_tags_only_its_own_words(tokenizer, tmp_path):
    """BERT 5.3's document context: the encoder reads the words around a sentence; the BiLSTM, the labels and the
    loss see the sentence's words alone, and -DOCSTART- ends what a sentence can see."""
    (tmp_path / "docs.conll").write_text(DOCUMENTS)
    alone, in_documents = (read_conll(tmp_path / "docs.conll", document_context=c) for c in (False, True))
    encoder = encoder_for(tokenizer).eval()
    model = feature_tagger(encoder, (-1,), len(LABELS), LABELS, hidden=8, dropout=0.0).eval()
    task = build_task("tag", tokenizer, encoder, LABELS)
    (features, batch), (features_alone, batch_alone) = batch_of(task, in_documents), batch_of(task, alone)

    tokens = [[tokenizer.backend.id_to_token(i) for i in f["input_ids"]] for f in features]
    assert tokens[:2] == [["[CLS]", "the", "run", "##ner", "a", "cat", "run", "##s", "[SEP]"]] * 2
    assert features[2]["input_ids"] == features_alone[2]["input_ids"]  # the next document is not its context
    for feature, own in zip(features, features_alone):  # the same labels, on the same words' first pieces
        assert [label for label in feature["labels"] if label != IGNORE] == [
            label for label in own["labels"] if label != IGNORE]
        assert sum(feature["word_starts"]) == sum(own["word_starts"])
    assert task.count(batch) == task.count(batch_alone) == 7

    def states(batch):
        return model.features(batch["input_ids"], batch["attention_mask"], batch["word_starts"])[0][0]

    read_in_documents, read_alone = states(batch), states(batch_alone)  # (3 sentences, 1 layer, 3 words, dim)
    assert read_in_documents.shape == read_alone.shape
    for sentence in (0, 1):
        assert (read_in_documents[sentence] - read_alone[sentence]).abs().max() > 1e-3
    torch.testing.assert_close(read_in_documents[2], read_alone[2])
    logits = model(batch["input_ids"], batch["attention_mask"], batch["word_starts"]).logits  # (3, time, tags)
    scored = logits.abs().sum(-1) > 0
    assert scored.tolist() == (batch["labels"] != IGNORE).tolist()  # the sentence's first pieces, nothing else


def test_document_context_and_lstm_dim_reach_the_fine_tuning_from_their_flags(tokenizer, tmp_path):
    (tmp_path / "docs.conll").write_text(DOCUMENTS)
    save_model(encoder_for(tokenizer), tmp_path / "bert", tokenizer)
    conll = str(tmp_path / "docs.conll")
    args = build_parser().parse_args(["finetune", "--task", "tag", "--model", str(tmp_path / "bert"), "--train",
                                      conll, "--validation", conll, "--document-context", "--features", "-1",
                                      "--lstm-dim", "24"])
    data, head = config_from_args(FinetuneData, args), config_from_args(FinetuneHead, args)
    assert (data.document_context, head.lstm_dim) == (True, 24)
    setup = FinetuneSetup("tag", str(tmp_path / "bert"), data=data, head=head, device="cpu", progress=False)
    setup.validate()
    sweep, _ = prepare_sweep(setup, tmp_path / "run")
    assert [s.context for s in sweep.train_examples] == [
        ((), ("a", "cat", "runs")), (("the", "runner"), ()), ((), ())]


def test_finetune_features_learns_the_built_in_tagging_task(tmp_path, capsys, one_thread):
    """A fresh bert-micro's token embeddings alone: people and places are told apart by the words themselves."""
    out = tmp_path / "run"
    args = ["finetune", "--task", "tag", "--features", "0", "--synthetic-size", "256", "--batch-size", "16",
            "--epochs", "3", "--lr", "1e-2", "--lstm-dim", "256", "--out", str(out)]  # BERT's 768 takes 15x as long
    assert main(args) == 0
    capsys.readouterr()
    scores = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    best = max(s["val_f1"] for s in scores if "val_f1" in s)
    assert best > 0.85  # predicting "O" everywhere finds no entity: F1 0
    assert load_model(out).family == "feature-tagger"

    # plm eval task reads the run like a fine-tuned model's, and scores the dev set alike.
    dev = tmp_path / "dev.conll"
    dev.write_text("".join("".join(f"{w} {t}\n" for w, t in zip(s.words, s.tags)) + "\n"
                           for s in synthetic_task("tag", 64, seed=1)))  # the run's dev set
    assert main(["eval", "task", "--model", str(out), str(dev), "--json", str(tmp_path / "dev.json")]) == 0
    assert json.loads((tmp_path / "dev.json").read_text())["f1"] == pytest.approx(best)


def test_the_training_loss_adds_lambda_times_the_squared_mix_weights(tokenizer, tmp_path):
    """ELMo 3.2: the task loss plus lambda * ||s||^2, the penalty logged as its own term (not a perplexity)."""
    encoder = encoder_for(tokenizer)
    model = feature_tagger(encoder, (-2, -1), len(LABELS), LABELS, combine="mix", hidden=8, dropout=0.0,
                           mix_l2=0.25)
    with torch.no_grad():
        model.tagger.combinations[0].mix.scalars.copy_(torch.tensor([0.6, -0.2]))
    task = build_task("tag", tokenizer, encoder, LABELS)
    objective = TaskObjective(task, SENTENCES, SENTENCES, batch_size=2, mix_penalty=model.penalty)
    batch = objective.batch(0, 0)
    with torch.no_grad():  # the oracle: the mean cross-entropy over first pieces, before the step changes anything
        logits = model(batch["input_ids"], batch["attention_mask"], batch["word_starts"]).logits
        task_loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100).item()
    config = TrainingConfig(steps=1, lr=1e-3, log_every=1, eval_every=1, progress=False, device="cpu")
    Trainer(model, objective, config, tmp_path / "run").train()
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    penalty = 0.25 * (0.6 ** 2 + 0.2 ** 2)
    assert first["loss_mix_l2"] == pytest.approx(penalty)
    assert first["loss_task"] == pytest.approx(task_loss, rel=1e-5)
    assert first["loss"] == pytest.approx(task_loss + penalty, rel=1e-5)
    assert not any(key.startswith("val_perplexity") for key in first)


def test_the_mix_options_reach_every_scalar_mix(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["finetune", "--task", "tag", "--features", "-2,-1", "--combine", "mix", "--mix-layer-norm",
            "--mix-dropout", "0.3", "--mix-l2", "0.01", "--synthetic-size", "32", "--batch-size", "16",
            "--epochs", "1", "--lstm-dim", "16", "--no-progress", "--out", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    tagger = load_model(out).tagger
    mix = tagger.combinations[0].mix
    assert (mix.layer_norm, mix.dropout.p, mix.l2, tagger.lstm.hidden_size) == (True, 0.3, 0.01, 16)
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("loss_mix_l2" in line for line in lines)

    elmo = feature_tagger(encoder_for(Tokenizer.load(out / "best")), (0,), 3, elmo=tiny_elmo(), mix_dropout=0.2)
    assert elmo.tagger.combinations[1].mix.dropout.p == 0.2  # ELMo's own mix takes them too


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "tag", "--features", "0", "--mix-l2", "0.1"], "give --features with --combine mix or --elmo"),
        (["--task", "tag", "--features", "0", "--combine", "mix", "--mix-dropout", "1"],
         "scalar mix's dropout must be in [0, 1)"),
        (["--task", "choice", "--features", "-1"], "--features is for --task classify, pair, regress, tag, qa"),
        (["--task", "tag", "--elmo", "runs/elmo"], "--elmo joins the features of the feature-based model"),
        (["--task", "tag", "--features", "-4,-1"], "layer indices from -3 to 2, got -4,-1"),
        (["--task", "tag", "--features", "0", "--elmo", "{missing}"], "no such model directory"),
        (["--task", "tag", "--features", "0", "--sift"], "the feature-based model keeps it frozen"),
        (["--task", "tag", "--features", "0", "--strategy", "fsdp"],
         "--features with --strategy fsdp is not supported"),
        (["--task", "tag", "--lstm-dim", "64"], "--lstm-dim sizes the feature-based model's BiLSTM: give --features"),
        (["--task", "tag", "--document-context"], "--document-context reads the documents of CoNLL files"),
        (["--task", "classify", "--train", "a.jsonl", "--validation", "a.jsonl", "--document-context"],
         "--document-context reads CoNLL documents: it is for --task tag, not classify"),
    ],
)
def test_wrong_uses_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    args = [a.replace("{missing}", str(tmp_path / "missing")) for a in args]
    code = main(["finetune", *args, "--synthetic-size", "8", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_predict_and_eval_read_a_model_s_files_in_their_documents_when_asked(tokenizer, tmp_path, capsys):
    """A model fine-tuned with document context is read back the same way: plm predict's tags are those the library
    gives the sentences read in their documents, not alone; plm eval task takes the flag too; other tasks refuse it."""
    (tmp_path / "docs.conll").write_text(DOCUMENTS)
    torch.manual_seed(0)
    model = feature_tagger(encoder_for(tokenizer), (-1,), len(LABELS), LABELS, hidden=8, dropout=0.0).eval()
    save_model(model, tmp_path / "tagger", tokenizer)
    task = build_task("tag", tokenizer, model, LABELS, words=True)

    def library(document_context: bool) -> list:
        sentences = read_conll(tmp_path / "docs.conll", document_context=document_context)
        features = encode_all(task, sentences)
        return task.predict(model_outputs(model, task, features, 8, progress=False), features, sentences)

    def predicted(*flags: str) -> list:
        assert main(["predict", "--model", str(tmp_path / "tagger"), str(tmp_path / "docs.conll"), "--device", "cpu",
                     "--no-progress", *flags]) == 0
        return [json.loads(line)["prediction"] for line in capsys.readouterr().out.splitlines()]

    assert library(True) != library(False)  # the neighbours' words change some tags of this random model
    assert predicted("--document-context") == library(True)
    assert predicted() == library(False)
    assert main(["eval", "task", "--model", str(tmp_path / "tagger"), str(tmp_path / "docs.conll"), "--device",
                 "cpu", "--no-progress", "--document-context"]) == 0
    assert main(["predict", "--model", str(tmp_path / "tagger"), "-", "--document-context"]) == 2
    assert "--document-context reads CoNLL documents" in capsys.readouterr().err
