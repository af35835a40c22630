"""Translation scores against sacrebleu's documented example, the attention map of an RNN, and sampled translation."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from plm.apps.attention_map import pair_attention
from plm.data.dates import date_pairs
from plm.data.sentence_pairs import Seq2SeqTokenizers
from plm.decoding import GenerationConfig
from plm.errors import PLMError
from plm.models import RNNConfig, RNNSeq2Seq
from plm.objectives.translation import score_translations, translate_ids

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


@pytest.fixture(scope="module")
def random_rnn() -> tuple[RNNSeq2Seq, Seq2SeqTokenizers]:
    """An untrained RNN with attention: it rarely writes </s>, so every translation runs to its length limit."""
    tokenizers = Seq2SeqTokenizers.train(date_pairs(50, seed=0), vocab_size=300)
    torch.manual_seed(0)
    model = RNNSeq2Seq(RNNConfig(vocab_size=len(tokenizers.source), embedding_dim=8, hidden_dim=16, layers=1,
                                 attention="general", input_feeding=True)).eval()
    return model, tokenizers


SOURCES = [pair.source for pair in date_pairs(12, seed=1)]


def test_a_sampled_translation_is_the_same_whichever_sentences_share_its_batch(random_rnn) -> None:
    sampling = GenerationConfig(do_sample=True, seed=3, max_new_tokens=6, max_len_a=0.5)
    together = translate_ids(*random_rnn, SOURCES, sampling, max_tokens=4096)
    alone = translate_ids(*random_rnn, SOURCES, sampling, max_tokens=1)  # one sentence a batch
    assert together == alone
    assert len(set(map(tuple, together))) > 1
    assert translate_ids(*random_rnn, SOURCES, dataclasses.replace(sampling, seed=4)) != together
    # each translation ends with </s> or at its own limit: floor(0.5 x its source tokens) + 6 new tokens after <s>
    eos = random_rnn[1].target.required_id("eos")
    limits = [len(source) // 2 + 6 for source in random_rnn[1].encode_sources(SOURCES)]
    assert all(len(ids) - 1 == limit or ids[-1] == eos and len(ids) - 1 < limit for ids, limit in zip(together, limits))
    assert sum(len(ids) - 1 == limit for ids, limit in zip(together, limits)) > len(SOURCES) // 2


def test_sampling_among_the_single_most_likely_token_is_greedy_search(random_rnn) -> None:
    greedy = GenerationConfig(num_beams=1, max_new_tokens=6, max_len_a=0.5)
    sampled = dataclasses.replace(greedy, do_sample=True, top_k=1, seed=0)
    assert translate_ids(*random_rnn, SOURCES, sampled) == translate_ids(*random_rnn, SOURCES, greedy)


def test_a_sampled_first_token_follows_the_models_tempered_distribution(random_rnn) -> None:
    model, tokenizers = copy.deepcopy(random_rnn[0]), random_rnn[1]
    with torch.no_grad():  # logits half a nat apart, so that the temperature matters
        model.output.bias[torch.randperm(300, generator=torch.Generator().manual_seed(0))] = -0.5 * torch.arange(300.0)
    draws = 4000
    sampling = GenerationConfig(temperature=0.5, top_k=4, seed=0, max_new_tokens=1)
    first = torch.tensor([ids[1] for ids in translate_ids(model, tokenizers, ["4 July 1976"] * draws, sampling)])
    [source] = tokenizers.encode_sources(["4 July 1976"])
    start = tokenizers.target.required_id("bos")
    logits = model(torch.tensor([source]), torch.tensor([[start]])).logits[0, -1]  # the oracle: one forward pass
    top = logits.topk(4)
    expected = (top.values / 0.5).softmax(-1)
    observed = torch.stack([(first == token).float().mean() for token in top.indices])
    assert observed.sum().item() == pytest.approx(1)  # nothing outside the top 4
    assert torch.allclose(observed, expected, atol=0.03), (observed, expected)  # 4.7 standard deviations at most


def test_sampling_draws_one_translation_a_sentence_not_a_beam(random_rnn) -> None:
    with pytest.raises(PLMError, match="sampling draws one translation a sentence; give `num_beams` 1, not 4"):
        translate_ids(*random_rnn, SOURCES, GenerationConfig(num_beams=4, do_sample=True))


def test_exact_match_compares_each_translation_with_its_own_references_in_any_stream() -> None:
    hypotheses = ["the cat sat", " a dog ran ", "birds fly", "fish swim"]
    first = ["the cat sat", "a dog ran", "bees buzz", "the cat sat"]
    second = ["a cat sat", "dogs run", "birds fly", "fish swim."]
    # counted by hand: 1 (its own first reference), 2 (equal once stripped), 3 (its second reference); 4 matches
    # nothing of its own (though "the cat sat" is sentence 1's reference, and 4's is "fish swim.")
    scores = score_translations(hypotheses, [first, second])
    assert scores.exact_match == pytest.approx(3 / 4)
    assert score_translations(hypotheses[3:], [first[3:], second[3:]]).exact_match == 0.0


def test_a_search_needs_the_memory_of_every_beam_of_every_sentence_of_its_batch(monkeypatch) -> None:
    import types

    import plm.objectives.translation
    from plm.objectives.translation import check_search_memory

    vocabulary, state = 100, 1000
    model = types.SimpleNamespace(config=types.SimpleNamespace(vocab_size=vocabulary),
                                  hypothesis_bytes=lambda source, target: state)
    config = GenerationConfig(num_beams=4, max_len_a=1.0, max_new_tokens=2)
    batches = [[[5] * 3, [5] * 5, [5] * 2], [[5] * 4]]
    # written out: the first batch's 4 beams x 3 sentences, each a state and 12 bytes a vocabulary entry
    needed = 4 * 3 * (state + 12 * vocabulary)
    monkeypatch.setattr(plm.objectives.translation, "available_memory", lambda: needed)
    check_search_memory(model, config, batches)  # fits exactly
    monkeypatch.setattr(plm.objectives.translation, "available_memory", lambda: needed - 1)
    with pytest.raises(PLMError, match="`num_beams` 4 over 3 sentence\\(s\\) of 5 tokens"):
        check_search_memory(model, config, batches)


def test_a_source_tokenizer_larger_than_the_source_embeddings_is_refused(tmp_path) -> None:
    from plm.apps.translation import seq2seq_tokenizers
    from plm.models import from_preset

    pairs = date_pairs(200, seed=0)
    tokenizers = Seq2SeqTokenizers.train(pairs, vocab_size=300, joint=False)
    tokenizers.save(tmp_path)
    rows = len(tokenizers.source) - 1  # one source embedding short; the target table is large
    model = from_preset("transformer-micro", vocab_size=len(tokenizers.target) + 100, source_vocab_size=rows)
    with pytest.raises(PLMError, match=f"the source tokenizer has {len(tokenizers.source):,} tokens but the model "
                                       f"only {rows:,} embeddings"):
        seq2seq_tokenizers(tmp_path, model)
    fits = from_preset("transformer-micro", vocab_size=len(tokenizers.target), source_vocab_size=rows + 1)
    assert seq2seq_tokenizers(tmp_path, fits).source.encode("one") == tokenizers.source.encode("one")
