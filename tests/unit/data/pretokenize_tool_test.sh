#!/usr/bin/env bash
# zt-pretokenize end to end on a generated corpus: trains a model, writes train and validation
# shards whose sizes add up, then reuses the model; bad input fails with a one-line error.
set -euo pipefail
tool="$1"
dir="$2"
rm -rf "$dir" && mkdir -p "$dir"
for i in $(seq 1 600); do
  echo "line $i of the test corpus and some words: alpha beta gamma delta $((i * 7 % 13))"
done > "$dir/corpus.txt"

"$tool" --input "$dir/corpus.txt" --train-model "$dir/m.model" --vocab-size 100 \
  --train-sentences 300 --add-eos --output "$dir/train.ztt" --valid-output "$dir/valid.ztt" \
  --valid-fraction 0.1 --threads 2 > "$dir/log.txt" 2>&1
grep -q "wrote $dir/train.ztt: 540 samples" "$dir/log.txt"
grep -q "wrote $dir/valid.ztt: 60 samples" "$dir/log.txt"
grep -q "train lengths: n=540" "$dir/log.txt"
test -s "$dir/m.model"

# Loading the saved model instead of training gives the same tokens (the token section is the
# file's tail; the meta section differs, it records the command).
"$tool" --input "$dir/corpus.txt" --model "$dir/m.model" --add-eos --output "$dir/again.ztt" \
  --valid-output "$dir/valid2.ztt" --valid-fraction 0.1 > /dev/null 2>&1
cmp <(tail -c 8000 "$dir/train.ztt") <(tail -c 8000 "$dir/again.ztt")

# JSONL with a string label and an integer label: the label vocabulary lands in the meta section.
for i in $(seq 1 200); do
  if [ $((i % 3)) -eq 0 ]; then l=neg; else l=pos; fi
  echo "{\"text\": \"review $i says \\\"fine\\\" or not\", \"label\": \"$l\", \"stars\": $((i % 5))}"
done > "$dir/reviews.jsonl"
"$tool" --format jsonl --input "$dir/reviews.jsonl" --label-fields label,stars \
  --model "$dir/m.model" --output "$dir/reviews.ztt" > "$dir/log2.txt" 2>&1
grep -q "wrote $dir/reviews.ztt: 200 samples" "$dir/log2.txt"
grep -aq "label_fields=label,stars" "$dir/reviews.ztt"
grep -aq "label_vocab.label=neg,pos" "$dir/reviews.ztt"

# Fortune files: '%'-separated entries, several files.
printf 'One.\n%%\nTwo lines\nof text.\n%%\nThree.\n' > "$dir/f1"
printf 'Four.\n%%\nFive.\n' > "$dir/f2"
"$tool" --format fortune --input "$dir/f1" "$dir/f2" --model "$dir/m.model" \
  --output "$dir/f.ztt" > "$dir/log3.txt" 2>&1
grep -q "wrote $dir/f.ztt: 5 samples" "$dir/log3.txt"

# Errors: one line naming the culprit, non-zero exit.
if "$tool" --input "$dir/nope.txt" --model "$dir/m.model" --output "$dir/x.ztt" 2> "$dir/err.txt"; then
  echo "missing input accepted"; exit 1
fi
grep -q "zt-pretokenize: error: corpus $dir/nope.txt: cannot open" "$dir/err.txt"
test "$(wc -l < "$dir/err.txt")" -eq 1
echo "ok"
