"""Task heads on any backbone: one TaskModel, the head and pooling by composition.

Each check builds a tiny pretrained backbone, puts a head on it with
``task_model`` and compares the task model's outputs with what the paper's formula
gives when computed by hand from the original backbone's own outputs.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

import plm
from plm.errors import PLMError
from plm.models import from_config, from_preset, preset_config
from plm.tasks import TaskModel, task_model

VOCAB = 60


def bert():
    torch.manual_seed(0)
    return from_preset("bert-micro", vocab_size=VOCAB, pretraining_heads=("mlm", "nsp")).eval()


def gpt():
    torch.manual_seed(0)
    return from_preset("gpt2-micro", vocab_size=VOCAB).eval()


def ids(*shape: int) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randint(1, VOCAB, shape)


def test_classifier_reads_the_cls_vector_through_the_backbones_pooler():
    backbone = bert()
    model = task_model(backbone, "classify", labels=3).eval()
    tokens, types = ids(2, 7), torch.tensor([[0] * 3 + [1] * 4] * 2)
    with torch.no_grad():
        pooled = backbone(tokens, token_type_ids=types).pooler_output  # tanh(W h_[CLS] + b) of the original
        expected = F.linear(pooled, model.head.classifier.weight, model.head.classifier.bias)
        assert torch.allclose(model(tokens, token_type_ids=types).logits, expected, atol=1e-6)


def test_gpt_classifier_reads_the_last_real_token_whatever_the_padding():
    model = task_model(gpt(), "classify", labels=2).eval()
    short, long = ids(1, 4), ids(1, 6)
    right = torch.cat([torch.cat([short, torch.zeros(1, 2, dtype=torch.long)], 1), long])
    left = torch.cat([torch.cat([torch.zeros(1, 2, dtype=torch.long), short], 1), long])
    with torch.no_grad():
        alone = torch.cat([model(short).logits, model(long).logits])  # no padding: the last position
        right_mask, left_mask = torch.tensor([[1] * 4 + [0] * 2, [1] * 6]), torch.tensor([[0] * 2 + [1] * 4, [1] * 6])
        for tokens, mask in ((right, right_mask), (left, left_mask)):
            torch.testing.assert_close(model(tokens, mask).logits, alone, atol=1e-5, rtol=1e-5)


def test_mean_pooling_averages_the_real_tokens_only():
    backbone = bert()
    model = task_model(backbone, "classify", labels=2, pooling="mean").eval()
    tokens, mask = ids(2, 6), torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    with torch.no_grad():
        hidden = backbone(tokens, mask).last_hidden_state
        means = torch.stack([hidden[0].mean(0), hidden[1, :3].mean(0)])
        expected = F.linear(means, model.head.classifier.weight, model.head.classifier.bias)
        torch.testing.assert_close(model(tokens, mask).logits, expected, atol=1e-6, rtol=1e-5)


def test_multiple_choice_scores_each_choice_as_if_alone():
    backbone = bert()
    model = task_model(backbone, "choice").eval()
    tokens = ids(2, 3, 5)  # (batch, choices, time)
    types = torch.tensor([0, 0, 0, 1, 1]).expand(2, 3, 5)
    with torch.no_grad():
        scores = model(tokens, token_type_ids=types).logits
        for b in range(2):
            for c in range(3):
                pooled = backbone(tokens[b, c][None], token_type_ids=types[b, c][None]).pooler_output
                expected = F.linear(pooled, model.head.classifier.weight, model.head.classifier.bias)[0, 0]
                torch.testing.assert_close(scores[b, c], expected, atol=1e-6, rtol=1e-5)
    assert scores.shape == (2, 3)


def test_similarity_adds_the_final_states_of_both_orders():
    backbone = gpt()
    model = task_model(backbone, "classify", labels=2).eval()
    tokens = ids(1, 2, 5)  # one pair, in both orders
    with torch.no_grad():
        states = [backbone(tokens[:, k]).last_hidden_state[0, -1] for k in range(2)]  # the extract tokens
        expected = F.linear(states[0] + states[1], model.head.classifier.weight, model.head.classifier.bias)
        torch.testing.assert_close(model(tokens).logits[0], expected, atol=1e-5, rtol=1e-5)


def test_span_head_scores_start_and_end_with_s_and_e():
    backbone = bert()
    model = task_model(backbone, "span").eval()
    tokens = ids(2, 8)
    with torch.no_grad():
        hidden = backbone(tokens).last_hidden_state  # T_i
        out = model(tokens)
    layer = model.head.start_end  # rows S and E
    torch.testing.assert_close(out.start_logits, hidden @ layer.weight[0] + layer.bias[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.end_logits, hidden @ layer.weight[1] + layer.bias[1], atol=1e-6, rtol=1e-5)


def test_token_classifier_gives_every_token_its_labels():
    backbone = bert()
    model = task_model(backbone, "tag", labels=5).eval()
    tokens = ids(2, 8)
    with torch.no_grad():
        expected = F.linear(
            backbone(tokens).last_hidden_state, model.head.classifier.weight, model.head.classifier.bias
        )
        torch.testing.assert_close(model(tokens).logits, expected)


@pytest.mark.parametrize("task", ["tag", "span", "classify"])
def test_fine_tuning_trains_every_parameter(task):
    """No pre-training head and no unread pooler is built, so DDP finds no parameter without a gradient."""
    options = {"pooling": "mean"} if task == "classify" else {}
    model = task_model(bert(), task, **options).train()
    out = model(ids(2, 6))
    sum(tensor.sum() for tensor in vars(out).values() if torch.is_tensor(tensor)).backward()
    unused = [name for name, parameter in model.named_parameters() if parameter.grad is None]
    assert not unused


def test_task_model_saves_and_loads(tmp_path):
    torch.manual_seed(0)
    deberta = from_preset("deberta-micro", vocab_size=VOCAB)  # a config with tuple fields, through JSON
    model = task_model(deberta, "tag", labels=3, label_names=("O", "B-X", "I-X")).eval()
    plm.save(model, tmp_path)
    loaded = plm.load(tmp_path)
    assert isinstance(loaded, TaskModel) and loaded.config == model.config
    tokens = ids(2, 6)
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens).logits, model(tokens).logits)


def test_a_bad_task_config_names_the_file_and_field(tmp_path):
    plm.save(task_model(bert(), "classify"), tmp_path)
    description = json.loads((tmp_path / "config.json").read_text())
    description["config"]["head"]["pooling"] = "max"
    (tmp_path / "config.json").write_text(json.dumps(description))
    with pytest.raises(PLMError, match=r"config\.json: head: .*unknown pooling 'max'"):
        plm.load(tmp_path)


def test_a_task_model_saved_before_heads_had_symmetric_loads_reading_pairs_in_one_order(tmp_path):
    plm.save(task_model(gpt(), "classify", symmetric=True), tmp_path)
    description = json.loads((tmp_path / "config.json").read_text())
    del description["config"]["head"]["symmetric"]
    (tmp_path / "config.json").write_text(json.dumps(description))
    assert plm.load(tmp_path).config.head.symmetric is False
    del description["config"]["head"]["pooling"]  # any other missing field is still an error
    (tmp_path / "config.json").write_text(json.dumps(description))
    with pytest.raises(PLMError, match=r"head: HeadConfig field\(s\) pooling missing"):
        plm.load(tmp_path)


def test_inputs_the_head_cannot_read_are_plm_errors():
    with pytest.raises(PLMError, match="choices"):
        task_model(bert(), "choice")(ids(2, 5))
    with pytest.raises(PLMError, match="one sequence per example"):
        task_model(bert(), "tag")(ids(2, 3, 5))
    with pytest.raises(PLMError, match="no segments"):
        task_model(gpt(), "classify")(ids(2, 5), token_type_ids=torch.zeros(2, 5, dtype=torch.long))


@pytest.mark.parametrize("preset, options", [("deberta-micro", {}), ("bert-micro", {"pooler": False})])
def test_cls_pooling_without_a_backbone_pooler_reads_the_first_position(preset: str, options: dict) -> None:
    """With right padding the first position is [CLS] and the last may be a pad: each row's logits in a padded
    batch must equal that sequence's logits alone (a head reading the last position fails on the short row)."""
    torch.manual_seed(0)
    model = task_model(
        from_config(preset_config(preset, vocab_size=50, **options)), "classify", 3, pooling="cls"
    ).eval()
    ids = torch.randint(5, 50, (2, 7), generator=torch.Generator().manual_seed(3))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    batched = model(ids, mask).logits
    for row, length in enumerate((7, 4)):
        alone = model(ids[row : row + 1, :length]).logits[0]
        torch.testing.assert_close(batched[row], alone, rtol=1e-5, atol=1e-5)
