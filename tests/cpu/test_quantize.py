"""int8 weights (plm.quantize): the rounding, the product, a trained model's outputs, saving, and what is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import plm
import plm.cpu.int8 as int8_routes
from plm.apps.text_pipelines import file_perplexity
from plm.cli.main import main
from plm.cpu import timing
from plm.cpu.int8 import MANY_ROWS, Int8Embedding, Int8Linear, Int8Weight, is_quantized
from plm.cpu.timing import FIRST_RETIME_S, TRIALS, TimedRoutes
from plm.loading import inference_weights
from plm.storage.checkpoint import WEIGHTS_FILE
from tests.conftest import synthetic_text

QUICK = ["--batch-size", "8", "--warmup", "10", "--dropout", "0", "--no-progress", "--device", "cpu"]


def test_each_row_is_rounded_to_int8_with_its_own_scale() -> None:
    torch.manual_seed(0)
    weight = torch.randn(64, 48) * torch.logspace(-3, 1, 64)[:, None]  # rows four orders of magnitude apart
    int8 = Int8Weight.of(weight)
    assert int8.values.dtype == torch.int8
    # Symmetric per row: each row's largest |w| becomes +-127, so small rows keep their precision.
    assert torch.equal(int8.values.abs().amax(1).int(), torch.full((64,), 127, dtype=torch.int32))
    assert torch.all((int8.dequantized() - weight).abs() <= int8.scales.float()[:, None] / 2 * (1 + 1e-6))


@pytest.mark.parametrize("route", ["int8", "bf16"])
def test_the_int8_product_is_the_dequantized_weights_product(route: str) -> None:
    """Against the fp64 product of the bf16-rounded input and the dequantized weights, plus the fp32 bias, by
    PyTorch's int8 kernel and by the bf16 product (which one a shape takes is timed per machine; plm's own kernel,
    which rounds the input to int16 instead, is tested against its own bound in tests/cpu/test_native.py)."""
    torch.manual_seed(0)
    linear, x = nn.Linear(96, 40), torch.randn(4, 5, 96)
    int8 = Int8Linear(linear)
    expected = x.bfloat16().double() @ int8.weight.dequantized().double().T + linear.bias.double()
    got = int8.weight.product(route, x.reshape(20, 96), linear.bias).view(4, 5, 40)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), expected, rtol=4e-3, atol=2e-3 * expected.abs().max().item())
    # and it is close to the fp32 layer itself: int8 rounding costs about 1% of a typical output
    error = (got - linear(x)).norm() / linear(x).norm()
    assert error < 0.02


@pytest.mark.parametrize("built", [True, False], ids=["plm's kernel built", "no plm kernel"])
def test_which_routes_a_product_times_by_its_rows(built: bool, monkeypatch) -> None:
    """A few rows (decoding) time PyTorch's int8 kernel against plm's own, where it is built and the weight is
    large, and take PyTorch's untimed where not; many rows time the bf16 product against PyTorch's kernel. A shape is
    timed once a bucket of rows (a power of 2)."""
    timed: list[tuple[str, ...]] = []

    def seconds(self, rows, bias, routes):
        timed.append(routes)
        return {route: 1.0 + index for index, route in enumerate(routes)}  # the first timed "wins"

    monkeypatch.setattr(Int8Weight, "route_seconds", seconds)
    monkeypatch.setattr(int8_routes, "ROUTES", TimedRoutes())
    monkeypatch.setattr(int8_routes.native, "usable", lambda *tensors: built)
    weight, threads = Int8Weight.of(torch.randn(1024, 96)), torch.get_num_threads()
    weight.linear(torch.randn(3, 96))
    assert timed == ([("int8", "native")] if built else [])
    few, many = ("int8", "native"), ("bf16", "int8")
    assert dict(int8_routes.ROUTES) == ({(few, 4, 1024, 96, threads): "int8"} if built else {})
    weight.linear(torch.randn(MANY_ROWS + 1, 96))
    assert timed[-1] == many and int8_routes.ROUTES[(many, 32, 1024, 96, threads)] == "bf16"
    weight.linear(torch.randn(MANY_ROWS + 3, 96))
    weight.linear(torch.randn(4, 96))
    assert len(timed) == (2 if built else 1)  # the same buckets
    # 15 rows and 16 share a power of 2 but not their routes: a winner among few rows' is not taken for many rows
    weight.linear(torch.randn(MANY_ROWS - 1, 96))
    weight.linear(torch.randn(MANY_ROWS, 96))
    assert timed == ([few, many, few, many] if built else [many, many])
    Int8Weight.of(torch.randn(40, 96)).linear(torch.randn(3, 96))  # too small for its kernel's speed to count
    assert len(timed) == (4 if built else 2)


@pytest.mark.parametrize("rows", [1, 4, 7, MANY_ROWS + 1])
def test_an_input_width_pytorch_s_int8_kernel_cannot_read_takes_the_bf16_product(rows: int) -> None:
    """torch 2.13's int8 kernel reads past rows of 72 values (not a multiple of 16) and dies with SIGSEGV, here in
    the middle of a test run; such a layer multiplies its values as a bf16 matrix, or by plm's own kernel."""
    torch.manual_seed(0)
    linear, x = nn.Linear(72, 40), torch.randn(rows, 72)
    int8 = Int8Linear(linear)
    assert "int8" not in int8.weight.routes(x, linear.bias)
    expected = x.bfloat16().double() @ int8.weight.dequantized().double().T + linear.bias.double()
    torch.testing.assert_close(int8(x).double(), expected, rtol=4e-3, atol=2e-3 * expected.abs().max().item())


def test_a_route_chosen_in_a_slow_spell_is_timed_again_after_a_while(monkeypatch) -> None:
    """As the one-token routes are (tests/cpu/test_routes.py): a winner timed under load must not stay for good. A
    timing again times the calls themselves, each route in turn; on the fake clock a call takes its route's cost."""
    now, cost = [0.0], {"bf16": 0.5, "int8": 1.0}
    monkeypatch.setattr(timing, "clock", lambda: now[0])
    monkeypatch.setattr(int8_routes, "ROUTES", TimedRoutes())
    monkeypatch.setattr(Int8Weight, "route_seconds", lambda self, rows, bias, routes: {"bf16": 2.0, "int8": 1.0})

    def product(self, route, rows, bias):
        now[0] += cost[route]
        return torch.zeros(rows.shape[0], self.values.shape[0])

    monkeypatch.setattr(Int8Weight, "product", product)
    weight, x = Int8Weight.of(torch.randn(40, 96)), torch.randn(MANY_ROWS, 96)
    key = (("bf16", "int8"), MANY_ROWS, 40, 96, torch.get_num_threads())
    weight.linear(x)
    assert int8_routes.ROUTES[key] == "int8"  # timed under load
    for _ in range(int(FIRST_RETIME_S) - 2):
        weight.linear(x)
    assert int8_routes.ROUTES[key] == "int8"  # not timed again at every call
    for _ in range(2 * TRIALS + 1):
        weight.linear(x)
    assert int8_routes.ROUTES[key] == "bf16"


def test_an_int8_embedding_looks_up_the_dequantized_rows() -> None:
    embedding = nn.Embedding(50, 16)
    int8 = Int8Embedding(embedding)
    ids = torch.tensor([[3, 7, 49], [0, 3, 3]])
    torch.testing.assert_close(int8(ids), int8.weight.dequantized()[ids], rtol=0, atol=0)


MLM = {"pretraining_heads": ("mlm",)}  # an encoder's logits come from its MLM head, which reads the word table


@pytest.mark.parametrize("preset, options", [("gpt2-micro", {}), ("bert-micro", MLM), ("deberta-micro", MLM),
                                             ("transformer-micro", {}), ("rnn-luong", {})])
def test_every_linear_layer_and_token_table_of_a_model_goes_int8_and_its_outputs_stay_close(preset, options) -> None:
    torch.manual_seed(0)
    model = plm.from_preset(preset, **options).eval()
    linears = sum(isinstance(module, nn.Linear) for module in model.modules())
    ids = torch.randint(3, 100, (2, 9))
    inputs = (ids, ids[:, :6]) if preset.startswith(("transformer", "rnn")) else (ids,)
    with torch.no_grad():
        expected = model(*inputs).logits
        plm.quantize(model, "int8")
        got = model(*inputs).logits
    assert not any(isinstance(module, nn.Linear) for module in model.modules())
    assert sum(isinstance(module, Int8Linear) for module in model.modules()) == linears
    assert all(isinstance(table, Int8Embedding) for table in model.vocabulary_embeddings())
    assert (got - expected).norm() / expected.norm() < 0.03


def test_albert_keeps_its_shared_layers_shared_and_saves_each_once(tmp_path: Path) -> None:
    model = plm.from_preset("albert-micro", sharing="attention").eval()
    plm.quantize(model, "int8")
    attentions = {id(block.attention) for block in model.blocks}
    assert len(attentions) == 1  # one int8 attention serving every layer, as the fp32 one did
    plm.save(model, tmp_path / "albert")
    ids = torch.randint(3, 100, (2, 7))
    torch.testing.assert_close(plm.load(tmp_path / "albert")(ids).logits, model(ids).logits, rtol=0, atol=0)


@pytest.fixture(scope="module")
def trained_gpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """gpt2-micro pre-trained for 300 steps on the synthetic text, and a held-out file of the same kind."""
    folder = tmp_path_factory.mktemp("int8")
    (folder / "train.txt").write_text(synthetic_text(), encoding="utf-8")
    (folder / "test.txt").write_text(synthetic_text(paragraphs=40, seed=1), encoding="utf-8")
    argv = ["pretrain", "--model", "gpt2-micro", "--vocab-size", "400", "--block-size", "64", "--steps", "300",
            "--lr", "3e-3", *QUICK, "--train", str(folder / "train.txt"), "--out", str(folder / "run")]
    assert main(argv) == 0
    return folder / "run", folder / "test.txt"


def test_a_trained_model_keeps_its_perplexity_and_most_greedy_tokens_with_int8_weights(trained_gpt) -> None:
    """Measured: perplexities 0.04% apart; the next-token argmax the same at 97.7-98.2% of the held-out positions.

    Whole greedy continuations are kept or lost on a near tie at any of their 24 tokens, which a model trained
    on a few threads or another flips: 11 to 20 of the 20 prompts keep all their tokens, in the runs measured.
    """
    run, test = trained_gpt
    fp32, tokenizer = plm.load_pretrained(run)
    int8 = plm.quantize(plm.load(run), "int8")
    ppl = {name: file_perplexity(model, tokenizer, test, 64, 32).perplexity for name, model in (("fp32", fp32),
                                                                                                 ("int8", int8))}
    assert abs(ppl["int8"] / ppl["fp32"] - 1) < 0.01, ppl
    ids = torch.tensor(tokenizer.encode(test.read_text(encoding="utf-8")))
    blocks = ids[: len(ids) // 64 * 64].view(-1, 64)  # (n, 64)
    with torch.no_grad():
        agreement = (fp32(blocks).logits.argmax(-1) == int8(blocks).logits.argmax(-1)).float().mean().item()
    assert agreement > 0.95, f"the argmax agrees at {agreement:.1%} of the positions"
    words = test.read_text(encoding="utf-8").split()
    prompts = [" ".join(words[i : i + 6]) for i in range(0, 20 * 50, 50)]
    same = sum(
        plm.generate_text(fp32, tokenizer, [prompt], 24) == plm.generate_text(int8, tokenizer, [prompt], 24)
        for prompt in prompts
    )
    assert same >= 8, f"{same} of 20 prompts kept their greedy continuation"


def test_a_quantized_model_saves_in_a_quarter_of_the_bytes_and_loads_as_int8(trained_gpt, tmp_path, capsys) -> None:
    run, _ = trained_gpt
    out = tmp_path / "int8"
    assert main(["quantize", "--model", str(run), "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["quantization"] == "int8"
    fp32_bytes = (plm.storage.checkpoint.model_directory(run) / WEIGHTS_FILE).stat().st_size
    assert (out / WEIGHTS_FILE).stat().st_size <= 0.5 * fp32_bytes
    loaded = plm.load(out)
    assert is_quantized(loaded)
    ids = torch.randint(3, 300, (2, 12))
    in_memory = plm.quantize(plm.load(run), "int8")
    torch.testing.assert_close(loaded(ids).logits, in_memory(ids).logits, rtol=0, atol=0)
    # plm generate reads it as it is, and gives what --quantize int8 gives on the fp32 run
    capsys.readouterr()
    assert main(["generate", "--model", str(out), "the", "--max-new-tokens", "12", "--device", "cpu"]) == 0
    from_saved = capsys.readouterr().out
    assert main(["generate", "--model", str(run), "the", "--max-new-tokens", "12", "--quantize", "int8"]) == 0
    assert capsys.readouterr().out == from_saved


@pytest.mark.parametrize(
    "argv, message",
    [
        (["pretrain", "--model", "{int8}", "--steps", "2", "--out", "{tmp}/again", "--train", "{text}"],
         "int8 weights, which are for inference"),
        (["convert", "--model", "{int8}", "--out", "{tmp}/hf"], "int8 weights, which are for inference"),
        (["finetune", "--task", "classify", "--model", "{int8}", "--out", "{tmp}/ft"],
         "int8 weights, which are for inference"),
    ],
    ids=["pretrain", "convert", "finetune"],
)
def test_training_or_converting_int8_weights_is_refused_in_one_line(trained_gpt, tmp_path, capsys, argv,
                                                                     message) -> None:
    run, test = trained_gpt
    int8 = tmp_path / "int8"
    assert main(["quantize", "--model", str(run), "--out", str(int8)]) == 0
    capsys.readouterr()
    filled = [arg.format(int8=int8, tmp=tmp_path, text=test) for arg in argv]
    assert main(filled) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "again").exists() and not (tmp_path / "hf").exists()


def test_a_trained_model_keeps_its_perplexity_within_half_a_percent_with_bf16_weights(trained_gpt, tmp_path,
                                                                                      capsys) -> None:
    run, test = trained_gpt
    fp32, tokenizer = plm.load_pretrained(run)
    bf16 = inference_weights(plm.load(run), "bf16")
    assert {parameter.dtype for parameter in bf16.parameters()} == {torch.bfloat16}  # half the bytes per token
    ppl = {name: file_perplexity(model, tokenizer, test, 64, 32).perplexity for name, model in (("fp32", fp32),
                                                                                                 ("bf16", bf16))}
    assert abs(ppl["bf16"] / ppl["fp32"] - 1) < 0.005, ppl
    # plm eval perplexity --precision bf16 is that same model
    out = tmp_path / "ppl.json"
    argv = ["eval", "perplexity", "--model", str(run), str(test), "--window", "64", "--stride", "32",
            "--device", "cpu", "--json", str(out)]
    assert main([*argv, "--precision", "bf16"]) == 0
    assert json.loads(out.read_text())["perplexity"] == pytest.approx(ppl["bf16"], rel=1e-6)


def test_bf16_weights_and_int8_weights_are_one_choice(trained_gpt, capsys) -> None:
    run, _ = trained_gpt
    argv = ["generate", "--model", str(run), "the", "--precision", "bf16", "--quantize", "int8"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "--quantize: not allowed with argument --precision" in capsys.readouterr().err
    with pytest.raises(plm.PLMError, match="choose one"):
        inference_weights(plm.load(run), "bf16", "int8")
