#!/usr/bin/env bash
# The four encoder-decoders at equal CPU time: no attention, Bahdanau, Luong, the Transformer.
#
#   examples/seq2seq/equal-time.sh dates 12                           # the built-in dates task
#   examples/seq2seq/equal-time.sh multi30k 20 ../shared/data/multi30k
#   MODELS="rnn-luong rnn-luong-local-m rnn-luong-local-p" examples/seq2seq/equal-time.sh dates 8   # others
#   MODELS="rnn rnn+reverse" examples/seq2seq/equal-time.sh multi30k 20   # +reverse: --reverse-source
#
# The four runs train at the same time, one thread each, for the same wall-clock minutes,
# so each gets the same share of the CPU whatever else the machine is doing (the "user CPU"
# line of each run's log says how much it got). Each trains with its family's recipe: the
# RNNs' constant learning rate and the Transformer's inverse-sqrt schedule do not depend on
# --steps, so a time budget cuts no decay short. Then each model translates the test set
# greedily and with beam 4 (plm eval bleu; its first line holds the scores).
set -euo pipefail
task=${1:?task: dates or multi30k}; minutes=${2:?minutes}; data=${3:-../shared/data/multi30k}
out=${OUT:-runs/equal-time}
mkdir -p "$out"
export OMP_NUM_THREADS=1
if [ "$task" = dates ]; then
  files=()
  python -c "
from plm.data.dates import date_pairs
pairs = date_pairs(1000, seed=2026, held_out=True)   # held-out calendar days, never trained on
open('$out/dates-test.src', 'w').write(''.join(p.source + '\n' for p in pairs))
open('$out/dates-test.tgt', 'w').write(''.join(p.target + '\n' for p in pairs))"
  src=$out/dates-test.src; ref=$out/dates-test.tgt
else
  files=(--src "$data/train.de" --tgt "$data/train.en" --validation-src "$data/val.de" --validation-tgt "$data/val.en")
  src=$data/test_2016_flickr.de; ref=$data/test_2016_flickr.en
fi
read -r -a models <<< "${MODELS:-rnn rnn-bahdanau rnn-luong transformer}"
for model in "${models[@]}"; do
  reverse=(); [ "${model%+reverse}" != "$model" ] && reverse=(--reverse-source)
  /usr/bin/time -f "$task $model: %e s wall, %U s user CPU" \
    plm seq2seq train --model "${model%+reverse}" "${reverse[@]}" "${files[@]}" --minutes "$minutes" \
    --steps 1000000 --eval-every 500 --save-every 500 --no-progress --out "$out/$task-$model" --overwrite \
    > "$out/$task-$model.log" 2>&1 &
done
wait
for model in "${models[@]}"; do
  grep "user CPU" "$out/$task-$model.log"
  for beam in 1 4; do
    echo "$task $model beam $beam: $(plm eval bleu --model "$out/$task-$model" --src "$src" --ref "$ref" --beam $beam --no-progress \
      2>/dev/null | sed -n 1p)"
  done
done
