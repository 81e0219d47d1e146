#!/bin/sh
# The README's commands run as written. Every ```sh block of README.md that follows a
# line `<!-- test: run -->` is run, in order, in one temporary directory whose `build`
# is the build directory of ATOLL, each block by `bash -e` under a time limit; a block
# that exits non-zero fails the test with its output. (Blocks without the mark, such as
# quickstart.sh, test.sh, the build itself or Python, are not run here.) Also:
#  - a marked block never holds scripts/quickstart.sh or scripts/test.sh (they install,
#    build and run the whole suite);
#  - every relative link of README.md names a file or directory that exists;
#  - docs/testing.md names every ctest entry of this build (`ctest -N`);
#  - the tour's islands in one job and as separate programs end with the same
#    validation loss, as the README says.
# usage: test_readme.sh ATOLL SRC
ATOLL=$1
SRC=$2
. "$SRC/tests/cli/common.sh"
BUILD=$(cd "$(dirname "$ATOLL")" && pwd)
README=$SRC/README.md

# ---------------------------------------------------------------- the blocks
# blockN.sh: the Nth marked block's lines
awk -v dir="$TMP" '
  /^<!-- test: run -->$/ { marked = 1; next }
  marked && /^```sh$/ { n++; inblock = 1; marked = 0; next }
  inblock && /^```$/ { inblock = 0; next }
  inblock { print > (dir "/block" n ".sh"); next }
  NF { marked = 0 }
  END { print n + 0 > (dir "/count") }
' "$README"
count=$(cat "$TMP/count")
[ "$count" -ge 5 ] || fail "README.md has $count blocks marked <!-- test: run --> (the tour has at least 5)"

mkdir -p "$TMP/run"
ln -s "$BUILD" "$TMP/run/build"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
i=1
while [ $i -le "$count" ]; do
  b=$TMP/block$i.sh
  first=$(head -1 "$b")
  if grep -q 'quickstart\.sh\|scripts/test\.sh' "$b"; then
    fail "block $i ($first): marked to run, but holds quickstart.sh or test.sh"
    i=$((i + 1))
    continue
  fi
  # its own session, so that what it leaves in the background (a coordinator after a
  # failure) is ended with it
  (cd "$TMP/run" && exec setsid timeout -k 5 180 bash -e "$b") >"$TMP/log$i" 2>&1 &
  pid=$!
  wait $pid
  rc=$?
  kill -- -$pid 2>/dev/null
  if [ $rc -eq 0 ]; then pass "block $i: $first"
  else fail "block $i exited $rc: $first"; tail -15 "$TMP/log$i"; fi
  i=$((i + 1))
done

# the tour's claim: the islands in one job and as separate programs end alike
if [ -f "$TMP/run/runs/islands/summary.json" ] && [ -f "$TMP/run/runs/net0/summary.json" ]; then
  out=$($PY -c 'import json, sys; a, b = (json.load(open(f))["final_val_loss"] for f in sys.argv[1:]); print(a, b); sys.exit(0 if a == b else 1)' \
    "$TMP/run/runs/islands/summary.json" "$TMP/run/runs/net0/summary.json") \
    && pass "the tour's islands in one job and as programs: the same validation loss ($out)" || fail "the tour's islands: validation losses $out"
fi

# ---------------------------------------------------------------- links
for link in $(grep -o '](\([^)#]*\)[)#]' "$README" | sed 's/^](//; s/[)#]$//' | grep -v '^[a-z]*://' | sort -u); do
  [ -e "$SRC/$link" ] || fail "README.md links $link, which does not exist"
done

# ---------------------------------------------------------------- docs/testing.md
(cd "$BUILD" && ctest -N) | sed -n 's/^ *Test *#[0-9]*: *//p' >"$TMP/tests"
[ -s "$TMP/tests" ] || fail "ctest -N in $BUILD lists no tests"
missing=""
for t in $(cat "$TMP/tests"); do
  grep -q "\`$t\`" "$SRC/docs/testing.md" || missing="$missing $t"
done
if [ -z "$missing" ]; then pass "docs/testing.md names all $(wc -l <"$TMP/tests") ctest entries"
else fail "docs/testing.md does not name:$missing"; fi

finish
