#!/bin/sh
# Every symbol the libraries export carries the atoll_ prefix, so that linking libatoll
# into another program cannot clash with its names. Compiler-generated names (those
# that start with two underscores, e.g. sanitizer instrumentation) are not atoll's.
# nm must read each library and list at least one atoll_ name: an error, or an empty
# list (a stripped or wrong file), fails rather than passing for want of names.
# usage: test_symbols.sh LIBRARY...
fails=0 passes=0
list=$(mktemp)
trap 'rm -f "$list" "$list.err"' EXIT
[ $# -gt 0 ] || { echo "FAIL: no library given"; exit 1; }
for lib in "$@"; do
  # (an empty argument: tests/gpu's optional atoll_nccl, absent from this build)
  [ -n "$lib" ] || continue
  if ! nm -g --defined-only "$lib" >"$list" 2>"$list.err"; then
    echo "FAIL: $(basename "$lib"): nm failed: $(head -3 "$list.err" | tr '\n' ' ')"
    fails=$((fails + 1))
    continue
  fi
  names=$(awk 'NF == 3 { print $3 }' "$list" | sort -u)
  bad=$(printf '%s\n' "$names" | grep -v -e '^atoll_' -e '^__' -e '^$')
  if ! printf '%s\n' "$names" | grep -q '^atoll_'; then
    echo "FAIL: $(basename "$lib"): nm lists no exported atoll_ name ($(printf '%s\n' "$names" | grep -c .) names in all)"
    fails=$((fails + 1))
  elif [ -n "$bad" ]; then
    echo "FAIL: $(basename "$lib") exports names without the atoll_ prefix: $(echo $bad)"
    fails=$((fails + 1))
  else
    echo "ok: $(basename "$lib"): every exported name starts with atoll_ ($(printf '%s\n' "$names" | grep -c '^atoll_') of them)"
    passes=$((passes + 1))
  fi
done
echo "$passes passed, $fails failed"
[ $fails -eq 0 ] && [ $passes -gt 0 ]
