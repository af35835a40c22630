#!/usr/bin/env bash
# Multi30k German -> English at CPU scale: train, average the last 5 saves, score test_2016_flickr.
#
#   examples/quality/multi30k.sh transformer [DATA]    # transformer-small, 6,000 steps (about 55 CPU-minutes)
#   examples/quality/multi30k.sh rnn [DATA]            # rnn-bahdanau-base, 5,000 steps (about 110 CPU-minutes)
#
# One thread, so that CPU-minutes are wall-clock minutes on an idle core; bash's time prints
# each stage's CPU seconds (user + system) and wall-clock seconds. benchmarks/gpu.sh runs it on a GPU. DATA holds train/val/test_2016_flickr .de and .en
# (default ../shared/data/multi30k). Results go to ${OUT:-runs/multi30k}/MODEL.
set -euo pipefail
kind=${1:?transformer or rnn}; data=${2:-../shared/data/multi30k}
out=${OUT:-runs/multi30k}/$kind
export OMP_NUM_THREADS=1
case $kind in
  # The preset and recipe as they are: inverse-sqrt schedule, dropout 0.1, label smoothing 0.1; beam 4, alpha 0.6.
  transformer) train=(--model transformer-small --steps 6000 --eval-every 1000); search=() ;;
  # 2 layers of 512, embeddings of 256; dropout 0.3, a cosine decay to 1e-4 over the steps and label smoothing
  # 0.1 (the RNN recipe's default is the papers' none; this row was measured with 0.1); beam 4.
  rnn) train=(--model rnn-bahdanau-base --steps 5000 --eval-every 500 --dropout 0.3 --schedule cosine --min-lr 1e-4
              --label-smoothing 0.1)
       search=(--beam 4) ;;
  *) echo "unknown model kind $kind: transformer or rnn" >&2; exit 2 ;;
esac
TIMEFORMAT="train: %U + %S CPU seconds, %R s wall"
time plm seq2seq train "${train[@]}" \
  --src "$data/train.de" --tgt "$data/train.en" --validation-src "$data/val.de" --validation-tgt "$data/val.en" \
  --save-every 250 --keep-last 5 --no-progress --out "$out" --overwrite
TIMEFORMAT="average: %U + %S CPU seconds, %R s wall"
time plm seq2seq average --model "$out" --last 5 --out "$out-avg5" --overwrite
TIMEFORMAT="score: %U + %S CPU seconds, %R s wall"
time plm eval bleu --model "$out-avg5" "${search[@]}" \
  --src "$data/test_2016_flickr.de" --ref "$data/test_2016_flickr.en" --json "$out-avg5/test-scores.json" --no-progress
