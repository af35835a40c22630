"""Translation scores against sacrebleu's documented example, and the attention map of an RNN."""

from __future__ import annotations

import pytest
import torch

from plm.apps.attention_map import pair_attention
from plm.data.dates import date_pairs
from plm.data.parallel import Seq2SeqTokenizers
from plm.errors import PLMError
from plm.models import RNNConfig, RNNSeq2Seq
from plm.objectives.translation import score_translations

# sacrebleu's README: BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ...) and chrF2 = 59.73 for this example.
REFERENCES = [["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
              ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."]]
HYPOTHESES = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]


def test_scores_are_sacrebleus_documented_example() -> None:
    scores = score_translations(HYPOTHESES, REFERENCES)
    assert round(scores.bleu, 2) == 48.53
    assert round(scores.chrf, 2) == 59.73
    assert scores.exact_match == pytest.approx(1 / 3)  # the first sentence equals its first reference: a fraction
    assert "exact match 33.33% (3 sentences)" in str(scores)  # printed as a percentage, marked
    with pytest.raises(PLMError, match="3 translations but 2 references"):
        score_translations(HYPOTHESES, [REFERENCES[0][:2]])


def test_the_attention_map_of_an_rnn_is_its_attention_with_tokens_on_both_axes() -> None:
    pairs = date_pairs(50, seed=0)
    tokenizers = Seq2SeqTokenizers.train(pairs, vocab_size=300)
    torch.manual_seed(0)
    size = len(tokenizers.source)
    model = RNNSeq2Seq(RNNConfig(vocab_size=size, embedding_dim=8, hidden_dim=16, layers=1,
                                 attention="general", input_feeding=True)).eval()
    attention = pair_attention(model, tokenizers, "4 July 1976", "1976-07-04")
    [source], [target] = tokenizers.encode_sources(["4 July 1976"]), tokenizers.encode_targets(["1976-07-04"])
    expected = model(torch.tensor([source]), torch.tensor([target[:-1]])).attentions[0]
    torch.testing.assert_close(attention.weights, expected)
    assert "".join(attention.columns[:-1]).replace("␣", "") == "4July1976" and attention.columns[-1] == "</s>"
    assert "".join(attention.rows[:-1]) == "1976-07-04" and attention.rows[-1] == "</s>"


def test_the_self_attention_map_of_gpt_is_the_softmax_of_its_scaled_causal_scores() -> None:
    from plm.apps.attention_map import self_attention
    from plm.models import from_preset
    from plm.tokenization.tokenizer import Tokenizer

    tokenizer = Tokenizer.train_bpe(["the animal did not cross the street because it was tired"] * 5, vocab_size=300)
    torch.manual_seed(0)
    model = from_preset("gpt2-micro").eval()  # 2 heads of 16
    text = "the animal did not cross"
    attention = self_attention(model, tokenizer, text, layer=0, head=1)
    ids = torch.tensor([tokenizer.encode(text)])
    block = model.blocks[0]
    x = block.attention_norm(model.token_embedding(ids) + model.position_embedding(torch.arange(ids.shape[1])[None]))
    weight, bias = block.attention.in_proj.weight, block.attention.in_proj.bias
    q = (x @ weight[:32].T + bias[:32])[0, :, 16:]  # head 1
    k = (x @ weight[32:64].T + bias[32:64])[0, :, 16:]
    scores = (q @ k.T / 4.0).masked_fill(~torch.ones(len(q), len(q), dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(attention.weights, scores.softmax(-1), atol=1e-5, rtol=1e-5)
    assert attention.rows == attention.columns == [tokenizer.decode([t]).strip() for t in ids[0].tolist()]
