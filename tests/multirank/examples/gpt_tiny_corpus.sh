#!/usr/bin/env bash
# Writes a small synthetic corpus (about 40 KB, 1200 lines) for the train_gpt tests: sentences
# from a tiny grammar, so a 2-layer model learns it in a few steps and the loss falls visibly.
# Deterministic: bash's RANDOM is seeded.
set -euo pipefail
out="${1:?usage: gpt_tiny_corpus.sh OUT.txt}"
RANDOM=42
subjects=(the_king the_people the_lord his_servant the_prophet a_man the_children)
verbs=(spake_unto went_up_to came_into looked_upon sent_for blessed)
objects=(the_city the_house the_land the_mountain the_temple his_brethren the_river)
ends=("." ", and they were glad ." ", saying , behold ." "in that day ." "by night .")
: > "$out"
for _ in $(seq 1200); do
  s=${subjects[RANDOM % ${#subjects[@]}]}
  v=${verbs[RANDOM % ${#verbs[@]}]}
  o=${objects[RANDOM % ${#objects[@]}]}
  e=${ends[RANDOM % ${#ends[@]}]}
  echo "And ${s//_/ } ${v//_/ } ${o//_/ } $e" >> "$out"
done
