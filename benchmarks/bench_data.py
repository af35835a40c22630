"""Data at scale: `plm data prepare` and `plm pretrain` on a generated corpus, small and 10x larger.

The corpus is documents of wikitext-2's paragraphs (valid and test), drawn at random and
joined (seeded: the same bytes every time), streamed to a file in the work directory and
reused while its size is the same; a WordPiece and a byte-level BPE tokenizer of 8,192
tokens are trained on the wikitext text alone. Every measured command runs as its own
process; its peak resident memory is the largest sum of the RSS of its whole process tree
(the prepare's workers are its children), sampled every 0.1 s with psutil.

* ``plm data prepare``: peak RSS and MB/s of input text (the command's wall time), beside
  ``tokenizers.Tokenizer.encode_batch`` over the same documents in 1 MB batches on every
  core (the encoding time alone: the library's own limit on this machine), for each
  tokenizer;
* ``plm pretrain --data DIR``, stopped by SIGTERM after its first step (gpt2-mini on the BPE corpus, bert-mini on the
  WordPiece one): peak RSS and the seconds from start to the first step's line in
  metrics.jsonl; ``plm pretrain --train FILE`` the same, preparing into an empty cache;
* nanoGPT's way (data/openwebtext/prepare.py): ``load_dataset("text")``, ``.map`` of the
  BPE tokenizer with ``num_proc`` = cores, one uint16 ``np.memmap`` written 1,024 shards at
  a time; its MB/s and peak RSS beside plm's (needs ``datasets``, else the row is skipped).

    python benchmarks/bench_data.py                               # 2,048 MB and 205 MB: about 95 minutes on 2 cores
    python benchmarks/bench_data.py --size-mb 100 --small-mb 10   # about 15 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench_common import RESULTS, Report, cpu_name, installed_version

MB = 1 << 20
WIKITEXT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "wikitext-2"
PLM = [sys.executable, "-m", "plm.cli.main"]
CORPUS_VERSION = 1  # change it when the generator changes: a corpus on disk of another version is written again
RSS_TARGET_MB, GROWTH_TARGET_MB, SPEED_TARGET, FIRST_STEP_TARGET_S = 1536, 200, 0.85, 10.0

# The peer's limit: tokenizers' own batched encoding of the same documents (blank-line separated,
# their lines joined by newlines, as plm reads them), 1 MB of text a batch, on every core.
ENCODE_BATCH = """
import json, sys, time
import tokenizers

tokenizer, corpus = sys.argv[1:]
backend = tokenizers.Tokenizer.from_file(tokenizer)

def batches():
    texts, size, lines = [], 0, []
    with open(corpus, encoding="utf-8") as file:
        for line in file:
            line = line.rstrip("\\n")
            if line.strip():
                lines.append(line)
                continue
            if lines:
                texts.append("\\n".join(lines))
                size += len(texts[-1])
                lines = []
                if size >= 1 << 20:
                    yield texts
                    texts, size = [], 0
    if lines:
        texts.append("\\n".join(lines))
    if texts:
        yield texts

encoding = cpu = tokens = documents = 0
started = time.perf_counter()
for texts in batches():
    start, start_cpu = time.perf_counter(), time.process_time()
    encodings = backend.encode_batch(texts, add_special_tokens=False)
    encoding, cpu = encoding + time.perf_counter() - start, cpu + time.process_time() - start_cpu
    tokens += sum(len(e.ids) for e in encodings)
    documents += len(texts)
print(json.dumps({"encode_seconds": encoding, "encode_cpu_seconds": cpu, "seconds": time.perf_counter() - started,
                  "tokens": tokens, "documents": documents}))
"""

# nanoGPT's data/openwebtext/prepare.py, with the BPE tokenizer's encode_batch for tiktoken's encode_ordinary
# (one thread in each of the map's processes, as tiktoken's is) and without its train/val split.
NANOGPT = """
import json, os, sys, time
import numpy as np
import tokenizers
from datasets import load_dataset

tokenizer, corpus, out, cache, processes = sys.argv[1:]
started = time.perf_counter()
dataset = load_dataset("text", data_files={"train": corpus}, sample_by="paragraph", cache_dir=cache)["train"]
loaded = time.perf_counter()
backend = tokenizers.Tokenizer.from_file(tokenizer)
eot = backend.token_to_id("<|endoftext|>")

def process(batch):
    ids = [encoding.ids + [eot] for encoding in backend.encode_batch(batch["text"], add_special_tokens=False)]
    return {"ids": ids, "len": [len(row) for row in ids]}

tokenized = dataset.map(process, batched=True, remove_columns=["text"], num_proc=int(processes))
mapped = time.perf_counter()
length = int(np.sum(tokenized["len"], dtype=np.uint64))
tokens = np.memmap(out, dtype=np.uint16, mode="w+", shape=(length,))
index, shards = 0, min(1024, len(tokenized))  # nanoGPT's 1,024, fewer for a corpus of fewer documents
for shard in range(shards):
    batch = tokenized.shard(num_shards=shards, index=shard, contiguous=True).with_format("numpy")
    ids = np.concatenate(batch["ids"])
    tokens[index : index + len(ids)] = ids
    index += len(ids)
tokens.flush()
print(json.dumps({"load_seconds": loaded - started, "map_seconds": mapped - loaded,
                  "write_seconds": time.perf_counter() - mapped, "tokens": length, "documents": len(dataset)}))
"""


@dataclass
class Measured:
    """One command's wall time, the peaks of its process tree's memory, its CPU seconds and the machine's load."""

    seconds: float
    peak_rss: int  # the largest sum of the tree's resident set sizes (RSS), sampled every 0.1 s
    peak_pss: int  # the same of their proportional set sizes (shared pages divided among their users), every 1 s
    cpu_main: float  # CPU seconds of the command's own process
    cpu_all: float  # with its children's
    load: float  # the machine's load average over the last minute, at the end (other work shares the cores)
    first_line: float | None  # seconds from start to the first line of the watched file, if one was given
    stdout: str
    first_step: float | None = None  # for a training run: the seconds its first step took (metrics.jsonl)

    @property
    def peak_mb(self) -> float:
        return self.peak_rss / MB


def tree_memory(tree: psutil.Process, proportional: bool) -> tuple[int, int]:
    """The summed RSS of a process and its descendants, and their summed PSS when ``proportional`` (else 0)."""
    rss = pss = 0
    for process in [tree, *tree.children(recursive=True)]:
        try:
            if proportional:
                info = process.memory_full_info()
                rss, pss = rss + info.rss, pss + info.pss
            else:
                rss += process.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return rss, pss


def measure(command: list[str], log: Path, env: dict[str, str] | None = None, watch: Path | None = None) -> Measured:
    """Run ``command``, sampling its process tree's memory; raise with its log if it fails.

    The RSS is read every 0.1 s (cheap: /proc/PID/statm), the PSS every second (smaps_rollup costs
    a few ms a process, which would take CPU from the command measured). With ``watch``, a training
    run's metrics file, the run is sent SIGTERM once its first step is logged: it stops after its next
    step, saving its checkpoint (exit code 143), so that what is measured is the start, the first steps and
    a save, not an evaluation of the whole held-out split.
    """
    environment = {**os.environ, **(env or {})}
    output = log.with_suffix(".out")
    with open(log, "w") as errors, open(output, "w") as out:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=errors, env=environment)
        tree = psutil.Process(process.pid)
        peak_rss = peak_pss = samples = 0
        cpu_main, first_line = 0.0, None
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            try:
                cpu_main = sum(tree.cpu_times()[:2])
                rss, pss = tree_memory(tree, proportional=samples % 10 == 0)
                peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            except psutil.NoSuchProcess:
                pass
            if watch is not None and first_line is None and watch.is_file() and watch.stat().st_size:
                first_line = time.perf_counter() - started
                process.send_signal(signal.SIGTERM)
            samples += 1
            time.sleep(0.1)
        seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    stopped = watch is not None and first_line is not None and process.returncode == 128 + signal.SIGTERM
    if process.returncode and not stopped:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{log.read_text()[-3000:]}")
    return Measured(seconds, peak_rss, peak_pss, cpu_main, usage.ru_utime + usage.ru_stime, os.getloadavg()[0],
                    first_line, output.read_text())


# --- the corpus and the tokenizers --------------------------------------------------------------------


def wikitext_paragraphs() -> list[str]:
    paragraphs = []
    for name in ("valid.txt", "test.txt"):
        lines = (WIKITEXT / name).read_text(encoding="utf-8").splitlines()
        paragraphs += [line.strip() for line in lines if line.strip()]
    return paragraphs


def generate_corpus(path: Path, megabytes: float, seed: int) -> Path:
    """Documents of 1 to 8 random wikitext paragraphs, a blank line after each, until ``megabytes``; kept if done."""
    if path.is_file():
        return path
    paragraphs = wikitext_paragraphs()
    rng = random.Random(seed)
    target, written = int(megabytes * MB), 0
    partial = path.with_suffix(".partial")
    print(f"writing {path.name} ({megabytes:,.0f} MB)", flush=True)
    with open(partial, "wb", buffering=8 * MB) as file:
        while written < target:
            chunk = "".join("\n".join(rng.choices(paragraphs, k=rng.randint(1, 8))) + "\n\n" for _ in range(64))
            data = chunk.encode("utf-8")
            file.write(data)
            written += len(data)
    os.replace(partial, path)
    return path


def corpus_path(work: Path, megabytes: float, seed: int) -> Path:
    return generate_corpus(work / f"corpus-v{CORPUS_VERSION}-seed{seed}-{megabytes:g}mb.txt", megabytes, seed)


def train_tokenizer(work: Path, kind: str) -> Path:
    out = work / f"tokenizer-{kind}"
    if not (out / "tokenizer.json").is_file():
        wiki = work / "wikitext.txt"
        wiki.write_text("\n\n".join(wikitext_paragraphs()) + "\n", encoding="utf-8")
        subprocess.run([*PLM, "tokenizer", "train", str(wiki), "--kind", kind, "--vocab-size", "8192",
                        "--out", str(out), "--overwrite"], check=True, stdout=subprocess.DEVNULL)
    return out


# --- the measurements ---------------------------------------------------------------------------------


def prepare(work: Path, corpus: Path, tokenizer: Path, name: str) -> tuple[Measured, Path, dict]:
    out = work / "prepared" / name
    shutil.rmtree(out, ignore_errors=True)
    measured = measure([*PLM, "data", "prepare", str(corpus), "--tokenizer", str(tokenizer), "--out", str(out),
                        "--no-progress"], work / "logs" / f"prepare-{name}.log")
    return measured, out, json.loads((out / "manifest.json").read_text())


def encode_batch(work: Path, corpus: Path, tokenizer: Path, name: str) -> tuple[Measured, dict]:
    measured = measure([sys.executable, "-c", ENCODE_BATCH, str(tokenizer / "tokenizer.json"), str(corpus)],
                       work / "logs" / f"encode-batch-{name}.log")
    return measured, json.loads(measured.stdout)


def nanogpt(work: Path, corpus: Path, tokenizer: Path, name: str) -> tuple[Measured, dict]:
    scratch = work / "nanogpt"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    env = {"HF_HOME": str(scratch / "hf"), "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
    try:
        measured = measure([sys.executable, "-c", NANOGPT, str(tokenizer / "tokenizer.json"), str(corpus),
                            str(scratch / "train.bin"), str(scratch / "cache"), str(len(os.sched_getaffinity(0)))],
                           work / "logs" / f"nanogpt-{name}.log", env)
        return measured, json.loads(measured.stdout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def pretrain(work: Path, model: str, data: list[str], name: str, env: dict[str, str] | None = None) -> Measured:
    out = work / "runs" / name
    shutil.rmtree(out, ignore_errors=True)
    command = [*PLM, "pretrain", "--model", model, *data, "--steps", "1000", "--log-every", "1", "--eval-every", "1000",
               "--save-every", "1000", "--device", "cpu", "--no-progress", "--out", str(out), "--overwrite"]
    measured = measure(command, work / "logs" / f"pretrain-{name}.log", env, watch=out / "metrics.jsonl")
    with open(out / "metrics.jsonl") as metrics:
        measured.first_step = json.loads(metrics.readline())["elapsed"]
    shutil.rmtree(out, ignore_errors=True)
    return measured


def pretrain_from_text(work: Path, model: str, corpus: Path, tokenizer: Path, name: str) -> Measured:
    """``plm pretrain --train FILE`` with an empty cache (PLM_CACHE), so that it prepares the corpus first."""
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    try:
        return pretrain(work, model, ["--train", str(corpus), "--tokenizer", str(tokenizer)], name,
                        {"PLM_CACHE": str(cache)})
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def text_tokens(manifest: dict) -> int:
    """The tokens of both splits, without the separator after each document."""
    separators = manifest["separator_id"] is not None
    return sum(split["tokens"] - separators * split["documents"] for split in manifest["splits"].values())


# --- the run ------------------------------------------------------------------------------------------


@dataclass
class Line:
    """A line of the printed table: a figure on the small and on the large corpus, its ratio and its target."""

    measure: str
    small: float
    large: float
    ratio: str = ""
    target: str = ""
    met: bool | None = None


def cell(value: float) -> str:
    return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


def print_table(lines: list[Line], small: str, large: str) -> None:
    width = max(len(line.measure) for line in lines)
    print()
    print(f"{'measure':<{width}}  {small:>10}  {large:>10}  {'plm / peer':>11}  {'target':<32} met")
    for line in lines:
        met = "" if line.met is None else "yes" if line.met else "NO"
        print(f"{line.measure:<{width}}  {cell(line.small):>10}  {cell(line.large):>10}  {line.ratio:>11}  "
              f"{line.target:<32} {met}")


def machine_line() -> str:
    memory = psutil.virtual_memory()
    return (f"machine: {cpu_name()}, {len(os.sched_getaffinity(0))} cores, {memory.total / 2**30:.1f} GiB memory "
            f"({memory.available / 2**30:.1f} GiB available now), load average {os.getloadavg()[0]:.1f}")


@dataclass
class Figures:
    """What one tokenizer measured on one corpus."""

    megabytes: float
    prepare: Measured
    encode_batch: Measured
    encode_seconds: float  # encode_batch's own time, without reading the file
    encode_cpu: float  # the CPU seconds of its threads in encode_batch
    data: Measured  # plm pretrain --data
    train: Measured  # plm pretrain --train, preparing into an empty cache first
    nanogpt: Measured | None = None
    nanogpt_phases: dict[str, float] | None = None

    @property
    def speed(self) -> float:
        return self.megabytes / self.prepare.seconds

    @property
    def limit(self) -> float:
        return self.megabytes / self.encode_seconds


def bench_corpus(work: Path, kind: str, size: str, corpus: Path, tokenizer: Path, nanogpt_too: bool,
                 report: Report) -> Figures:
    model = MODELS[kind]
    megabytes = corpus.stat().st_size / MB
    name = f"{kind}-{size}"

    def say(what: str) -> None:
        print(f"[{name}, {megabytes:,.0f} MB] {what}", flush=True)

    prepared, directory, manifest = prepare(work, corpus, tokenizer, name)
    say(f"plm data prepare: {prepared.seconds:.0f} s, {megabytes / prepared.seconds:.2f} MB/s, peak RSS "
        f"{prepared.peak_mb:,.0f} MB (PSS {prepared.peak_pss / MB:,.0f}), CPU {prepared.cpu_main:.0f} s in the main "
        f"process of {prepared.cpu_all:.0f} s, load {prepared.load:.1f}")
    encoded, peer = encode_batch(work, corpus, tokenizer, name)
    if peer["tokens"] != text_tokens(manifest):
        report.notes.append(f"{name}: encode_batch gave {peer['tokens']:,} tokens, plm prepared "
                            f"{text_tokens(manifest):,} (without separators)")
    say(f"encode_batch: {megabytes / peer['encode_seconds']:.2f} MB/s ({peer['seconds']:.0f} s with reading), "
        f"load {encoded.load:.1f}")
    data = pretrain(work, model, ["--data", str(directory)], f"data-{name}")
    say(f"{model} --data: first step done at {data.first_line:.1f} s (it took {data.first_step:.1f} s), peak RSS "
        f"{data.peak_mb:,.0f} MB, load {data.load:.1f}")
    shutil.rmtree(directory, ignore_errors=True)
    train = pretrain_from_text(work, model, corpus, tokenizer, f"train-{name}")
    say(f"{model} --train: first step done at {train.first_line:.1f} s (it took {train.first_step:.1f} s), peak RSS "
        f"{train.peak_mb:,.0f} MB, load {train.load:.1f}")
    figures = Figures(megabytes, prepared, encoded, peer["encode_seconds"], peer["encode_cpu_seconds"], data, train)
    if nanogpt_too:
        figures.nanogpt, phases = nanogpt(work, corpus, tokenizer, name)
        figures.nanogpt_phases = {key: value for key, value in phases.items() if key.endswith("_seconds")}
        say(f"nanoGPT's prepare: {megabytes / figures.nanogpt.seconds:.2f} MB/s, peak RSS "
            f"{figures.nanogpt.peak_mb:,.0f} MB (PSS {figures.nanogpt.peak_pss / MB:,.0f}), {phases}, "
            f"load {figures.nanogpt.load:.1f}")
    loads = {"prepare": prepared, "encode_batch": encoded, "--data": data, "--train": train, "nanoGPT": figures.nanogpt}
    report.notes.append(f"{name} ({megabytes:,.0f} MB): the machine's load average at the end of " + ", ".join(
        f"{what} {run.load:.1f}" for what, run in loads.items() if run))
    return figures


MODELS = {"bpe": "gpt2-mini", "wordpiece": "bert-mini"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=2048, help="the large corpus, in MB of 2^20 bytes")
    parser.add_argument("--small-mb", type=float, default=None, help="the small corpus (default: a tenth)")
    parser.add_argument("--wordpiece-mb", type=float, default=None,
                        help="the larger corpus of the WordPiece (bert-mini) rows (default: --size-mb); a smaller one "
                             "saves time, and the table says which size those rows ran on")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "plm-bench-data",
                        help="where the corpora, tokenizers and prepared directories go (corpora are reused)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    small_mb = args.small_mb or args.size_mb / 10
    sizes = {("bpe", "small"): small_mb, ("bpe", "large"): args.size_mb,
             ("wordpiece", "small"): small_mb, ("wordpiece", "large"): args.wordpiece_mb or args.size_mb}
    for directory in ("logs", "prepared", "runs"):
        (args.work / directory).mkdir(parents=True, exist_ok=True)
    print(machine_line())
    cores = len(os.sched_getaffinity(0))
    datasets = installed_version("datasets")
    peer = f"tokenizers {installed_version('tokenizers')} encode_batch" + (
        f"; nanoGPT's prepare.py over datasets {datasets}" if datasets else "")
    report = Report("data", peer, settings={**{k: str(v) for k, v in vars(args).items() if k != "work"}, "cores": cores,
                                            "sizes_mb": {f"{kind} {size}": mb for (kind, size), mb in sizes.items()}})
    corpora = {key: corpus_path(args.work, megabytes, args.seed) for key, megabytes in sizes.items()}
    tokenizers_ = {kind: train_tokenizer(args.work, kind) for kind in MODELS}
    if not datasets:
        report.notes.append("nanoGPT's row skipped: datasets is not installed (pip install datasets)")
    results = {(kind, size): bench_corpus(args.work, kind, size, corpora[kind, size], tokenizers_[kind],
                                          bool(datasets) and kind == "bpe", report)
               for kind, size in sizes}
    rows = table_rows(results, report, cores)
    report.print()
    labels = {size: f"{results['bpe', size].megabytes:,.0f} MB" for size in ("small", "large")}
    print_table(rows, labels["small"], labels["large"])
    print(f"small: {labels['small']}, large: {labels['large']}; the WordPiece rows' corpora: "
          f"{results['wordpiece', 'small'].megabytes:,.0f} MB and {results['wordpiece', 'large'].megabytes:,.0f} MB")
    print(machine_line())
    report.save()
    print(f"results in {RESULTS.name} ({report.section}); python benchmarks/summary.py prints them all")


def ratios(pairs: list[tuple[float, float]]) -> str:
    return " / ".join(f"{a / b:.2f}" for a, b in pairs)


def table_rows(results: dict[tuple[str, str], Figures], report: Report, cores: int) -> list[Line]:
    """The printed rows (small, large, their targets); the figures also go to ``report`` (results.json)."""
    rows: list[Line] = []
    for kind in MODELS:
        small, large = results[kind, "small"], results[kind, "large"]
        growth = large.prepare.peak_mb - small.prepare.peak_mb
        rows.append(Line(f"prepare {kind}: peak RSS MB", small.prepare.peak_mb, large.prepare.peak_mb, "",
                        f"<= {RSS_TARGET_MB}, +<= {GROWTH_TARGET_MB} (+{growth:,.0f})",
                        large.prepare.peak_mb <= RSS_TARGET_MB and growth <= GROWTH_TARGET_MB))
        rows.append(Line(f"  prepare {kind}: peak PSS MB", small.prepare.peak_pss / MB, large.prepare.peak_pss / MB))
        rows.append(Line(f"prepare {kind}: MB/s", small.speed, large.speed,
                        ratios([(small.speed, small.limit), (large.speed, large.limit)]),
                        f">= {SPEED_TARGET:.0%} of encode_batch", min(small.speed / small.limit,
                                                                      large.speed / large.limit) >= SPEED_TARGET))
        rows.append(Line(f"  encode_batch {kind} ({cores} cores): MB/s", small.limit, large.limit))
        rows.append(Line(f"  prepare {kind}: CPU s per MB, all processes", small.prepare.cpu_all / small.megabytes,
                         large.prepare.cpu_all / large.megabytes,
                         ratios([(small.encode_cpu, small.prepare.cpu_all), (large.encode_cpu, large.prepare.cpu_all)]),
                         "(encode_batch's CPU s / plm's)"))
        rows.append(Line(f"  encode_batch {kind}: CPU s per MB", small.encode_cpu / small.megabytes,
                         large.encode_cpu / large.megabytes))
        rows.append(Line(f"  prepare {kind}: main process CPU, cores", small.prepare.cpu_main / small.prepare.seconds,
                        large.prepare.cpu_main / large.prepare.seconds))
        rows.append(Line(f"  prepare {kind}: all processes' CPU, cores", small.prepare.cpu_all / small.prepare.seconds,
                        large.prepare.cpu_all / large.prepare.seconds))
        for figures in (small, large):
            config = f"{kind} {figures.megabytes:,.0f} MB"
            report.add(config, "prepare MB/s", figures.speed, figures.limit,
                       f"target >= {SPEED_TARGET:.0%} of encode_batch on {cores} cores")
            report.add(config, "prepare peak RSS MB", figures.prepare.peak_mb,
                       figures.nanogpt.peak_mb if figures.nanogpt else None,
                       f"target <= {RSS_TARGET_MB} MB" + ("; peer: nanoGPT's" if figures.nanogpt else ""))
    for kind, model in MODELS.items():
        small, large = results[kind, "small"], results[kind, "large"]
        for way, flag in (("data", "--data DIR"), ("train", "--train FILE")):
            runs = (getattr(small, way), getattr(large, way))
            growth = runs[1].peak_mb - runs[0].peak_mb
            rows.append(Line(f"pretrain {model} {flag}: peak RSS MB", *(run.peak_mb for run in runs), "",
                            f"+<= {GROWTH_TARGET_MB} (+{growth:,.0f})", growth <= GROWTH_TARGET_MB))
            starts = [run.first_line - run.first_step for run in runs]
            rows.append(Line(f"pretrain {model} {flag}: s to the first step", *starts, "",
                            f"< {FIRST_STEP_TARGET_S:.0f} s" if way == "data" else "(prepares first)",
                            max(starts) < FIRST_STEP_TARGET_S if way == "data" else None))
            ends = [run.first_line for run in runs]
            rows.append(Line(f"  pretrain {model} {flag}: s to the first step's end", *ends, "",
                            f"< {FIRST_STEP_TARGET_S:.0f} s" if way == "data" else "",
                            max(ends) < FIRST_STEP_TARGET_S if way == "data" else None))
            for figures, run in zip((small, large), runs):
                config = f"{kind} {figures.megabytes:,.0f} MB"
                report.add(config, f"pretrain {model} {flag} peak RSS MB", run.peak_mb,
                           limit=f"target: within {GROWTH_TARGET_MB} MB of the small corpus'")
                report.add(config, f"pretrain {model} {flag} s to the first step", run.first_line - run.first_step,
                           limit=(f"target < {FIRST_STEP_TARGET_S:.0f} s; " if way == "data" else "the prepare too; ")
                           + f"the step itself {run.first_step:.1f} s")
    small, large = results["bpe", "small"], results["bpe", "large"]
    if small.nanogpt and large.nanogpt:
        speeds = [figures.megabytes / figures.nanogpt.seconds for figures in (small, large)]
        rows.append(Line("nanoGPT's way (datasets .map) bpe: MB/s", *speeds,
                        ratios([(small.speed, speeds[0]), (large.speed, speeds[1])]), "(side by side)"))
        rows.append(Line("nanoGPT's way bpe: peak RSS MB", small.nanogpt.peak_mb, large.nanogpt.peak_mb,
                        ratios([(small.prepare.peak_rss, small.nanogpt.peak_rss),
                                (large.prepare.peak_rss, large.nanogpt.peak_rss)]), "(side by side)"))
        rows.append(Line("  nanoGPT's way bpe: peak PSS MB", small.nanogpt.peak_pss / MB, large.nanogpt.peak_pss / MB))
        for figures, speed in zip((small, large), speeds):
            phases = ", ".join(f"{key.removesuffix('_seconds')} {value:.0f} s"
                               for key, value in (figures.nanogpt_phases or {}).items())
            report.add(f"bpe {figures.megabytes:,.0f} MB", "prepare MB/s vs nanoGPT's way", figures.speed, speed,
                       f"peer: load_dataset + .map(num_proc={cores}) + np.memmap: {phases}")
    return rows


if __name__ == "__main__":
    main()
