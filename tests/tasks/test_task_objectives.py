"""Fine-tuning objectives: epochs of batches, the loss terms against hand computation, predictions read back."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from plm.errors import PLMError
from plm.models import from_preset
from plm.tasks import SequenceClassifierOutput, SpanOutput, task_model
from plm.tasks.gpt_inputs import add_task_tokens
from plm.tasks.readers import Answer, QAExample, TaggedSentence, TextExample
from plm.tasks.task_objective import TaskObjective, auxiliary_lm_loss, build_task, length_grouped_order, run
from plm.tokenization.tokenizer import Tokenizer
from plm.training.trainer import Trainer, TrainingConfig

VOCABULARY = """[PAD] [UNK] [CLS] [SEP] [MASK] the a cat dog sees good bad paris lives in where does
run ##ner ##ning ##s jump ##ing""".split()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCABULARY) + "\n")
    return Tokenizer.from_vocab_txt(path)


def sentences(count):
    words = ["the cat", "a dog", "the runner", "a cat sees the dog", "the dog jumps"]
    return [TextExample(words[i % 5] + " good" * (i % 3), None, "good" if i % 3 else "bad") for i in range(count)]


def bert(tokenizer, task="classify", labels=2):
    torch.manual_seed(0)
    return task_model(from_preset("bert-micro", vocab_size=len(tokenizer)), task, labels)


def test_an_epoch_of_batches_reads_every_example_once(tokenizer):
    train = sentences(37)
    task = build_task("classify", tokenizer, bert(tokenizer), labels=["bad", "good"])
    objective = TaskObjective(task, train, train[:4], batch_size=8, micro_batches_per_step=2)
    assert objective.batches_per_epoch == 5
    rows = []
    for step in range(3):  # 6 micro-batches: one epoch and one batch of the next
        for index in range(2):
            batch = objective.batch(step, index)
            rows += [tuple(r[m == 1].tolist()) for r, m in zip(batch["input_ids"], batch["attention_mask"])]
    expected = Counter(tuple(tokenizer.encode_pair(e.text).ids) for e in train)
    assert Counter(rows[:37]) == expected  # the first 5 micro-batches: each example once
    assert len(rows) == 37 + 8


def test_the_auxiliary_lm_loss_is_each_sequences_own_next_token_loss():
    """Padded rows give the summed loss of each unpadded sequence, run alone."""
    torch.manual_seed(0)
    gpt = from_preset("gpt2-micro", vocab_size=50).eval()
    sequences = [[5, 9, 7, 3, 11], [4, 8], [6, 6, 2, 9]]
    input_ids = torch.tensor([s + [0] * (5 - len(s)) for s in sequences])
    attention_mask = torch.tensor([[1] * len(s) + [0] * (5 - len(s)) for s in sequences])
    loss = auxiliary_lm_loss(gpt(input_ids, attention_mask).logits, input_ids, attention_mask)
    expected = sum(
        F.cross_entropy(gpt(torch.tensor([s])).logits[0, :-1], torch.tensor(s[1:]), reduction="sum") for s in sequences
    )
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)


def test_gpt_fine_tuning_adds_lambda_times_the_lm_term(tmp_path):
    tokenizer = Tokenizer.train_bpe(["the cat sees a good dog. a bad cat."] * 20, vocab_size=300)
    torch.manual_seed(0)
    backbone = from_preset("gpt2-micro", vocab_size=len(tokenizer))
    add_task_tokens(backbone, tokenizer)
    model = task_model(backbone, "classify", 2)
    task = build_task("pair", tokenizer, model, labels=["bad", "good"])
    train = [TextExample("the cat", "a dog", "good"), TextExample("a cat", "the bad dog", "bad")]
    objective = TaskObjective(task, train, train, batch_size=2, lm_weight=0.5)
    assert objective.loss_weights == {"lm": 0.5}
    batch = objective.batch(0, 0)
    losses = objective.loss(model.eval(), batch)
    output = model(batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(losses["task"], F.cross_entropy(output.logits, batch["labels"], reduction="sum"))
    assert objective.target_counts(batch) == {"task": 2, "lm": int(batch["attention_mask"].sum()) - 2}
    assert TaskObjective(task, train, train, lm_weight=0.0).loss_weights == {}  # lambda 0: L2 alone


def test_a_tokenizer_without_a_pad_token_pads_a_gpt_batch_with_end_of_text():
    """GPT-2's own vocabulary (encoder.json and vocab.bpe) names no pad token; the attention mask hides what pads."""
    trained = Tokenizer.train_bpe(["the cat sees a good dog. a bad cat."] * 20, vocab_size=300)
    tokenizer = Tokenizer(trained.backend, {"eos": "<|endoftext|>", "bos": "<|endoftext|>"})
    assert tokenizer.pad_id is None
    torch.manual_seed(0)
    backbone = from_preset("gpt2-micro", vocab_size=len(tokenizer))
    add_task_tokens(backbone, tokenizer)
    task = build_task("classify", tokenizer, task_model(backbone, "classify", 2), labels=["bad", "good"])
    examples = [TextExample("the cat", None, "good"), TextExample("a bad cat sees the good dog", None, "bad")]
    batch = TaskObjective(task, examples, examples, batch_size=2).batch(0, 0)
    padding = batch["attention_mask"] == 0
    assert padding.any() and bool((batch["input_ids"][padding] == tokenizer.eos_id).all())


def test_only_the_auxiliary_lm_term_is_a_perplexity(tmp_path):
    """A class distribution's exp(cross-entropy) is no perplexity: no val_perplexity; GPT-1's LM term keeps its own."""
    tokenizer = Tokenizer.train_bpe(["the cat sees a good dog. a bad cat."] * 20, vocab_size=300)
    torch.manual_seed(0)
    backbone = from_preset("gpt2-micro", vocab_size=len(tokenizer))
    add_task_tokens(backbone, tokenizer)
    train = [TextExample("the cat", "a dog", "good"), TextExample("a cat", "the bad dog", "bad")]
    config = TrainingConfig(steps=1, lr=1e-4, progress=False, device="cpu")
    for weight in (0.5, 0.0):
        model = task_model(backbone, "classify", 2)
        task = build_task("pair", tokenizer, model, labels=["bad", "good"])
        objective = TaskObjective(task, train, train, batch_size=2, lm_weight=weight)
        metrics = Trainer(model, objective, config, tmp_path / f"lm{weight}").train()
        perplexities = {key for key in metrics if "perplexity" in key}
        if weight:
            assert metrics["val_perplexity_lm"] == pytest.approx(math.exp(metrics["val_loss_lm"]))
            assert "val_perplexity_task" not in perplexities
        else:
            assert perplexities == set() and "val_loss_task" in metrics


def symmetric_gpt(task_name):
    """A GPT regressor with GPT-1's task tokens, its task reading pairs in both orders."""
    tokenizer = Tokenizer.train_bpe(["the cat sees a good dog. a bad cat."] * 20, vocab_size=300)
    torch.manual_seed(0)
    backbone = from_preset("gpt2-micro", vocab_size=len(tokenizer))
    add_task_tokens(backbone, tokenizer)
    model = task_model(backbone, "classify", 1, symmetric=True).eval()
    return model, build_task(task_name, tokenizer, model, symmetric=True)


def test_gpt_similarity_reads_both_orders_and_adds_their_final_states():
    """GPT-1 3.3: start a $ b extract and start b $ a extract, the two extract states added before the output."""
    model, task = symmetric_gpt("regress")
    objective = TaskObjective(task, [TextExample("the cat", "a good dog", 2.5)], [], batch_size=1, lm_weight=0.5)
    batch = objective.batch(0, 0)
    tokens = task.gpt_inputs.tokens
    a, b = task.tokenizer.encode("the cat"), task.tokenizer.encode("a good dog")
    orders = [
        [tokens.start, *a, tokens.delimiter, *b, tokens.extract],
        [tokens.start, *b, tokens.delimiter, *a, tokens.extract],
    ]
    assert batch["input_ids"].shape == (1, 2, len(orders[0]))
    assert batch["input_ids"][0].tolist() == orders
    with torch.no_grad():
        states = [model.backbone(torch.tensor([ids])).last_hidden_state[0, -1] for ids in orders]
        expected = model.head.classifier(states[0] + states[1])
        torch.testing.assert_close(model(batch["input_ids"], batch["attention_mask"]).logits[0], expected)
    # the auxiliary LM term covers both orders: every token after the first of each
    assert objective.target_counts(batch) == {"task": 1, "lm": 2 * (len(orders[0]) - 1)}


def test_a_symmetric_pair_gets_the_same_prediction_in_either_order():
    model, task = symmetric_gpt("regress")
    pairs = [TextExample("the cat", "a good dog", 1.0), TextExample("a good dog", "the cat", 1.0)]
    predictions, _ = run(model, task, pairs)
    assert predictions[0] == pytest.approx(predictions[1], abs=1e-6)


def test_symmetric_is_for_gpt_pairs():
    model, task = symmetric_gpt("pair")
    with pytest.raises(PLMError, match="has no second sentence"):
        task.encode(TextExample("the cat", None, 1.0))
    tokenizer = Tokenizer.train_wordpiece(["the cat sees a dog"], vocab_size=60)
    with pytest.raises(PLMError, match="an encoder reads a pair as"):
        build_task("pair", tokenizer, bert(tokenizer), labels=["a", "b"], symmetric=True)


def test_tagging_loss_is_over_first_pieces_only(tokenizer):
    model = bert(tokenizer, "tag", 3).eval()
    tags = ["O", "B-X", "I-X"]
    sentence = TaggedSentence(("the", "runner", "jumping", "dog"), ("O", "B-X", "I-X", "O"))  # 2 words of 2 pieces
    task = build_task("tag", tokenizer, model, labels=tags)
    objective = TaskObjective(task, [sentence], [sentence], batch_size=1)
    batch = objective.batch(0, 0)
    assert objective.target_counts(batch) == {"task": 4}
    logits = model(batch["input_ids"], batch["attention_mask"]).logits[0]
    first = [1, 2, 4, 6]  # [CLS] the run ##ner jump ##ing dog [SEP]
    expected = F.cross_entropy(logits[first], torch.tensor([0, 1, 2, 0]), reduction="sum")
    torch.testing.assert_close(objective.loss(model, batch)["task"], expected)


class KeywordModel(nn.Module):
    """Predicts "good" exactly when the token ``good`` is in the input."""

    def __init__(self, good_id):
        super().__init__()
        self.good_id = good_id
        self.unused = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        has = (input_ids == self.good_id).any(-1).float()
        return SequenceClassifierOutput(logits=torch.stack([1 - has, has], -1))


def test_validation_metrics_score_the_models_predictions_by_label_name(tokenizer):
    task = build_task("classify", tokenizer, bert(tokenizer), labels=["bad", "good"])
    examples = sentences(9)
    predictions, scores = run(KeywordModel(tokenizer.token_to_id("good")), task, examples, batch_size=4)
    assert predictions == [e.label for e in examples]
    assert scores["accuracy"] == 1.0 and scores["matthews"] == 1.0
    flipped = [TextExample(e.text, None, "bad" if e.label == "good" else "good") for e in examples]
    assert run(KeywordModel(tokenizer.token_to_id("good")), task, flipped)[1]["accuracy"] == 0.0


class PointAtParis(nn.Module):
    """Start and end logits 10 at the token ``paris``, 0 elsewhere."""

    def __init__(self, paris_id):
        super().__init__()
        self.paris_id = paris_id
        self.unused = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        score = (input_ids == self.paris_id).float() * 10
        return SpanOutput(start_logits=score, end_logits=score.clone())


def test_qa_answers_come_from_the_original_text_across_windows(tokenizer):
    context = "the dog sees the cat " * 30 + "the cat lives in Paris " + "the dog sees the cat " * 5
    example = QAExample("q1", "where does the cat run", context, (Answer("Paris", None),))
    task = build_task("qa", tokenizer, bert(tokenizer, "span"), max_length=48, stride=16)
    assert len(task.encode(example)) > 5
    predictions, scores = run(PointAtParis(tokenizer.token_to_id("paris")), task, [example])
    assert predictions == ["Paris"]  # the original casing, read by character offsets
    assert scores == {"exact_match": 1.0, "f1": 1.0}


def test_length_grouped_order_reads_every_row_once_in_batches_of_similar_length():
    """Grouping by length pads far less than a plain shuffle and as little as a global sort within a window."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(2, 60, (1000,), generator=generator)
    batch_size = 32

    def padded(order: torch.Tensor) -> int:
        return sum(int(lengths[part].max()) * len(part) for part in order.split(batch_size))

    order = length_grouped_order(lengths, batch_size, torch.Generator().manual_seed(1))
    assert sorted(order.tolist()) == list(range(1000))
    # One window over all rows: the padding is the least any split into batches of 32 can have, that of a sort.
    whole = length_grouped_order(lengths, batch_size, torch.Generator().manual_seed(1), window=1000)
    assert padded(whole) == padded(lengths.argsort(descending=True))
    shuffled = torch.randperm(1000, generator=torch.Generator().manual_seed(1))
    assert padded(order) < 0.7 * padded(shuffled)
    # Still random: another epoch's seed gives other batches.
    other = length_grouped_order(lengths, batch_size, torch.Generator().manual_seed(2))
    assert order[:batch_size].tolist() != other[:batch_size].tolist()


def test_an_evaluation_runs_the_dev_set_once_for_both_the_loss_and_the_metrics(tokenizer, tmp_path):
    """The dev set's losses and metrics come from one forward pass per batch, and the metrics equal run()'s."""
    train, dev = sentences(16), sentences(10)
    model = bert(tokenizer)
    task = build_task("classify", tokenizer, model, labels=["bad", "good"])
    objective = TaskObjective(task, train, dev, batch_size=4)
    trainer = Trainer(model, objective, TrainingConfig(steps=1, progress=False, device="cpu"), tmp_path / "run")
    calls = []
    model.register_forward_hook(lambda module, args, output: calls.append(1))
    metrics = trainer.evaluate()
    assert len(calls) == 3  # ceil(10 / 4) dev batches, each run once
    expected = run(model, task, dev, batch_size=4)[1]
    assert {k: metrics[f"val_{k}"] for k in expected} == pytest.approx(expected)
    model.eval()
    inputs = ("input_ids", "attention_mask", "token_type_ids")
    losses = [F.cross_entropy(model(**{k: batch[k] for k in inputs}).logits, batch["labels"], reduction="sum").item()
              for batch in objective.validation_batches()]
    assert metrics["val_loss_task"] == pytest.approx(sum(losses) / len(dev))


def test_each_epoch_reads_the_examples_in_a_new_order(tokenizer):
    """Every epoch is shuffled afresh (as BERT's fine-tuning input_fn and Hugging Face's Trainer do): the same
    order every epoch would show the model the same batches, in the same sequence, each time."""
    train = sentences(37)
    task = build_task("classify", tokenizer, bert(tokenizer), labels=["bad", "good"])
    objective = TaskObjective(task, train, train[:4], batch_size=8)

    def epoch(number: int) -> list[tuple[int, ...]]:
        rows = []
        for step in range(number * 5, number * 5 + 5):
            batch = objective.batch(step, 0)
            rows += [tuple(r[m == 1].tolist()) for r, m in zip(batch["input_ids"], batch["attention_mask"])]
        return rows

    first, second = epoch(0), epoch(1)
    assert Counter(first) == Counter(second) == Counter(tuple(tokenizer.encode_pair(e.text).ids) for e in train)
    assert first != second


def test_the_qa_loss_is_half_the_start_and_end_cross_entropies_over_the_real_tokens(tokenizer):
    """BERT 4.2: the training objective is the mean of the correct start and end positions' log-likelihoods,
    here summed over the windows; the softmax runs over the window's tokens, never its padding. By hand."""
    task = build_task("qa", tokenizer, bert(tokenizer, "span"), max_length=48)
    start = torch.tensor([[0.5, 1.0, -2.0, 0.3, 0.0, 0.7], [1.5, -0.5, 2.0, 0.1, 6.0, 6.0]])
    end = torch.tensor([[-1.0, 0.2, 0.4, 2.5, 1.1, 0.0], [0.3, 0.9, -0.7, 1.2, 5.0, 7.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])  # the second window: 2 padding positions
    batch = {"attention_mask": mask, "start_positions": torch.tensor([1, 2]), "end_positions": torch.tensor([3, 3])}

    def nll(row: list[float], real: list[int], gold: int) -> float:
        return math.log(sum(math.exp(row[t]) for t, on in enumerate(real) if on)) - row[gold]

    expected = sum(
        (nll(s, m, g_start) + nll(e, m, g_end)) / 2
        for s, e, m, g_start, g_end in zip(start.tolist(), end.tolist(), mask.tolist(), [1, 2], [3, 3])
    )
    loss = task.loss(SpanOutput(start_logits=start, end_logits=end), batch)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_the_regression_loss_is_the_summed_squared_error(tokenizer):
    """STS-B: the squared error of each predicted score, summed over the batch (not the absolute error)."""
    task = build_task("regress", tokenizer, bert(tokenizer, labels=1))
    predicted, gold = [2.5, 0.0, 4.0], [3.0, 2.0, 1.0]  # errors 0.5, 2 and 3: squares 0.25, 4, 9
    loss = task.loss(SequenceClassifierOutput(logits=torch.tensor(predicted)[:, None]), {"labels": torch.tensor(gold)})
    assert loss.item() == pytest.approx(sum((p - g) ** 2 for p, g in zip(predicted, gold)))


def test_a_binary_classifiers_f1_is_that_of_its_second_class(tokenizer):
    """GLUE's MRPC and QQP F1 is the positive class's, label 1 (the second in id order); sklearn the oracle."""
    from sklearn.metrics import f1_score

    task = build_task("pair", tokenizer, bert(tokenizer), labels=["0", "1"])
    gold = ["1", "1", "1", "0", "0", "1", "0", "1"]
    predictions = ["1", "0", "1", "1", "0", "1", "0", "0"]  # F1 0.667 for class 1, 0.6 for class 0
    examples = [TextExample("the cat", "a dog", label) for label in gold]
    scores = task.score(predictions, examples)
    assert scores["f1"] == pytest.approx(f1_score(gold, predictions, pos_label="1"))
    assert scores["f1"] != pytest.approx(f1_score(gold, predictions, pos_label="0"))


def test_a_regressions_scores_are_pearson_and_spearman_correlation(tokenizer):
    """STS-B's two metrics, each under its own name; scipy the oracle, on scores where the two differ."""
    from scipy.stats import pearsonr, spearmanr

    task = build_task("regress", tokenizer, bert(tokenizer, labels=1))
    gold = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    predictions = [0.1, 0.2, 0.3, 0.4, 5.0, 0.35]  # one outlier: Pearson and Spearman far apart
    scores = task.score(predictions, [TextExample("the cat", "a dog", g) for g in gold])
    assert scores["pearson"] == pytest.approx(pearsonr(predictions, gold)[0])
    assert scores["spearman"] == pytest.approx(spearmanr(predictions, gold)[0])
    assert abs(scores["pearson"] - scores["spearman"]) > 0.1
