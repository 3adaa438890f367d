#!/usr/bin/env bash
# Help, parser and man pages cannot drift: `onebitctl help` is `onebitctl --help`, `onebitctl help
# VERB` is `onebitctl VERB --help` for every verb, every flag a verb's help lists is accepted by
# the parser (and an unlisted one refused) and is the verb's completion list; every flag of
# `onebitd --help` is accepted by onebitd; the man pages (onebitctl.1, onebitd.8,
# onebit-worker.1, onebit-ckpt.1) are there, name every verb and flag, and groff renders them
# without a warning. Needs no server: each flag is given with --help, which ends the program
# once the whole line has been read. Exits non-zero on any mismatch.
# usage: test_cli_help.sh ONEBITCTL ONEBITD MAN_DIR
set -u
CTL=$1
ONEBITD=$2
MAN=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "[ PASSED ] $1"; }
bad() { failed=$((failed + 1)); echo "[ FAILED ] $1: $2"; }
expect() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "got '$2', want '$3'"; fi; }

# flags_of: the flags a help text on stdin lists ("  -f, --file FILE   ..." -> "-f --file"),
# one a line, each with its metavar after a tab.
flags_of() {
  sed -n -E 's/^  (-[a-zA-Z], )?(--[a-z0-9-]+)( ([^ ]+))?( .*)?$/\1\2\t\4/p' |
    awk -F'\t' '{ n = split($1, f, ", "); for (i = 1; i <= n; i++) print f[i] "\t" $2 }'
}
# a value the parser takes for a metavar: the first word of "table|json", else a number.
value_for() {
  case $1 in
  '') echo "" ;;
  HOST:PORT) echo 127.0.0.1:1 ;;
  SIZE) echo 1G ;;
  SIZE*auto*) echo auto ;;
  BYTES) echo 2048 ;;
  KIND) echo local ;;
  [a-z]*'|'*) echo "${1%%|*}" ;;
  *) echo 10 ;;
  esac
}

# --- onebitctl help ---------------------------------------------------------------------------
"$CTL" help > "$TMP/help"; rc=$?
"$CTL" --help > "$TMP/dashhelp"
expect "onebitctl help exits 0" "$rc" 0
if grep -q '^Verbs:' "$TMP/help" && cmp -s "$TMP/help" "$TMP/dashhelp"; then
  ok "onebitctl help is onebitctl --help"
else bad "onebitctl help is onebitctl --help" "$(diff "$TMP/help" "$TMP/dashhelp" | head -5)"; fi
verbs=$(sed -n '/^Verbs:/,/^$/s/^  \([a-z]\+\) .*/\1/p' "$TMP/help")
expect "the verb list" "$(echo $verbs)" \
  "submit status list watch cancel delete version logs checkpoints inspect completion help"
"$CTL" help frobnicate > /dev/null 2> "$TMP/err"; rc=$?
expect "help of an unknown verb: exit 2" "$rc" 2
expect "  ... and says so" "$(head -1 "$TMP/err")" "onebitctl: unknown verb 'frobnicate'"
"$CTL" completion bash > "$TMP/bash"

for v in $verbs; do
  "$CTL" help "$v" > "$TMP/h.$v"; rc=$?
  "$CTL" "$v" --help > "$TMP/d.$v"
  if [ $rc -eq 0 ] && grep -q "^usage: onebitctl $v" "$TMP/h.$v" && cmp -s "$TMP/h.$v" "$TMP/d.$v"; then
    ok "help $v is $v --help"
  else bad "help $v" "rc=$rc $(head -3 "$TMP/h.$v")"; fi
  # Every flag listed is accepted (given with a value where it takes one), before --help.
  sed -n '/^Options:/,/^[A-Z]/p' "$TMP/h.$v" | flags_of > "$TMP/f.$v"
  refused=""
  while IFS=$'\t' read -r flag metavar; do
    val=$(value_for "$metavar")
    if [ -n "$val" ]; then "$CTL" "$v" "$flag" "$val" --help > /dev/null 2> "$TMP/err"
    else "$CTL" "$v" "$flag" --help > /dev/null 2> "$TMP/err"; fi
    [ $? -eq 0 ] || refused="$refused $flag($(head -1 "$TMP/err"))"
  done < "$TMP/f.$v"
  expect "$v: every flag its help lists is accepted" "$refused" ""
  # ... and they are the flags the completion script offers for the verb.
  listed=$(cut -f1 "$TMP/f.$v" | sort | tr '\n' ' ')
  completed=$(sed -n "s/^    $v) flags=\"\(.*\)\" ;;\$/\1/p" "$TMP/bash" | tr ' ' '\n' | sed '/^$/d' | sort | tr '\n' ' ')
  expect "$v: its help lists the flags it completes" "$listed" "$completed"
done
# submit: the flags the issue found missing from its help are there now.
missing=""
for f in -f --file --np --max-restarts -w --watch --request-id --label --deadline --model --data \
  --optimizer --steps --batch-size --lr --freeze-step --name --program; do
  cut -f1 "$TMP/f.submit" | grep -qx -- "$f" || missing="$missing $f"
done
expect "submit --help lists every flag submit takes" "$missing" ""
"$CTL" submit --bogus --help > /dev/null 2> "$TMP/err"; rc=$?
expect "submit --bogus: exit 2" "$rc" 2
expect "  ... with a pointer to submit's help" "$(tail -1 "$TMP/err")" "see 'onebitctl submit --help'"
"$CTL" status --np 2 job-000001 > /dev/null 2> "$TMP/err"; rc=$?
expect "a flag of another verb is refused (status --np): exit 2" "$rc" 2
expect "  ... as unknown" "$(head -1 "$TMP/err")" "onebitctl: unknown option '--np'"
# The global options: each accepted before and after the verb.
flags_of < "$TMP/help" > "$TMP/f.global"
refused=""
while IFS=$'\t' read -r flag metavar; do
  val=$(value_for "$metavar")
  case $flag in --version | --help | -h) continue ;; esac
  "$CTL" $flag $val list --help > /dev/null 2>&1 || refused="$refused $flag"
  "$CTL" list $flag $val --help > /dev/null 2>&1 || refused="$refused $flag(after)"
done < "$TMP/f.global"
expect "every global option is accepted before and after the verb" "$refused" ""

# --- onebitd ----------------------------------------------------------------------------------
"$ONEBITD" --help > "$TMP/onebitd.help"; rc=$?
expect "onebitd --help exits 0" "$rc" 0
flags_of < "$TMP/onebitd.help" > "$TMP/f.onebitd"
n=$(wc -l < "$TMP/f.onebitd")
if [ "$n" -ge 50 ]; then ok "onebitd --help lists its options ($n)"; else bad "onebitd --help lists its options" "only $n"; fi
refused=""
while IFS=$'\t' read -r flag metavar; do
  val=$(value_for "$metavar")
  case $flag in --version | --help | -h) continue ;; esac
  "$ONEBITD" $flag $val --help > /dev/null 2> "$TMP/err" || refused="$refused $flag($(head -1 "$TMP/err"))"
done < "$TMP/f.onebitd"
expect "onebitd: every flag its help lists is accepted" "$refused" ""
"$ONEBITD" --bogus > /dev/null 2> "$TMP/err"; rc=$?
expect "onebitd --bogus: exit 2" "$rc" 2
expect "  ... and says so" "$(head -1 "$TMP/err")" "onebitd: unknown argument '--bogus'"

# --- man pages --------------------------------------------------------------------------------
for page in onebitctl.1 onebitd.8 onebit-worker.1 onebit-ckpt.1; do
  if [ -s "$MAN/$page" ] && head -1 "$MAN/$page" | grep -q '^\.TH '; then ok "$page is made"
  else bad "$page is made" "missing or without .TH in $MAN"; continue; fi
  if command -v groff > /dev/null; then
    groff -man -Tutf8 -ww -z "$MAN/$page" > "$TMP/groff" 2>&1
    expect "$page: groff -man renders it without warnings" "$?:$(cat "$TMP/groff")" "0:"
  elif command -v man > /dev/null; then
    MANWIDTH=80 man -l "$MAN/$page" > /dev/null 2> "$TMP/groff"
    expect "$page: man -l renders it without warnings" "$?:$(cat "$TMP/groff")" "0:"
  else
    echo "[ SKIPPED ] $page: neither groff nor man is installed"
  fi
done
# what the pages say: every verb and every flag (roff writes '-' as '\-').
text() { sed 's/\\-/-/g; s/\\f[BIR]//g' "$MAN/$1"; }
missing=""
for v in $verbs; do text onebitctl.1 | grep -q "^\.SS $v\$" || missing="$missing $v"; done
for v in $verbs global; do
  while IFS=$'\t' read -r flag _; do text onebitctl.1 | grep -q -- "$flag\b" || missing="$missing $flag"; done < "$TMP/f.$v"
done
expect "onebitctl.1 names every verb and flag" "$missing" ""
missing=""
while IFS=$'\t' read -r flag _; do text onebitd.8 | grep -q -- "$flag\b" || missing="$missing $flag"; done < "$TMP/f.onebitd"
expect "onebitd.8 names every flag" "$missing" ""
for f in --spec --format --check --job-id --checkpoint-dir --resume --report --profile --version; do
  text onebit-worker.1 | grep -q -- "^$f" || missing="$missing $f"
done
for f in info verify tensors export list diff --format --optim --only; do
  text onebit-ckpt.1 | grep -q -- "^$f" || missing="$missing $f"
done
expect "onebit-worker.1 and onebit-ckpt.1 name their flags and commands" "$missing" ""

echo "passed: $passed, failed: $failed"
[ "$failed" -eq 0 ]
