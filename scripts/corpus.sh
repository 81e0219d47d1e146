#!/usr/bin/env bash
# Prepares the larger English corpus ("kernel-docs") for experiments that need more
# text than fortunes' 2.4 MB, such as bench/diloco (issue 15): the Linux kernel's
# documentation as Debian's linux-doc-6.1 package ships it, gzip-compressed
# reStructuredText and plain text (Documentation/**/*.rst.gz and *.txt.gz), read by
# `atoll prepare` as shipped. The translations/ folder (Chinese, Japanese, Korean,
# Italian, Spanish) is left out, so the text is English: 4762 files, 25.4 MB of text
# (25.4M byte tokens), 8.6 MB compressed. Why this package: it is the largest body of
# English prose in reStructuredText that Debian 12 ships in one package (python3.11-
# doc's sources are 11 MB; perl-doc, git-doc and the info manuals are smaller still),
# and it is technical English of many authors, not one style.
#
#   usage: scripts/corpus.sh [OUT [ATOLL]]   (defaults: data/kernel-docs, build/atoll)
#
# Installs linux-doc-6.1 when missing (sudo when not root). Files are passed in byte
# order of their paths (LC_ALL=C sort), so the token files are the same on every machine
# with the same package version.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/data/kernel-docs}
ATOLL=${2:-$ROOT/build/atoll}
PKG=linux-doc-6.1
DOCS=/usr/share/doc/$PKG/Documentation

if [ ! -d "$DOCS" ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "corpus: installing $PKG"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "$PKG"
fi
[ -x "$ATOLL" ] || { echo "corpus: $ATOLL not found; build first (scripts/build.sh)" >&2; exit 1; }

mapfile -t files < <(cd "$DOCS" && find . -path ./translations -prune -o -type f \
  \( -name '*.rst.gz' -o -name '*.txt.gz' \) -print | LC_ALL=C sort | sed "s|^\./|$DOCS/|")
[ ${#files[@]} -gt 0 ] || { echo "corpus: no *.rst.gz or *.txt.gz under $DOCS" >&2; exit 1; }
"$ATOLL" prepare --text "${files[@]}" --out "$OUT"
