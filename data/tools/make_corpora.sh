#!/usr/bin/env bash
# Extracts the corpora of docs/DESIGN.md (Corpora at hand) as plain text for zt-pretokenize:
#   <dir>/kjv.txt        the King James Bible, one verse per line, reference prefix removed
#                        (needs `apt-get install bible-kjv`)
#   <dir>/fortunes.list  the fortune files (entries separated by '%' lines), one path per line;
#                        pass them with `--format fortune --input $(cat <dir>/fortunes.list)`
set -euo pipefail
dir="${1:?usage: make_corpora.sh OUT_DIR}"
mkdir -p "$dir"
if command -v bible > /dev/null; then
  # -f turns pretty-printing off: "Ge1:1 In the beginning ..." one verse a line.
  bible -f "Gen1:1-Rev22:21" | sed -E 's/^[^ ]+ //' > "$dir/kjv.txt"
  echo "$dir/kjv.txt: $(wc -l < "$dir/kjv.txt") verses"
else
  echo "bible not installed (apt-get install bible-kjv); skipping kjv.txt" >&2
fi
# The UTF-8 copies (*.u8) where the package ships them, else the plain files; no .dat indexes.
ls /usr/share/games/fortunes/ 2>/dev/null | grep -v -E '\.(dat|u8)$' | while read -r f; do
  p="/usr/share/games/fortunes/$f"
  if [ -f "$p.u8" ]; then echo "$p.u8"; else echo "$p"; fi
done > "$dir/fortunes.list"
echo "$dir/fortunes.list: $(wc -l < "$dir/fortunes.list") fortune files"
