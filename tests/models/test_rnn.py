"""The RNN encoder-decoder in its three forms: padding, teacher forcing vs decoding, attention weights.

Every check runs for each form (no attention, Bahdanau, Luong with input feeding, Luong
without it) and both cells, since each form takes its own path through the decoder.
"""

from __future__ import annotations

import json

import pytest
import torch

import plm
from plm.models import RNNConfig, RNNSeq2Seq, from_preset
from plm.models.rnn import PRESETS

FORMS = {
    "none-lstm": dict(attention="none", input_feeding=False),
    "bahdanau-gru": dict(attention="bahdanau", input_feeding=False, cell="gru"),
    "luong-general-feeding": dict(attention="general", input_feeding=True),
    "luong-dot": dict(attention="dot", input_feeding=False, cell="gru", bidirectional=False),
    "luong-concat-feeding": dict(attention="concat", input_feeding=True, layers=1),
    # Local attention with windows narrower than the sources, so that the window shows
    "luong-local-m-feeding": dict(attention="general", alignment="local-m", window=1, input_feeding=True),
    "luong-local-p-dot": dict(attention="dot", alignment="local-p", window=1, input_feeding=False, cell="gru",
                              bidirectional=False),
}
GLOBAL_FORMS = [form for form in FORMS if "local" not in form]


def tiny(form: str) -> RNNSeq2Seq:
    torch.manual_seed(0)
    options = dict(source_vocab_size=20, vocab_size=17, embedding_dim=8, hidden_dim=12, layers=2) | FORMS[form]
    model = RNNSeq2Seq(RNNConfig(**options)).eval()
    for parameter in model.parameters():  # larger than Luong's init, so that every input visibly moves the output
        torch.nn.init.normal_(parameter, std=0.5)
    return model


def padded_batch() -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Three sources of lengths 5, 2 and 4, right-padded with id 0 (a real token id too)."""
    lengths = [5, 2, 4]
    ids = torch.randint(1, 20, (3, 5), generator=torch.Generator().manual_seed(1))
    mask = torch.arange(5)[None] < torch.tensor(lengths)[:, None]
    return ids.masked_fill(~mask, 0), mask.long(), lengths


TARGET = torch.randint(0, 17, (3, 6), generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("form", FORMS)
def test_padding_in_the_source_changes_nothing(form: str) -> None:
    model = tiny(form)
    ids, mask, lengths = padded_batch()
    batched = model(ids, TARGET, mask)
    for row, length in enumerate(lengths):
        alone = model(ids[row : row + 1, :length], TARGET[row : row + 1])
        torch.testing.assert_close(batched.logits[row], alone.logits[0], rtol=1e-5, atol=1e-6)
        if alone.attentions is not None:
            torch.testing.assert_close(batched.attentions[row, :, :length], alone.attentions[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", FORMS)
def test_teacher_forcing_equals_decoding_one_token_at_a_time(form: str) -> None:
    model = tiny(form)
    ids, mask, _ = padded_batch()
    forced = model(ids, TARGET, mask)
    state, logits, attentions = model.encode(ids, mask), [], []
    for t in range(TARGET.shape[1]):
        step = model.decode(TARGET[:, t : t + 1], state)
        state = step.state
        logits.append(step.logits)
        attentions.append(step.attentions)
    torch.testing.assert_close(forced.logits, torch.cat(logits, 1), rtol=1e-5, atol=1e-6)
    if forced.attentions is not None:
        torch.testing.assert_close(forced.attentions, torch.cat(attentions, 1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", [form for form in GLOBAL_FORMS if not form.startswith("none")])
def test_attention_weights_sum_to_one_over_real_tokens_and_are_zero_on_pads(form: str) -> None:
    model = tiny(form)
    ids, mask, lengths = padded_batch()
    weights = model(ids, TARGET, mask).attentions  # (B, T, S)
    assert weights.shape == (3, TARGET.shape[1], 5)
    for row, length in enumerate(lengths):
        torch.testing.assert_close(weights[row, :, :length].sum(-1), torch.ones(TARGET.shape[1]))
        assert torch.all(weights[row, :, length:] == 0)
        assert torch.all(weights[row, :, :length] > 0)


@pytest.mark.parametrize("form", ["none-lstm", "bahdanau-gru", "luong-general-feeding"])
def test_the_output_layer_reads_what_each_paper_feeds_it(form: str) -> None:
    """Cho's and Bahdanau's deep output: W_s maxout(W_o [s_t; E y_{t-1}; c_t]); Luong's: W_s tanh(W_c [c_t; s_t])."""
    model, (source, mask, _) = tiny(form), padded_batch()
    previous = torch.tensor([[3], [7], [1]])
    seen = {}
    if model.attention is not None:
        model.attention.register_forward_hook(lambda module, inputs, output: seen.update(c=output[0]))
    state = model.encode(source, mask)
    step = model.decode(previous, state)
    logits, s = step.logits[:, 0], step.state.hidden[0][-1]  # s_t: the top layer's new state
    c = seen["c"][:, 0] if "c" in seen else state.summary  # no attention: the encoder's final state
    if form.startswith("luong"):
        readout = torch.tanh(torch.cat([c, s], -1) @ model.combine.weight.T)
    else:
        units = torch.cat([s, model.target_embedding(previous[:, 0]), c], -1) @ model.deep_output.weight.T
        units = units + model.deep_output.bias
        readout = torch.maximum(units[:, 0::2], units[:, 1::2])
    torch.testing.assert_close(logits, readout @ model.output.weight.T + model.output.bias)


def test_luong_input_feeding_passes_each_attentional_vector_to_the_next_step() -> None:
    """A hand-written loop on torch.nn's LSTM cell: step t reads [E y_t; h~_{t-1}] (h~_0 = 0), then attends with
    s_t^T W h_j, then h~_t = tanh(W_c [c_t; s_t]) and logits W_s h~_t. Without the feeding the logits differ."""
    model, (source, mask, _) = tiny("luong-general-feeding"), padded_batch()
    state = model.encode(source, mask)
    memory, keys = state.memory, state.memory @ model.attention.weight.weight.T  # (B, S, H): W h_j
    lstm, layers = model.decoder, model.config.layers
    h, c = [list(part) for part in state.hidden]  # per layer (B, H)
    feed, expected = torch.zeros(3, model.config.hidden_dim), []
    for t in range(TARGET.shape[1]):
        x = torch.cat([model.target_embedding(TARGET[:, t]), feed], -1)
        for layer in range(layers):
            cell = torch.nn.LSTMCell(x.shape[-1], model.config.hidden_dim)
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(cell, name).data = getattr(lstm, f"{name}_l{layer}").data
            h[layer], c[layer] = cell(x, (h[layer], c[layer]))
            x = h[layer]
        scores = torch.einsum("bh,bsh->bs", x, keys).masked_fill(mask == 0, float("-inf"))
        context = torch.einsum("bs,bsh->bh", scores.softmax(-1), memory)
        feed = torch.tanh(torch.cat([context, x], -1) @ model.combine.weight.T)
        expected.append(feed @ model.output.weight.T + model.output.bias)
    torch.testing.assert_close(model(source, TARGET, mask).logits, torch.stack(expected, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form, projection", [("bahdanau-gru", "key_proj"), ("luong-general-feeding", "weight")])
def test_the_encoder_states_are_projected_once_per_source_not_at_every_step(form: str, projection: str) -> None:
    """Bahdanau's U h_j and Luong's W h_j depend on the source alone: one projection serves every target step."""
    model, (source, mask, _) = tiny(form), padded_batch()
    calls = []
    getattr(model.attention, projection).register_forward_hook(lambda *args: calls.append(1))
    state = model.encode(source, mask)
    for token in range(4):  # decoding step by step
        state = model.decode(torch.full((3, 1), token), state).state
    model(source, torch.randint(0, 17, (3, 6)), mask)  # teacher forcing: another source, one more projection
    assert len(calls) == 2


def test_reordering_the_state_decodes_the_chosen_rows() -> None:
    """Beam search keeps some rows and repeats others: the reordered state must decode like those rows."""
    model = tiny("luong-general-feeding")
    ids, mask, _ = padded_batch()
    state = model.decode(TARGET[:, :3], model.encode(ids, mask)).state
    index = torch.tensor([2, 2, 0])
    reordered = model.decode(TARGET[index, 3:], state.reorder(index))
    expected = model(ids[index], TARGET[index], mask[index]).logits[:, 3:]
    torch.testing.assert_close(reordered.logits, expected, rtol=1e-5, atol=1e-6)


def test_local_attention_reads_a_window_at_the_target_position_or_a_predicted_one() -> None:
    ids, mask, lengths = padded_batch()
    local_m = tiny("luong-local-m-feeding")(ids, TARGET, mask).attentions  # window 1: p_t - 1 .. p_t + 1
    for row, length in enumerate(lengths):
        for t in range(TARGET.shape[1]):
            centre = min(t, length - 1)  # p_t = t, within the source
            window = [s for s in range(5) if abs(s - centre) <= 1 and s < length]
            assert local_m[row, t].nonzero().flatten().tolist() == window
            torch.testing.assert_close(local_m[row, t].sum(), torch.tensor(1.0))
    local_p = tiny("luong-local-p-dot")(ids, TARGET, mask).attentions
    assert torch.all(local_p[:, :, :].sum(-1) < 1)  # the Gaussian around a real-valued p_t takes its share
    assert all((local_p[row, t] > 0).sum() <= 3 for row in range(3) for t in range(TARGET.shape[1]))


def test_presets_are_the_three_forms() -> None:
    forms = [(PRESETS[name].attention, PRESETS[name].input_feeding) for name in ("rnn", "rnn-bahdanau", "rnn-luong")]
    assert forms == [("none", False), ("bahdanau", False), ("general", True)]
    assert [PRESETS[f"rnn-luong-local-{kind}"].alignment for kind in "mp"] == ["local-m", "local-p"]
    with torch.device("meta"):  # Luong's dot score learns nothing: its model is general's less the score's W_a
        dot, general = (from_preset(f"rnn-luong{form}", vocab_size=90) for form in ("-dot", ""))
    hidden = PRESETS["rnn-luong"].hidden_dim
    assert PRESETS["rnn-luong-dot"].attention == "dot"
    assert general.num_parameters() - dot.num_parameters() == hidden * hidden
    with torch.device("meta"):
        model = from_preset("rnn-luong", vocab_size=90, source_vocab_size=100)
        assert (model.source_embedding.num_embeddings, model.output.out_features) == (100, 90)


@torch.no_grad()
def test_greedy_and_beam_search_decode_through_the_interface() -> None:
    """Greedy equals the argmax chain computed by hand; beam 1 equals greedy; beam 3 scores at least as well."""
    from plm.decoding import beam_search
    from plm.decoding.generation import generate

    model = tiny("bahdanau-gru")
    ids, mask, _ = padded_batch()
    start = torch.full((3, 1), 1)
    greedy = generate(model, start, max_new_tokens=5, source_ids=ids, source_mask=mask)
    history = start
    for _ in range(5):  # the oracle: teacher-force the history so far, take the argmax of the last position
        history = torch.cat([history, model(ids, history, mask).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(greedy, history)
    one = beam_search(model, start, num_beams=1, length_penalty=0.0, max_new_tokens=5, source_ids=ids, source_mask=mask)
    assert torch.equal(one.sequences, greedy)

    def log_p(sequences: torch.Tensor) -> torch.Tensor:
        logits = model(ids, sequences[:, :-1], mask).logits.log_softmax(-1)
        return logits.gather(2, sequences[:, 1:, None]).squeeze(2).sum(1)

    three = beam_search(model, start, num_beams=3, length_penalty=0.0, max_new_tokens=5, source_ids=ids,
                        source_mask=mask)
    assert torch.all(log_p(three.sequences) >= log_p(greedy) - 1e-5)
    torch.testing.assert_close(three.scores, log_p(three.sequences))


def test_embeddings_start_as_the_config_says_and_older_saves_still_load(tmp_path) -> None:
    """N(0, 1) token tables by default (they learn faster at CPU budgets), Luong's U(-0.1, 0.1) when asked;
    a model saved before ``embedding_init`` existed loads as the uniform one it was."""
    torch.manual_seed(0)
    options = dict(source_vocab_size=400, vocab_size=300, embedding_dim=32, hidden_dim=16, layers=1)
    normal, uniform = RNNSeq2Seq(RNNConfig(**options)), RNNSeq2Seq(RNNConfig(**options, embedding_init="uniform"))
    for table in (normal.source_embedding.weight, normal.target_embedding.weight):
        assert abs(table.std().item() - 1.0) < 0.02  # 12,800 draws of N(0, 1): the std's own spread is 0.006
    assert uniform.target_embedding.weight.abs().max() <= 0.1 and uniform.decoder.weight_hh_l0.abs().max() <= 0.1
    assert normal.decoder.weight_hh_l0.abs().max() <= 0.1  # every other parameter as Luong's

    plm.save(normal, tmp_path)
    description = json.loads((tmp_path / "config.json").read_text())
    del description["config"]["embedding_init"]
    (tmp_path / "config.json").write_text(json.dumps(description))
    loaded = plm.load(tmp_path)
    assert loaded.config.embedding_init == "uniform"
    assert torch.equal(loaded.target_embedding.weight, normal.target_embedding.weight)


def test_bahdanau_attends_with_the_top_layers_previous_state_before_each_step() -> None:
    """A hand-written loop on torch.nn's GRU cell: e_tj = v^T tanh(W s_{t-1} + U h_j), s_{t-1} the top layer's
    state; c_t is read beside E y_{t-1}; logits W_s maxout(W_o [s_t; E y_{t-1}; c_t]).

    Guards against the score reading another layer's state (with two layers), or the new state s_t."""
    model, (source, mask, _) = tiny("bahdanau-gru"), padded_batch()
    attention, gru, layers = model.attention, model.decoder, model.config.layers
    state = model.encode(source, mask)
    memory = state.memory  # (B, S, H): the encoder states h_j
    h = list(state.hidden[0])  # per layer (B, H)
    expected = []
    for t in range(TARGET.shape[1]):
        hidden = torch.tanh((h[-1] @ attention.query_proj.weight.T)[:, None] + attention.key_proj(memory))
        scores = (hidden @ attention.v.weight.T)[..., 0].masked_fill(mask == 0, float("-inf"))  # (B, S)
        context = torch.einsum("bs,bsh->bh", scores.softmax(-1), memory)
        previous = model.target_embedding(TARGET[:, t])
        x = torch.cat([previous, context], -1)
        for layer in range(layers):
            cell = torch.nn.GRUCell(x.shape[-1], model.config.hidden_dim)
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(cell, name).data = getattr(gru, f"{name}_l{layer}").data
            h[layer] = x = cell(x, h[layer])
        units = torch.cat([x, previous, context], -1) @ model.deep_output.weight.T + model.deep_output.bias
        readout = torch.maximum(units[:, 0::2], units[:, 1::2])
        expected.append(readout @ model.output.weight.T + model.output.bias)
    torch.testing.assert_close(model(source, TARGET, mask).logits, torch.stack(expected, 1), rtol=1e-5, atol=1e-5)
