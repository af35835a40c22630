#!/usr/bin/env bash
# The GPU run: one script that needs a CUDA GPU and a Python with plm's dependencies and transformers
# (no network, no install: plm runs from src/). It fits in about 10 minutes of an H100 or H200.
#
#   benchmarks/gpu.sh [MULTI30K_DIR]          # or: make gpu
#
# It runs, each into LOGS/NAME.log (default runs/gpu), going on past a part that fails (runs go to runs/gpu):
#   tests     tests/training/test_gpu.py (bf16, fused AdamW, FSDP offload, torch.compile, CUDA-graph decoding, resuming)
#   gpt2      GPT-2 124M against Hugging Face: bf16 training at 16x1024 (eager and compiled, with the top
#             kernels of one step), the forward pass, greedy decoding at batch 1 (eager, CUDA graph, bf16)
#   finetune  BERT-base classifier fine-tuning steps against Hugging Face's, bf16, batch 32x128
#   multi30k  examples/quality/multi30k.sh transformer: the recipe of docs/published-quality.md, timed from
#             tokenizer to BLEU
# PARTS="gpt2 multi30k" runs only those. Figures go to PLM_RESULTS (default benchmarks/results_cuda.json) with the GPU's name.
set -uo pipefail
data=${1:-../shared/data/multi30k}
runs=runs/gpu
logs=${LOGS:-$runs}
mkdir -p "$runs" "$logs"
export PLM_RESULTS=${PLM_RESULTS:-benchmarks/results_cuda.json} PYTHONUNBUFFERED=1
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
python=${PYTHON:-python3}
failed=()

plm() { "$python" -c 'import sys; from plm.cli.main import main; sys.exit(main())' "$@"; }
export -f plm  # for the example scripts this runs
export python

part() {  # part NAME COMMAND...: run it into its log; on failure show the log's end and go on
  local name=$1 start=$SECONDS
  shift
  [[ " ${PARTS:-tests gpt2 finetune multi30k} " == *" $name "* ]] || return 0
  echo "== $name"
  if "$@" >"$logs/$name.log" 2>&1; then
    echo "   done in $((SECONDS - start)) s"
  else
    echo "   FAILED after $((SECONDS - start)) s; the end of $logs/$name.log:"
    tail -25 "$logs/$name.log"
    failed+=("$name")
  fi
}

multi30k() {
  local start=$SECONDS
  OUT=$runs examples/quality/multi30k.sh transformer "$data" || return
  "$python" benchmarks/record_run.py multi30k "$runs/transformer-avg5/test-scores.json" \
    --seconds "$((SECONDS - start))" --command "examples/quality/multi30k.sh transformer (from benchmarks/gpu.sh)"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
part tests "$python" -m pytest -p no:warnings tests/training/test_gpu.py
part gpt2 "$python" benchmarks/bench_gpt2.py --config gpt2 --device cuda --bf16 --compile --profile \
  --train-batch 16 --train-length 1024 --train-steps 10 --new-tokens 64
part finetune "$python" benchmarks/bench_finetune.py --config bert-base --device cuda --bf16 --batch 32
part multi30k multi30k
for name in gpt2 finetune multi30k; do
  grep -E "^(config|gpt2|bert-base|transformer-small) " "$logs/$name.log" 2>/dev/null
done
grep -E "passed|failed" "$logs/tests.log" | tail -1
if ((${#failed[@]})); then
  echo "failed: ${failed[*]}"
  exit 1
fi
