#!/usr/bin/env bash
# Re-appends bench/notes.md (the analysis) to docs/performance.md in place of the one the
# benchmark run appended: for analysis written after the run, from its figures. The measured
# part of the page is left as the run wrote it.
#
#   bash scripts/perf-notes.sh [PAGE]      (default docs/performance.md)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
page=${1:-docs/performance.md}
python3 - "$page" bench/notes.md <<'PY'
import sys
page, notes = sys.argv[1], sys.argv[2]
text = open(page, encoding="utf-8").read()
mark = "## How this page is made"
if mark not in text:
    sys.exit(f"{page}: no '{mark}' section: not a page the benchmark wrote")
text = text[: text.index(mark)] + open(notes, encoding="utf-8").read()
open(page, "w", encoding="utf-8").write(text)
PY
