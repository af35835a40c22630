"""GGUF export (plm.llama_cpp): read back with the gguf package's reader, each tensor against plm's weights under
llama.cpp's names for GPT-2 (written out here by hand, not taken from the code under test), and the metadata that
llama.cpp's gpt2 architecture reads."""

import dataclasses

import numpy as np
import pytest
import torch

from plm.cli.main import main
from plm.errors import PLMError
from plm.llama_cpp import write_gguf
from plm.models.bert import PRESETS as BERT_PRESETS
from plm.models.bert import Bert
from plm.models.gpt import GPT, GPT1, PRESETS
from plm.storage.checkpoint import save_model
from plm.tokenization.tokenizer import Tokenizer

gguf = pytest.importorskip("gguf")

LLAMA_CPP_NAMES = {  # llama.cpp's gpt2 tensor (llama-arch.cpp) -> plm's parameter
    "token_embd": "token_embedding",
    "position_embd": "position_embedding",
    "output_norm": "final_norm",
    "blk.{i}.attn_norm": "blocks.{i}.attention_norm",
    "blk.{i}.attn_qkv": "blocks.{i}.attention.in_proj",
    "blk.{i}.attn_output": "blocks.{i}.attention.out_proj",
    "blk.{i}.ffn_norm": "blocks.{i}.feed_forward_norm",
    "blk.{i}.ffn_up": "blocks.{i}.feed_forward.fc_in",
    "blk.{i}.ffn_down": "blocks.{i}.feed_forward.fc_out",
}


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train_bpe(["the cat sat on the mat, and the dog sat on the log."] * 20, vocab_size=300)


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    model = GPT(PRESETS["gpt2-micro"])
    with torch.no_grad():  # norms away from their initial ones and zeros, so that a swapped pair shows
        for name, parameter in model.named_parameters():
            if parameter.dim() == 1:
                parameter.copy_(torch.randn_like(parameter))
    return model.eval()


def expected_tensors(model: GPT) -> dict[str, torch.Tensor]:
    state = model.state_dict()
    expected = {}
    for gguf_name, plm_name in LLAMA_CPP_NAMES.items():
        for i in range(model.config.layers) if "{i}" in gguf_name else [None]:
            for kind in ("weight", "bias"):
                plm_key = f"{plm_name.format(i=i)}.{kind}"
                if plm_key in state:
                    expected[f"{gguf_name.format(i=i)}.{kind}"] = state[plm_key]
    assert len(expected) == len(state)  # every parameter has its llama.cpp name
    return expected


def field(reader, name: str):
    value = reader.fields[name]
    if value.types and value.types[0] == gguf.GGUFValueType.ARRAY:
        return [value.parts[index].tobytes().decode() if value.types[-1] == gguf.GGUFValueType.STRING
                else value.parts[index].item() for index in value.data]
    part = value.parts[value.data[0]]
    return part.tobytes().decode() if value.types[0] == gguf.GGUFValueType.STRING else part.item()


@pytest.mark.parametrize("tensor_type", ["f32", "f16", "q8_0"])
def test_every_tensor_reads_back_as_plm_s_weight_under_llama_cpp_s_name(model, tokenizer, tensor_type, tmp_path):
    reader = gguf.GGUFReader(write_gguf(model, tokenizer, tmp_path / "m.gguf", tensor_type))
    stored = {tensor.name: tensor for tensor in reader.tensors}
    expected = expected_tensors(model)
    assert set(stored) == set(expected)
    for name, weight in expected.items():
        tensor = stored[name]
        # ggml lists dimensions innermost first: an (out, in) matrix is ne = [in, out]
        assert [int(n) for n in tensor.shape] == list(weight.shape)[::-1], name
        values = torch.from_numpy(np.array(gguf.quants.dequantize(tensor.data, tensor.tensor_type))).reshape(
            weight.shape)
        matrix = weight.dim() == 2 and name != "position_embd.weight"  # llama.cpp's converter keeps these f32
        kind = tensor_type if matrix else "f32"
        assert tensor.tensor_type.name == kind.upper(), name
        if kind == "f32":
            assert torch.equal(values, weight), name
        elif kind == "f16":
            assert torch.equal(values, weight.half().float()), name
        else:  # q8_0: blocks of 32 along a row, each rounded to 127 steps of its largest |value|
            blocks = weight.reshape(-1, 32)
            step = blocks.abs().amax(dim=1, keepdim=True) / 127
            error = (values.reshape(-1, 32) - blocks).abs()
            assert (error <= 0.57 * step + 1e-12).all(), name  # half a step, and the step's own fp16 rounding
            assert error.max() > 0, name


def test_the_metadata_is_what_llama_cpp_s_gpt2_reads(model, tokenizer, tmp_path):
    reader = gguf.GGUFReader(write_gguf(model, tokenizer, tmp_path / "m.gguf", "q8_0"))
    config = model.config
    assert field(reader, "general.architecture") == "gpt2"
    assert field(reader, "gpt2.context_length") == config.context_length
    assert field(reader, "gpt2.embedding_length") == config.dim
    assert field(reader, "gpt2.feed_forward_length") == config.ffn_dim
    assert field(reader, "gpt2.block_count") == config.layers
    assert field(reader, "gpt2.attention.head_count") == config.heads
    assert field(reader, "gpt2.attention.layer_norm_epsilon") == pytest.approx(config.norm_eps)
    assert field(reader, "general.file_type") == 7  # llama.cpp's LLAMA_FTYPE_MOSTLY_Q8_0
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    assert field(reader, "tokenizer.ggml.pre") == "gpt-2"  # GPT-2's split before BPE, as plm's ByteLevel does
    tokens = field(reader, "tokenizer.ggml.tokens")
    vocabulary = tokenizer.backend.get_vocab()
    assert len(tokens) == config.vocab_size == 512 > len(vocabulary)  # padded to the embedding's rows
    assert {token: index for index, token in enumerate(tokens) if index < len(vocabulary)} == vocabulary
    types = field(reader, "tokenizer.ggml.token_type")
    end = tokenizer.eos_id
    assert types[end] == 3 and types[end + 1] == 1 and types[-1] == 5  # control, normal, unused
    merges = field(reader, "tokenizer.ggml.merges")
    assert merges and all(len(merge.split(" ")) == 2 for merge in merges)
    left, right = merges[0].split(" ")
    assert left + right in vocabulary  # a merge makes a token of the vocabulary
    assert field(reader, "tokenizer.ggml.eos_token_id") == field(reader, "tokenizer.ggml.bos_token_id") == end
    assert field(reader, "tokenizer.ggml.add_bos_token") is False


def test_a_model_llama_cpp_would_run_as_something_else_is_refused_and_nothing_written(tokenizer, tmp_path):
    out = tmp_path / "m.gguf"
    cases = [
        (GPT(GPT1), "post-LN"),
        (GPT(dataclasses.replace(PRESETS["gpt2-micro"], activation="relu")), "relu"),
        (Bert(BERT_PRESETS["bert-micro"]), "bert model"),
    ]
    for bad, said in cases:
        with pytest.raises(PLMError, match=said):
            write_gguf(bad, tokenizer, out)
    wordpiece = Tokenizer.train_wordpiece(["the cat sat on the mat"] * 20, vocab_size=100)
    with pytest.raises(PLMError, match="byte-level BPE"):
        write_gguf(GPT(PRESETS["gpt2-micro"]), wordpiece, out)
    with pytest.raises(PLMError, match="q4"):
        write_gguf(GPT(PRESETS["gpt2-micro"]), tokenizer, out, "q4")
    assert list(tmp_path.iterdir()) == []


def test_plm_convert_to_gguf_writes_one_file_and_replaces_none(model, tokenizer, tmp_path, capsys):
    save_model(model, tmp_path / "gpt", tokenizer)
    out = tmp_path / "gpt.gguf"
    assert main(["convert", "--model", str(tmp_path / "gpt"), "--to", "gguf", "--type", "q8_0", "--out", str(out)]) == 0
    assert gguf.GGUFReader(out).tensors[0].tensor_type.name == "Q8_0"
    before = out.read_bytes()
    assert main(["convert", "--model", str(tmp_path / "gpt"), "--to", "gguf", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err and out.read_bytes() == before
    assert main(["convert", "--model", str(tmp_path / "gpt"), "--to", "gguf", "--out", str(out), "--overwrite"]) == 0
    assert gguf.GGUFReader(out).tensors[0].tensor_type.name == "F16"  # the default, as llama.cpp's converter
    assert main(["convert", "--model", str(tmp_path / "gpt"), "--type", "f16", "--out", str(tmp_path / "hf")]) == 2
    assert "--to gguf" in capsys.readouterr().err and not (tmp_path / "hf").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["gpt", "gpt.gguf"]


ODD = dataclasses.replace(PRESETS["gpt2-micro"], vocab_size=320, context_length=40, dim=48, layers=1, heads=3,
                          ffn_dim=96, norm_eps=1e-3)  # heads != layers, eps not the default, rows of 48


@pytest.mark.parametrize("tensor_type, file_type", [("f32", 0), ("f16", 1)])  # llama.cpp's LLAMA_FTYPE_*
def test_the_metadata_is_the_model_s_own_where_it_is_no_preset_s_default(tokenizer, tmp_path, tensor_type, file_type):
    """A config whose heads differ from its layers and whose eps is not 1e-5: each key holds its own value (a head
    count written from the layers, or eps left at the default, would still read back for gpt2-micro), and the file
    type names the matrices' type."""
    torch.manual_seed(0)
    reader = gguf.GGUFReader(write_gguf(GPT(ODD).eval(), tokenizer, tmp_path / "m.gguf", tensor_type))
    assert field(reader, "gpt2.attention.head_count") == 3
    assert field(reader, "gpt2.block_count") == 1
    assert field(reader, "gpt2.attention.layer_norm_epsilon") == pytest.approx(1e-3)
    assert field(reader, "gpt2.context_length") == 40
    assert field(reader, "gpt2.embedding_length") == 48
    assert field(reader, "gpt2.feed_forward_length") == 96
    assert field(reader, "general.file_type") == file_type


def test_q8_0_matrices_whose_rows_are_not_whole_blocks_of_32_are_stored_f16(tokenizer, tmp_path):
    """Rows of 48 values do not split into q8_0's blocks of 32: llama.cpp's converter stores those matrices f16, and
    so does plm; the one matrix with rows of 96 (ffn_down, (48, 96)) is q8_0."""
    torch.manual_seed(0)
    model = GPT(ODD).eval()
    reader = gguf.GGUFReader(write_gguf(model, tokenizer, tmp_path / "m.gguf", "q8_0"))
    types = {tensor.name: tensor.tensor_type.name for tensor in reader.tensors if tensor.name.endswith(".weight")}
    assert types == {"token_embd.weight": "F16", "position_embd.weight": "F32", "output_norm.weight": "F32",
                     "blk.0.attn_norm.weight": "F32", "blk.0.attn_qkv.weight": "F16",
                     "blk.0.attn_output.weight": "F16", "blk.0.ffn_norm.weight": "F32", "blk.0.ffn_up.weight": "F16",
                     "blk.0.ffn_down.weight": "Q8_0"}
    stored = {tensor.name: tensor for tensor in reader.tensors}
    expected = expected_tensors(model)
    for name in ("token_embd.weight", "blk.0.attn_qkv.weight"):
        values = torch.from_numpy(np.array(gguf.quants.dequantize(stored[name].data, stored[name].tensor_type)))
        assert torch.equal(values.reshape(expected[name].shape), expected[name].half().float()), name
