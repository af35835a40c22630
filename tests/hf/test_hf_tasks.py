"""Task checkpoints of Hugging Face transformers (``XFor{Task}``), read and written by plm.hf.

transformers is the oracle: a tiny random model of each class, saved with
``save_pretrained``, must give the same logits once loaded with ``plm.load``, in the
shapes of the issue's Python contract; a plm task model saved with ``plm.save_hf``
must load in transformers with no missing or unexpected keys and give the same logits.
"""

from __future__ import annotations

import pytest
import torch

import plm
from plm.errors import PLMError
from plm.models import from_preset
from plm.storage.atomic_files import read_tensors
from plm.tasks import TaskModel, task_model
from tests.hf.random_weights import randomized

transformers = pytest.importorskip("transformers")

VOCAB, TIME = 97, 9
TINY = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=40)
CONFIGS = {
    "Bert": lambda **labels: transformers.BertConfig(**TINY, type_vocab_size=3, **labels),
    "Albert": lambda **labels: transformers.AlbertConfig(**TINY, embedding_size=16, type_vocab_size=3, **labels),
    "Deberta": lambda **labels: transformers.DebertaConfig(
        **TINY, relative_attention=True, pos_att_type=["c2p", "p2c"], max_relative_positions=16, **labels
    ),
    "GPT2": lambda **labels: transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=40, pad_token_id=0, **labels
    ),
    "OpenAIGPT": lambda **labels: transformers.OpenAIGPTConfig(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=40, pad_token_id=0, **labels
    ),
}
CLASSES = [
    *(f"{family}For{task}" for family in ("Bert", "Albert", "Deberta")
      for task in ("SequenceClassification", "TokenClassification", "QuestionAnswering")),
    "BertForMultipleChoice",
    "AlbertForMultipleChoice",
    "GPT2ForSequenceClassification",
    "OpenAIGPTForSequenceClassification",
]



def hf_model(name: str):
    family, task = name.split("For")
    labels = {"num_labels": 2 if task == "QuestionAnswering" else 3}
    return randomized(getattr(transformers, name)(CONFIGS[family](**labels)))


def inputs(name: str) -> dict[str, torch.Tensor]:
    """Two sequences of 9 and 6 tokens, right-padded with 0 (GPT's pad id here); segments where the family has them."""
    torch.manual_seed(1)
    mask = torch.tensor([[1] * TIME, [1] * 6 + [0] * 3])
    batch = {"attention_mask": mask}
    if name.startswith(("Bert", "Albert")):
        batch["token_type_ids"] = torch.tensor([[0] * 4 + [1] * 5, [0] * 3 + [2] * 3 + [0] * 3])
    if name.endswith("MultipleChoice"):  # (batch, choices, time)
        batch = {key: value[:, None].expand(2, 3, TIME).contiguous() for key, value in batch.items()}
    batch["input_ids"] = torch.randint(1, VOCAB, batch["attention_mask"].shape) * batch["attention_mask"]
    return batch


def outputs(model, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The head's outputs, at the real tokens for per-token ones (padding computes what it likes)."""
    with torch.no_grad():
        output = model(**batch)
    found = {}
    for field in ("logits", "start_logits", "end_logits"):
        tensor = getattr(output, field, None)
        if tensor is not None:
            per_token = tensor.shape[:2] == batch["attention_mask"].shape
            found[field] = tensor[batch["attention_mask"].bool()] if per_token else tensor
    return found


def assert_same(expected: dict, actual: dict) -> None:
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(
            actual[name], expected[name], atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}"
        )


def load_in_transformers(name: str, directory):
    model, info = getattr(transformers, name).from_pretrained(directory, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval()


CONTRACT = {  # the Python contract: output shapes for inputs (2, 9), or (2, 3, 9) for multiple choice
    "SequenceClassification": {"logits": (2, 3)},
    "TokenClassification": {"logits": (2, TIME, 3)},
    "QuestionAnswering": {"start_logits": (2, TIME), "end_logits": (2, TIME)},
    "MultipleChoice": {"logits": (2, 3)},
}


@pytest.mark.parametrize("name", CLASSES)
def test_a_hugging_face_task_checkpoint_loads_with_its_head_and_same_logits(name, tmp_path):
    reference = hf_model(name)
    reference.save_pretrained(tmp_path / "hf")
    model = plm.load(tmp_path / "hf").eval()
    assert isinstance(model, TaskModel)
    batch = inputs(name)
    with torch.no_grad():
        output = model(**batch)
    shapes = {field: tuple(getattr(output, field).shape) for field in CONTRACT[name.split("For")[1]]}
    assert shapes == CONTRACT[name.split("For")[1]]
    assert_same(outputs(reference, batch), outputs(model, batch))

    plm.save_hf(model, tmp_path / "back")  # and back: transformers reads every tensor, same logits
    assert_same(outputs(reference, batch), outputs(load_in_transformers(name, tmp_path / "back"), batch))


PLM_MODELS = {  # a plm task model on a plm backbone -> the HF class it is written as
    "BertForSequenceClassification": lambda: task_model(
        from_preset("bert-micro", vocab_size=VOCAB, segments=3), "classify", 3
    ),
    "AlbertForTokenClassification": lambda: task_model(
        from_preset("albert-micro", vocab_size=VOCAB, segments=3), "tag", 3
    ),
    "DebertaForSequenceClassification": lambda: task_model(
        from_preset("deberta-micro", vocab_size=VOCAB, enhanced_mask_decoder=False), "classify", 3,
        pooler_activation="gelu",
    ),
    "DebertaForQuestionAnswering": lambda: task_model(
        from_preset("deberta-micro", vocab_size=VOCAB, enhanced_mask_decoder=False), "span"
    ),
    "GPT2ForSequenceClassification": lambda: task_model(
        from_preset("gpt2-micro", vocab_size=VOCAB), "classify", 3, dropout=0.0, bias=False, pad_token_id=0
    ),
}


@pytest.mark.parametrize("name", PLM_MODELS)
def test_a_plm_task_model_saved_for_hugging_face_gives_the_same_logits(name, tmp_path):
    torch.manual_seed(0)
    model = PLM_MODELS[name]()
    randomized(model)  # heads and biases away from their zero init
    plm.save_hf(model, tmp_path)
    batch = inputs(name)
    reference = load_in_transformers(name, tmp_path)
    assert_same(outputs(model, batch), outputs(reference, batch))
    assert read_tensors(tmp_path / "model.safetensors").keys() == reference.state_dict().keys()  # its own names
    again = plm.load(tmp_path).eval()
    assert again.config.head == model.config.head
    assert_same(outputs(model, batch), outputs(again, batch))


@pytest.mark.parametrize(
    ("make", "difference"),
    [
        (lambda: task_model(from_preset("bert-micro"), "classify", pooling="mean"), "pooling 'mean'"),
        (lambda: task_model(from_preset("deberta-micro"), "choice"), "no deberta class for the choice task"),
        (lambda: task_model(from_preset("deberta-micro"), "classify"), "pooler of its own"),
        (lambda: task_model(from_preset("gpt2-micro"), "classify", bias=False), "dropout before the classifier"),
        (lambda: task_model(from_preset("gpt2-micro"), "tag", dropout=0.0, bias=False),
         "no gpt class for the tag task"),
        (lambda: task_model(from_preset("gpt2-micro"), "classify", dropout=0.0, bias=False, symmetric=True),
         "pairs read in both orders"),
    ],
)
def test_a_task_model_without_a_hugging_face_class_is_refused(make, difference, tmp_path):
    with pytest.raises(PLMError, match=difference):
        plm.save_hf(make(), tmp_path)
    assert not any(tmp_path.iterdir())
