#!/usr/bin/env bash
# ALBERT's Table 5 at CPU scale: one encoder pre-trained with MLM + NSP, one with MLM + SOP,
# then each pair head scored on held-out pairs of both tasks (plm eval pairs).
#
#   examples/pretraining/albert-table5.sh ../shared/data/wikitext-2      # 6,000 steps each, as docs/pretraining.md
#   STEPS=1000 examples/pretraining/albert-table5.sh ../shared/data/wikitext-2
#
# DATA holds the training text (valid.txt: WikiText-2's 2 MB, which a run of this size reads
# some 40 times; TRAIN= another file) and the held-out text (test.txt; HELD_OUT= another).
# The two runs train at the same time, one thread each (about 70 minutes each at 6,000 steps
# on a 2-core machine). It prints one row per trained head: its accuracy on NSP pairs and on
# SOP pairs built from the held-out text. The paper's: NSP 90.5% / 52.0%, SOP 78.9% / 86.5%.
set -euo pipefail
data=${1:?a folder with valid.txt (training text) and test.txt (held-out text)}
steps=${STEPS:-6000}; model=${MODEL:-albert-mini}; out=${OUT:-runs/albert-table5}
train=${TRAIN:-$data/valid.txt}; held_out=${HELD_OUT:-$data/test.txt}
mkdir -p "$out"
export OMP_NUM_THREADS=1
pids=()
for task in nsp sop; do
  plm pretrain --model "$model" --objective "mlm+$task" --train "$train" --validation "$held_out" \
    --steps "$steps" --eval-every 500 --precision fp32 --no-progress --out "$out/$task" --overwrite \
    > "$out/$task.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done  # a failed run stops the script (set -e); its log says why
echo "| trained with | on NSP pairs | on SOP pairs |"
echo "| --- | ---: | ---: |"
for trained in nsp sop; do
  row="| MLM + ${trained^^} |"
  for task in nsp sop; do
    plm eval pairs --model "$out/$trained" "$held_out" --pairs "$task" --json "$out/$trained-on-$task.json" > /dev/null
    row="$row $(python -c "import json, sys; print(f\"{json.load(open(sys.argv[1]))['accuracy_$task']:.1%}\")" \
      "$out/$trained-on-$task.json") |"
  done
  echo "$row"
done
