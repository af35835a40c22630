"""Where decoding's time goes on the CPU: the experiments behind the speed targets (docs/speed.md).

(a) Per-step overhead (gpt2-mini's shape, greedy, batch 1). plm's ``generate`` against the
    same step written as one function over the model's weights (a static KV cache, the
    products through plm's own one-token route as opaque custom ops), run eagerly and under
    ``torch.compile`` (fullgraph, static shapes: one graph, no Python between the ops, the
    element-wise work fused). If Python and dispatch were the wall, the compiled step would win.
(b) The int8 products of one GPT-2 124M token (49 weight matrices and the tied output layer,
    cycled as a decoding step reads them): plm's int8 product (the route it times: PyTorch's int8-weight kernel, or
    plm's own, plm.cpu.native) against casting row
    blocks of the int8 weight to fp32 and multiplying in fp32, and against plm's fp32 products.
    If the kernel were bound by memory, the fp32 products of 4x the bytes would take 4x as long.
(c) The kernels alone: the products of one GPT-2 124M token, over ``--copies`` copies of its matrices
    cycled so that each comes from memory, as decoding reads them, in GB/s of weights read, by each
    kernel plm can route a one-row product to: PyTorch's fp32, bf16 and int8 ones, and plm's own
    (plm.cpu.native), against the measured bandwidth. The matrices lie in huge pages, as plm's
    inference weights do (plm.cpu.huge_pages), unless ``--plain-pages``.

(d) The step around the products: GPT-2 124M's greedy decoding through ``generate`` with each step after the
    prompt's in C (plm.cpu.native_step, what ``generate`` takes for up to 8 rows on the CPU) against the same
    ``generate`` with the model's own forward for every step, in fp32, bf16 and int8 weights as
    ``inference_weights`` gives them, one row and ``--rows`` rows.

    python benchmarks/bench_decode_limits.py              # (a) and (b), under a minute on 2 CPU cores
    python benchmarks/bench_decode_limits.py --part int8
    python benchmarks/bench_decode_limits.py --part kernels   # about a minute, 3.5 GB of memory
    python benchmarks/bench_decode_limits.py --part step      # about 4 minutes
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

import torch
import torch.nn.functional as F

from bench_common import Report, interleaved_medians
from plm.cpu import native
from plm.cpu.huge_pages import huge_pages_available, into_huge_pages
from plm.cpu.int8 import Int8Weight
from plm.decoding.generation import generate
from plm.loading import inference_weights
from plm.models import GPT, GPTConfig, from_preset

routes = importlib.import_module("plm.cpu.linear")  # plm.core re-exports the function ``linear`` under that name
CPU = torch.device("cpu")


@torch.library.custom_op("plm_bench::one_token_linear", mutates_args=())
def one_token_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """plm's one-token product (the route it times and keeps), opaque to torch.compile."""
    return routes.linear(x, weight, bias)


@one_token_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], weight.shape[0])


def functional_step(model, max_length: int) -> tuple[Callable, tuple[torch.Tensor, torch.Tensor]]:
    """A greedy step of ``model`` (plm's GPT) as one function of (token, position, keys, values) -> next token.

    keys, values: (layers, 1, heads, max_length, head_dim); positions past ``position`` are masked out.
    """
    config, blocks = model.config, list(model.blocks)
    heads, head_dim = config.heads, config.dim // config.heads
    cache = tuple(torch.zeros(config.layers, 1, heads, max_length, head_dim) for _ in range(2))

    def norm(x: torch.Tensor, layer: torch.nn.LayerNorm) -> torch.Tensor:
        return F.layer_norm(x, (config.dim,), layer.weight, layer.bias, layer.eps)

    def step(token: torch.Tensor, position: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        x = model.token_embedding.weight[token] + model.position_embedding.weight[position]  # (1, 1, dim)
        visible = (torch.arange(max_length) <= position).view(1, 1, 1, max_length)
        for i, block in enumerate(blocks):
            attention, ffn = block.attention, block.feed_forward
            qkv = one_token_linear(norm(x, block.attention_norm), attention.in_proj.weight, attention.in_proj.bias)
            q, k, v = qkv.view(1, 1, 3, heads, head_dim).permute(2, 0, 3, 1, 4)  # each (1, heads, 1, head_dim)
            keys[i].index_copy_(2, position, k)
            values[i].index_copy_(2, position, v)
            out = F.scaled_dot_product_attention(q, keys[i], values[i], attn_mask=visible)
            out = out.transpose(1, 2).reshape(1, 1, config.dim)
            x = x + one_token_linear(out, attention.out_proj.weight, attention.out_proj.bias)
            hidden = F.gelu(one_token_linear(norm(x, block.feed_forward_norm), ffn.fc_in.weight, ffn.fc_in.bias),
                            approximate="tanh")
            x = x + one_token_linear(hidden, ffn.fc_out.weight, ffn.fc_out.bias)
        return one_token_linear(norm(x, model.final_norm), model.token_embedding.weight, None).argmax(-1)

    return step, cache


def decode_with(step: Callable, cache: tuple[torch.Tensor, torch.Tensor], prompt: list[int], new_tokens: int
                ) -> torch.Tensor:
    """Greedy decoding with ``step``: the prompt fed one token at a time, then ``new_tokens`` chosen."""
    chosen = []
    with torch.inference_mode():
        for position, token in enumerate(prompt[:-1]):
            step(torch.tensor([[token]]), torch.tensor([position]), *cache)
        token = torch.tensor([[prompt[-1]]])
        for position in range(len(prompt) - 1, len(prompt) - 1 + new_tokens):
            token = step(token, torch.tensor([position]), *cache).view(1, 1)
            chosen.append(token)
    return torch.cat(chosen, dim=1)


def bench_overhead(args: argparse.Namespace, report: Report) -> None:
    torch.manual_seed(args.seed)
    model = from_preset(args.model, dropout=0.0, attention_dropout=0.0, embedding_dropout=0.0).eval()
    prompt = torch.randint(0, model.config.vocab_size - 1, (1, 16))
    length = prompt.shape[1] + args.new_tokens
    eager, cache = functional_step(model, length)
    compiled = torch.compile(eager, fullgraph=True, dynamic=False)
    with torch.inference_mode():
        expected = generate(model, prompt, args.new_tokens)[:, prompt.shape[1]:]
    for label, step in (("eager", eager), ("compiled", compiled)):  # the first compiled call compiles
        assert torch.equal(decode_with(step, cache, prompt[0].tolist(), args.new_tokens), expected), label
    steps = {
        "generate": lambda: generate(model, prompt, args.new_tokens),
        "function": lambda: decode_with(eager, cache, prompt[0].tolist(), args.new_tokens),
        "compiled": lambda: decode_with(compiled, cache, prompt[0].tolist(), args.new_tokens),
    }
    seconds = interleaved_medians(steps, args.repeats, 1, CPU)
    per_token = {label: s / args.new_tokens * 1e3 for label, s in seconds.items()}
    measure = f"ms a token, greedy 1x16+{args.new_tokens}"
    report.add(args.model, f"{measure}: generate vs the step as one function", per_token["generate"],
               per_token["function"])
    report.add(args.model, f"{measure}: generate vs that function compiled", per_token["generate"],
               per_token["compiled"])
    report.notes.append(f"[{args.model}] a ratio under 1 is generate taking less time; all three decode the same "
                        "tokens")


def token_matrices(seed: int) -> tuple[list[torch.Tensor], dict[int, torch.Tensor]]:
    """The fp32 matrices one GPT-2 124M token reads (49 in its blocks, then the tied vocabulary), in order, and a
    (1, width) input for each width."""
    config = GPTConfig()  # 124M
    d, f, vocab = config.dim, config.ffn_dim, config.vocab_size
    shapes = [(3 * d, d), (d, d), (f, d), (d, f)] * config.layers + [(vocab, d)]
    generator = torch.Generator().manual_seed(seed)
    fp32 = [torch.randn(shape, generator=generator) * 0.02 for shape in shapes]
    return fp32, {d: torch.randn(1, d, generator=generator), f: torch.randn(1, f, generator=generator)}


def bench_int8(args: argparse.Namespace, report: Report) -> None:
    fp32, inputs = token_matrices(args.seed)
    int8 = [Int8Weight.of(weight) for weight in fp32]  # plm.quantize's weights: what an int8 model multiplies by

    def kernel() -> None:
        for weight in int8:
            weight.linear(inputs[weight.shape[1]])

    def cast_blocks(rows: int) -> Callable[[], None]:
        def products() -> None:
            for weight, scale in ((w.values, w.scales.float()) for w in int8):
                x = inputs[weight.shape[1]]
                out = x.new_empty(1, weight.shape[0])
                block = x.new_empty(min(rows, weight.shape[0]), weight.shape[1])  # stays in the cache
                for start in range(0, weight.shape[0], rows):
                    part = block[: min(rows, weight.shape[0] - start)]
                    part.copy_(weight[start : start + rows])
                    torch.mm(x, part.t(), out=out[:, start : start + len(part)])
                out.mul_(scale)

        return products

    def plm_fp32() -> None:
        for weight in fp32:
            routes.linear(inputs[weight.shape[1]], weight)

    steps = {"kernel": kernel, "plm fp32": plm_fp32, **{f"cast {rows}": cast_blocks(rows) for rows in (256, 512)}}
    with torch.inference_mode():
        seconds = interleaved_medians(steps, args.repeats, 1, CPU)
    cast = min((s, label) for label, s in seconds.items() if label.startswith("cast"))
    measure = "ms of a token's 49 + 1 products"
    report.add("gpt2 int8", f"{measure}: int8 kernel vs fp32 products", seconds["kernel"] * 1e3,
               seconds["plm fp32"] * 1e3, f"{sum(w.values.numel() for w in int8) / 1e6:.0f} MB int8, 4x that fp32")
    report.add("gpt2 int8", f"{measure}: int8 kernel vs int8 blocks cast to fp32 ({cast[1].split()[1]} rows)",
               seconds["kernel"] * 1e3, cast[0] * 1e3)
    report.notes.append("[gpt2 int8] a ratio under 1 is the int8 kernel taking less time")


def bench_kernels(args: argparse.Namespace, report: Report) -> None:
    fp32, inputs = token_matrices(args.seed)
    token_bytes = {"fp32": 4 * sum(w.numel() for w in fp32)}
    token_bytes.update(bf16=token_bytes["fp32"] // 2, int8=token_bytes["fp32"] // 4)
    copies = {"fp32": [w.clone() for _ in range(args.copies) for w in fp32],
              "bf16": [w.bfloat16() for _ in range(args.copies) for w in fp32],
              "int8": [Int8Weight(q.values.clone(), q.scales) for q in map(Int8Weight.of, fp32) for _ in
                       range(args.copies)]}
    if not args.plain_pages:  # as plm's inference holds weights (plm.cpu.huge_pages): the tensors' data moves
        holder = torch.nn.Module()
        matrices = [*copies["fp32"], *copies["bf16"], *(q.values for q in copies["int8"])]
        for index, matrix in enumerate(matrices):
            holder.register_buffer(f"w{index}", matrix)
        into_huge_pages(holder)
    bf16_inputs = {width: x.bfloat16() for width, x in inputs.items()}

    def products(weights: list, product: Callable) -> Callable[[], None]:
        def run() -> None:
            for weight in weights:
                product(weight)
        return run

    kernels = {
        "fp32": {"F.linear": lambda w: F.linear(inputs[w.shape[1]], w),
                 "torch.mv": lambda w: torch.mv(w, inputs[w.shape[1]][0]),
                 "row blocks (bmm)": lambda w: routes.blocked_linear(inputs[w.shape[1]], w, None)},
        "bf16": {"F.linear": lambda w: F.linear(bf16_inputs[w.shape[1]], w),
                 "torch.mv": lambda w: torch.mv(w, bf16_inputs[w.shape[1]][0])},
        "int8": {"_weight_int8pack_mm": lambda w: w.product("int8", inputs[w.shape[1]], None)},
    }
    if native.available():
        kernels["bf16"]["plm"] = lambda w: native.bf16_linear(bf16_inputs[w.shape[1]], w)
        kernels["int8"]["plm"] = lambda w: native.int8_linear(inputs[w.shape[1]], w.values, w.scales)
    # fp32 products do one multiply-add per 4 bytes: the fastest fp32 kernel reads at the bandwidth that a stream of
    # weights gets (a sum over one tensor, the report's own measure, read 18-25 GB/s on one machine in one day)
    bandwidth, streamed = report.limits["bandwidth"], 0.0
    with torch.inference_mode():
        for precision, routes_of in kernels.items():
            steps = {name: products(copies[precision], product) for name, product in routes_of.items()}
            seconds = interleaved_medians(steps, args.repeats, 1, CPU)
            rates = {name: token_bytes[precision] * args.copies / s for name, s in seconds.items()}
            streamed = streamed or max(rates.values())
            best_pytorch = max((rate, name) for name, rate in rates.items() if name != "plm")
            for name, rate in rates.items():
                peer = best_pytorch[0] if name == "plm" else None
                report.add(f"gpt2 {precision}", f"GB/s of weights, {name}", rate / 1e9, None if peer is None
                           else peer / 1e9, f"{rate / streamed:.0%} of fp32's fastest, {rate / bandwidth:.0%} of the "
                           "measured bandwidth" + (f"; peer: {best_pytorch[1]}" if peer else ""), precision)
    pages = "4 KiB pages" if args.plain_pages or not huge_pages_available() else "huge pages"
    report.notes.append(f"[kernels] one row by GPT-2 124M's 49 + 1 matrices, {args.copies} copies cycled, in {pages}; "
                        f"plm's kernels: {native.instructions() or 'not built'}")


def bench_step(args: argparse.Namespace, report: Report) -> None:
    in_c = GPT.native_step
    generator = torch.Generator().manual_seed(args.seed)
    for precision, quantization in (("fp32", None), ("bf16", None), ("fp32", "int8")):
        torch.manual_seed(args.seed)
        model = inference_weights(from_preset("gpt2").eval(), precision, quantization)
        for rows in args.rows:
            prompt = torch.randint(0, GPTConfig().vocab_size, (rows, 16), generator=generator)

            def decode(native: bool, model: GPT = model, prompt: torch.Tensor = prompt) -> torch.Tensor:
                GPT.native_step = in_c if native else (lambda self, cache, mask: None)  # type: ignore[method-assign]
                try:
                    return generate(model, prompt, args.new_tokens)
                finally:
                    GPT.native_step = in_c  # type: ignore[method-assign]

            # bf16 rounds the residual stream in the model's forward and not in C: near-ties may go either way
            same = torch.equal(decode(True), decode(False))
            seconds = interleaved_medians({"c": lambda: decode(True), "torch": lambda: decode(False)}, args.repeats,
                                          1, CPU)
            label = quantization or precision
            report.add(f"gpt2 {label}", f"ms a step, greedy {rows}x16+{args.new_tokens}: step in C vs model's forward",
                       seconds["c"] / args.new_tokens * 1e3, seconds["torch"] / args.new_tokens * 1e3,
                       f"{seconds['torch'] / seconds['c']:.2f}x as fast; " + ("the same tokens" if same else
                                                                               "other tokens"), label)
    report.notes.append("[step] each time includes the prompt's pass, which the model's forward runs in both; a ratio "
                        "under 1 is the step in C taking less time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["overhead", "int8", "both", "kernels", "step"], default="both")
    parser.add_argument("--copies", type=int, default=4, help="copies of the kernels part's matrices, cycled")
    parser.add_argument("--plain-pages", action="store_true",
                        help="the kernels part's matrices where PyTorch allocates them, not in huge pages")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--model", default="gpt2-mini", help="the GPT preset of the overhead part")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", type=lambda text: [int(rows) for rows in text.split(",")], default=[1, 8],
                        help="the step part's batch sizes, comma-separated")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.part == "kernels":  # a section of its own in results.json, beside the other parts'
        report = Report("decode-kernels", "PyTorch's fastest kernel for the same products", settings=vars(args))
        bench_kernels(args, report)
        report.finish()
        return
    if args.part == "step":
        report = Report("decode-step", "the model's own forward at every step", settings=vars(args))
        bench_step(args, report)
        report.finish()
        return
    report = Report("decode-limits", "the same work another way (see the docstring)", settings=vars(args))
    if args.part in ("overhead", "both"):
        bench_overhead(args, report)
    if args.part in ("int8", "both"):
        bench_int8(args, report)
    report.finish()


if __name__ == "__main__":
    main()
