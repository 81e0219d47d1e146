#!/bin/sh
# Every symbol the libraries export carries the atoll_ prefix, so that linking libatoll
# into another program cannot clash with its names. Compiler-generated names (those
# that start with two underscores, e.g. sanitizer instrumentation) are not atoll's.
# usage: test_symbols.sh LIBRARY...
fails=0
for lib in "$@"; do
  bad=$(nm -g --defined-only "$lib" 2>/dev/null | awk 'NF == 3 { print $3 }' | grep -v -e '^atoll_' -e '^__' | sort -u)
  if [ -n "$bad" ]; then
    echo "FAIL: $(basename "$lib") exports names without the atoll_ prefix: $(echo $bad)"
    fails=$((fails + 1))
  else
    echo "ok: $(basename "$lib"): every exported name starts with atoll_"
  fi
done
echo "$(( $# - fails )) passed, $fails failed"
[ $fails -eq 0 ]
