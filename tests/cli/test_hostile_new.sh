#!/bin/sh
# Hostile input for the newer commands (tokenizer, --init-from, sample's KV-cache loop,
# plan --versus, readers of settings files, --init-from-hf's config.json): each case once
# hung, ran on silently, wrapped a number or suggested a flag value out of range. Every
# command is bounded by a timeout.
# usage: test_hostile_new.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
small_data
D="--data $TMP/data"
TO="timeout 60"
ART=/usr/share/games/fortunes/art

# empty string flags: --init-from '' trained from scratch with status 0
expect_error "train --init-from ''" "--init-from: empty value" $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/e1" --init-from ""
expect_error "train --arch ''" "--arch: empty value" $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/e2" --arch ""
[ ! -e "$TMP/e1" ] && [ ! -e "$TMP/e2" ] && pass "refused empty flags wrote nothing" || fail "refused empty flags left a run"

# FIFOs and devices: a --config FIFO and a tokenizer.json FIFO blocked in open for ever,
# tokenizer train --text /dev/zero read until memory ran out
mkfifo "$TMP/fifo"
expect_error "train --config FIFO" "not a regular file" $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/e3" --config "$TMP/fifo"
expect_error "tokenizer info --tokenizer FIFO" "not a regular file" $TO $ATOLL tokenizer info --tokenizer "$TMP/fifo"
expect_error "prepare --tokenizer FIFO" "not a regular file" $TO $ATOLL prepare --text $ART --out "$TMP/e4" --tokenizer "$TMP/fifo"
expect_error "tokenizer train --text FIFO" "not a regular file" $TO $ATOLL tokenizer train --text "$TMP/fifo" --vocab-size 300 --out "$TMP/t.json"
expect_error "tokenizer train --text /dev/zero" "not a regular file" $TO $ATOLL tokenizer train --text /dev/zero --vocab-size 300 --out "$TMP/t.json"
# ... while encode still reads a pipe given as --text, as it reads stdin
$ATOLL tokenizer bytes --out "$TMP/bytes.json" 2>/dev/null || fail "tokenizer bytes"
(printf 'AB' >"$TMP/fifo") &
ids=$($TO $ATOLL tokenizer encode --tokenizer "$TMP/bytes.json" --text "$TMP/fifo" 2>&1)
wait
[ "$ids" = "65 66" ] && pass "encode --text FIFO reads the pipe" || fail "encode --text FIFO gave '$ids'"

# a BPE tokenizer, data of it and of another one, and checkpoints of both archs
$TO $ATOLL tokenizer train --text $ART --vocab-size 300 --out "$TMP/tok.json" >/dev/null 2>&1 || fail "tokenizer train"
$TO $ATOLL tokenizer train --text /usr/share/games/fortunes/science --vocab-size 300 --out "$TMP/tok2.json" >/dev/null 2>&1 \
  || fail "tokenizer train 2"
$TO $ATOLL prepare --text $ART --out "$TMP/bpe" --tokenizer "$TMP/tok.json" >/dev/null 2>&1 || fail "prepare bpe"
$TO $ATOLL prepare --text $ART --out "$TMP/bpe2" --tokenizer "$TMP/tok2.json" >/dev/null 2>&1 || fail "prepare bpe2"
$TO $ATOLL train $TINY --data "$TMP/bpe" --steps 1 --out "$TMP/rb" >/dev/null 2>&1 || fail "bpe run"
$TO $ATOLL train $TINY $D --steps 1 --out "$TMP/rg" >/dev/null 2>&1 || fail "gpt2 run"
$TO $ATOLL train $TINY $D --steps 1 --out "$TMP/rl" --arch llama --kv-heads 1 >/dev/null 2>&1 || fail "llama run"

# --init-from a checkpoint of another design or tokenizer: the message named a missing
# tensor, or (another tokenizer of the same vocabulary size) the run went on silently
expect_error "init-from gpt2 into llama" "arch=gpt2" $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/i1" --init-from "$TMP/rg" --arch llama
expect_error "init-from llama into gpt2" "arch=llama" $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/i2" --init-from "$TMP/rl"
expect_error "init-from other kv-heads" "pass --kv-heads 1" $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/i3" --init-from "$TMP/rl" --arch llama --kv-heads 2
expect_error "init-from other tie" "pass --tie 0" $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/i4" --init-from "$TMP/rl" --arch llama --kv-heads 1 --tie 1
expect_error "init-from another tokenizer's checkpoint" "tokenizer" $TO $ATOLL train $TINY --data "$TMP/bpe2" --steps 1 --out "$TMP/i5" --init-from "$TMP/rb"
expect_error "init-from a BPE checkpoint on byte data" "tokenizer" $TO $ATOLL train $TINY $D --vocab 300 --steps 1 --out "$TMP/i6" --init-from "$TMP/rb"
$TO $ATOLL train $TINY --data "$TMP/bpe" --steps 2 --out "$TMP/i7" --init-from "$TMP/rb" >/dev/null 2>&1 \
  && pass "init-from on data of the same tokenizer" || fail "init-from on data of the same tokenizer refused"

# sample: numbers beyond int wrapped (--tokens 4294967297 gave one token)
expect_error "sample --tokens 2^32+1" "--tokens" $TO $ATOLL sample --ckpt "$TMP/rg" --tokens 4294967297
expect_error "sample --top-k 2^32+1" "--top-k" $TO $ATOLL sample --ckpt "$TMP/rg" --tokens 3 --top-k 4294967297
# many contexts of text (the buffer keeps only its last context once it holds 4): a long
# sample runs and begins with the short one, for both archs and a BPE tokenizer, and a
# prompt longer than the context works
for r in rg rl rb; do
  a=$($TO $ATOLL sample --ckpt "$TMP/$r" --tokens 150 --seed 3 2>&1) || fail "sample $r 150"
  b=$($TO $ATOLL sample --ckpt "$TMP/$r" --tokens 400 --seed 3 2>&1) || fail "sample $r 400"
  case "$b" in "$a"*) pass "sample $r: 400 tokens begin with the 150" ;; *) fail "sample $r: 400 tokens differ from the 150" ;; esac
done
$TO $ATOLL sample --ckpt "$TMP/rl" --prompt "$(head -c 2000 $ART)" --tokens 200 >/dev/null 2>"$TMP/err" \
  && pass "sample: a prompt of many contexts" || fail "sample: a prompt of many contexts: $(cat "$TMP/err")"

# plan --versus: a key given twice (the later one won silently)
expect_error "plan --versus dp twice" "given twice" $TO $ATOLL plan --model gpt2 --versus dp=1,tp=1,pp=1,cp=1,dp=2

# stdout that cannot be written (a full disk, a closed stdout): sample and plan exited 0
# with their output lost; now one line, as tokenizer encode/decode
to_full() { "$@" >/dev/full; }
to_closed() { "$@" >&-; }
if [ -c /dev/full ]; then
  expect_error "sample > /dev/full" "stdout: cannot write: No space left on device" to_full $TO $ATOLL sample --ckpt "$TMP/rg" --tokens 50
  expect_error "sample --tokens 0 > /dev/full" "stdout: cannot write" to_full $TO $ATOLL sample --ckpt "$TMP/rg" --tokens 0
  expect_error "plan > /dev/full" "stdout: cannot write: No space left on device" to_full $TO $ATOLL plan --model gpt2
  expect_error "plan --json > /dev/full" "stdout: cannot write: No space left on device" to_full $TO $ATOLL plan --model gpt2 --json
else
  echo "skip: no /dev/full"
fi
expect_error "sample >&-" "stdout: cannot write" to_closed $TO $ATOLL sample --ckpt "$TMP/rg" --tokens 50
expect_error "plan >&-" "stdout: cannot write" to_closed $TO $ATOLL plan --model gpt2

# sample --threads: train's flag (N > 0 threads, 0 all cores); the text does not change
a=$($TO $ATOLL sample --ckpt "$TMP/rg" --tokens 300 --seed 5 2>&1) || fail "sample default threads: $a"
for t in 1 2 0; do
  b=$($TO $ATOLL sample --ckpt "$TMP/rg" --tokens 300 --seed 5 --threads $t 2>&1)
  [ $? -eq 0 ] && [ "$a" = "$b" ] && pass "sample --threads $t: the default's text" || fail "sample --threads $t: $b"
done
# refused with train's messages (not sample's "unknown flag")
expect_error "sample --threads -1" "threads must be in" $TO $ATOLL sample --ckpt "$TMP/rg" --tokens 3 --threads -1
expect_error "sample --threads 1025" "threads must be in" $TO $ATOLL sample --ckpt "$TMP/rg" --tokens 3 --threads 1025
expect_error "sample --threads junk" "threads: expected a number, got 'junk'" $TO $ATOLL sample --ckpt "$TMP/rg" --tokens 3 --threads junk
expect_error "sample --threads ''" "threads: expected a number" $TO $ATOLL sample --ckpt "$TMP/rg" --tokens 3 --threads ""
expect_error "sample --threads 1.5" "threads must be an integer" $TO $ATOLL sample --ckpt "$TMP/rg" --tokens 3 --threads 1.5

# export: a killed export's hidden temporary directory (its pid gone) is removed by the
# next export next to it; a live process's one (pid 1) and a foreign name are left
$TO $ATOLL train $TINY $D --steps 1 --out "$TMP/rx" >/dev/null 2>&1 || fail "run to export"
mkdir -p "$TMP/xp" "$TMP/xp/.tmp-hf-999999999" "$TMP/xp/.tmp-hf-1" "$TMP/xp/.tmp-hf-x"
if $TO $ATOLL export --ckpt "$TMP/rx" --to hf --out "$TMP/xp/hf" >/dev/null 2>"$TMP/err" \
   && [ ! -e "$TMP/xp/.tmp-hf-999999999" ] && [ -d "$TMP/xp/.tmp-hf-1" ] && [ -d "$TMP/xp/.tmp-hf-x" ]; then
  pass "export removes a dead export's temporary directory only"
else
  fail "export leftovers: $(ls -a "$TMP/xp" | tr '\n' ' ') $(cat "$TMP/err")"
fi

# --init-from-hf's config.json: a key twice was read as its first value (Python's json
# takes the last), at the top or nested; a value out of train's range got the hint
# "pass --layers 1000000000", a flag train refuses
hf_case() { # NAME SED_SCRIPT: a copy of the export with config.json edited
  rm -rf "$TMP/$1" && cp -r "$TMP/xp/hf" "$TMP/$1" && sed "$2" "$TMP/xp/hf/config.json" >"$TMP/$1/config.json"
}
hf_case hd1 's/^\t"n_layer":\t2,/\t"n_layer":\t2,\n\t"n_layer":\t3,/'
expect_error "hf config.json: a key twice" "hd1/config.json: key 'n_layer' appears more than once" \
  $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/h1" --init-from-hf "$TMP/hd1"
hf_case hd2 's/^{/{"extra": {"a": 1, "a": 2},/'
expect_error "hf config.json: a nested key twice" "hd2/config.json: key 'a' appears more than once" \
  $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/h2" --init-from-hf "$TMP/hd2"
hf_case hd3 's/"n_layer":\t2,/"n_layer":\t1000000000,/'
expect_error "hf config.json: n_layer out of range" "n_layer is 1000000000, which atoll cannot run (--layers: layers must be in" \
  $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/h3" --init-from-hf "$TMP/hd3"
hf_case hd4 's/"vocab_size":\t256,/"vocab_size":\t3000000,/'
expect_error "hf config.json: vocab_size out of range" "vocab_size is 3000000, which atoll cannot run (--vocab: vocab must be in" \
  $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/h4" --init-from-hf "$TMP/hd4"
$TO $ATOLL export --ckpt "$TMP/rl" --to hf --out "$TMP/xl" >/dev/null 2>&1 || fail "export llama"
rm -rf "$TMP/hd6" && cp -r "$TMP/xl" "$TMP/hd6" && sed 's/"rope_theta":\t10000/"rope_theta":\t1e12/' "$TMP/xl/config.json" >"$TMP/hd6/config.json"
expect_error "hf config.json: rope_theta out of range" "rope_theta is 1000000000000, which atoll cannot run (--rope-theta: rope-theta must be in" \
  $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/h6" --arch llama --kv-heads 1 --init-from-hf "$TMP/hd6"
hf_case hd5 's/"n_layer":\t2,/"n_layer":\t3,/'
expect_error "hf config.json: n_layer in range, another" "--layers 2: disagrees with $TMP/hd5/config.json's n_layer 3" \
  $TO $ATOLL train $TINY $D --steps 1 --out "$TMP/h5" --init-from-hf "$TMP/hd5"

# keys --out a directory others may write to (sticky or not), or with such an allowed/: the
# secret key was written there without a word; one line naming the directory, nothing written
for m in 777 1777 775; do
  mkdir -p "$TMP/k$m" && chmod $m "$TMP/k$m"
  expect_error "keys --out a directory of mode $m" "$TMP/k$m: writable by" $TO $ATOLL keys --out "$TMP/k$m"
  [ -z "$(ls -A "$TMP/k$m")" ] && pass "keys --out mode $m: nothing written" || fail "keys --out mode $m wrote $(ls -A "$TMP/k$m")"
done
mkdir -p "$TMP/kal/allowed" && chmod 777 "$TMP/kal/allowed"
expect_error "keys --out DIR with a world-writable DIR/allowed" "kal/allowed: writable by everyone" $TO $ATOLL keys --out "$TMP/kal"
[ ! -e "$TMP/kal/key.secret" ] && pass "keys: no secret key beside a world-writable allowed/" || fail "keys wrote $TMP/kal/key.secret"
# a directory it makes, under umask 0, is not writable by others (0755): accepted;
# key.secret and key.pub are 0600
(umask 0 && $TO $ATOLL keys --out "$TMP/kfresh/sub" >/dev/null 2>"$TMP/err") || fail "keys --out a new directory: $(cat "$TMP/err")"
modes=$(stat -c %a "$TMP/kfresh/sub/key.secret" "$TMP/kfresh/sub/key.pub" 2>&1 | tr '\n' ' ')
[ "$modes" = "600 600 " ] && pass "keys under umask 0: key.secret and key.pub mode 600" || fail "keys under umask 0: modes $modes"
# a new key directory in a parent others may write to, not sticky, could be swapped for
# theirs: refused (in a sticky one such as /tmp it could not: accepted)
mkdir -p "$TMP/kww" && chmod 777 "$TMP/kww"
expect_error "keys --out a new directory in a world-writable, non-sticky parent" "its parent $TMP/kww is writable by others and not sticky" $TO $ATOLL keys --out "$TMP/kww/k"
mkdir -p "$TMP/kst" && chmod 1777 "$TMP/kst"
$TO $ATOLL keys --out "$TMP/kst/k" >/dev/null 2>"$TMP/err" && pass "keys --out in a sticky world-writable parent" || fail "keys --out in a sticky parent: $(cat "$TMP/err")"
# the coordinator reads its keys only from directories only its owner may write: an
# allowed/ made world-writable after keys --out let anyone add a key without a word
chmod 777 "$TMP/kst/k/allowed"
expect_error "coordinator with a world-writable allowed/" "k/allowed: writable by everyone" $TO $ATOLL coordinator --listen tcp://127.0.0.1:9 --keys "$TMP/kst/k"
chmod 755 "$TMP/kst/k/allowed" && chmod 775 "$TMP/kst/k"
expect_error "coordinator with a group-writable keys directory" "kst/k: writable by its group" $TO $ATOLL coordinator --listen tcp://127.0.0.1:9 --keys "$TMP/kst/k"

finish
