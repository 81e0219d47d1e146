#!/bin/sh
# The source's layers are as docs/architecture.md says. Each row "| `src/DIR/` | ... |" of
# its table names the directories that DIR's files include from (the words before a ';';
# a row saying "everything" is not checked); an include from any other directory (an edge
# upwards) must be named there as "`src/DIR/FILE` includes `OTHER/HEADER`". Every
# directory of src/ has a row. DIR's own headers and atoll/ (the public API) are free.
# usage: test_layering.sh ATOLL SRC   (ATOLL is not used)
SRC=$2
. "$SRC/tests/cli/common.sh"
DOC=$SRC/docs/architecture.md

for dir in "$SRC"/src/*/; do
  d=$(basename "$dir")
  row=$(grep "^| \`src/$d/\` |" "$DOC" | head -1)
  if [ -z "$row" ]; then
    fail "src/$d/: no row in docs/architecture.md's table of includes"
    continue
  fi
  # the cell's words before ';', without what parentheses say
  cell=$(printf '%s\n' "$row" | cut -d'|' -f3 | sed 's/;.*//; s/([^)]*)//g; s/,/ /g')
  case " $cell " in *" everything "*) continue ;; esac
  bad=0
  for f in $(cd "$SRC" && find "src/$d" -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | sort); do
    for inc in $(sed -n 's/^#include "\([a-z_]*\/[^"]*\)".*/\1/p' "$SRC/$f"); do
      to=${inc%%/*}
      [ "$to" = "$d" ] || [ "$to" = atoll ] && continue
      case " $cell " in *" $to "*) continue ;; esac
      grep -qF "\`$f\` includes \`$inc\`" "$DOC" && continue
      fail "$f includes $inc: src/$d/ is not said to include from $to/ (docs/architecture.md), nor is this edge named there"
      bad=1
    done
  done
  [ $bad -eq 0 ] && pass "src/$d/ includes from: $(echo $cell)"
done

echo "$PASSES passed, $FAILS failed"
[ "$FAILS" -eq 0 ]
