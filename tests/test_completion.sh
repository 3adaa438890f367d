#!/usr/bin/env bash
# onebitctl's shell completion: `onebitctl completion bash` sourced into bash registers
# _onebitctl for onebitctl and completes verbs, flags, flag values and the job ids of a real
# onebitd (through `onebitctl list -q` with the --server or --rest already typed);
# `onebitctl completion zsh` is valid zsh and registers with compinit when zsh is installed
# (skipped, and said so, without zsh), and its _onebitctl completes verbs, flags, values and job
# ids with stand-ins for compadd, _describe and _files. Exits non-zero on any mismatch.
# usage: test_completion.sh ONEBITCTL ONEBITD FAKE_WORKER
set -u
CTL=$1
ONEBITD=$2
FAKE=$3
. "$(dirname "$0")/daemon_harness.sh"
# expect NAME GOT WANT
expect() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "got '$2', want '$3'"; fi; }

launch_daemon "$TMP/var" --worker "$FAKE" --insecure-no-auth
printf 'name: t\nmodel: {type: mlp, hidden: [8]}\ndata: {type: synthetic_classification}\noptimizer: {type: adam}\nbatch_size: 8\nsteps: 20\nlog_interval: 5\n' > "$TMP/spec.yaml"
ID1=$("$CTL" --server "$GRPC" submit -f "$TMP/spec.yaml" --np 1)
ID2=$("$CTL" --server "$GRPC" submit -f "$TMP/spec.yaml" --np 1)
expect "list -q prints the ids, one a line" "$("$CTL" --server "$GRPC" list -q)" "$ID1
$ID2"
expect "list -q over REST" "$("$CTL" --rest "$REST" list -q)" "$ID1
$ID2"

"$CTL" completion bash > "$TMP/onebitctl.bash"
expect "completion bash exits 0" "$?" 0
"$CTL" completion fish > "$TMP/fish" 2> "$TMP/fish.err"
expect "completion fish is a usage error" "$?" 2
expect "  ... and says so" "$(head -1 "$TMP/fish.err")" \
  "onebitctl: no completion for shell 'fish': expected bash or zsh"
expect "  ... and prints no script" "$(wc -c < "$TMP/fish")" 0

# complete_bash WORD...: runs _onebitctl on the command line "WORD..." (the last word is the one
# being completed) in a bash that sourced the script; prints COMPREPLY sorted, one a line.
complete_bash() {
  CTL="$CTL" bash --norc --noprofile -c '
    source "$0" || exit 9
    COMP_WORDS=("$CTL" "${@:1}")
    COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
    _onebitctl
    printf "%s\n" "${COMPREPLY[@]}" | sort' "$TMP/onebitctl.bash" "$@"
}
expect "bash can source it and complete -p is set" \
  "$(bash --norc --noprofile -c 'source "$0" && complete -p onebitctl' "$TMP/onebitctl.bash")" \
  "complete -F _onebitctl onebitctl"
expect "verbs" "$(complete_bash c)" "cancel
checkpoints
completion"
expect "every verb" "$(complete_bash '' | tr '\n' ' ')" \
  "cancel checkpoints completion delete help inspect list logs status submit version watch "
expect "a verb's flags" "$(complete_bash logs --f)" "--follow"
expect "a verb's flags and the global ones" "$(complete_bash logs -- | tr '\n' ' ')" \
  "--ca --cert --follow --help --key --output --rank --rest --server --since --tail --tls --tls-server-name --token --token-file --version "
expect "help completes verbs" "$(complete_bash help s | tr '\n' ' ')" "status submit "
expect "--state values" "$(complete_bash list --state RU)" "RUNNING"
expect "-o values" "$(complete_bash status -o j)" "json"
expect "completion shells" "$(complete_bash completion '' | tr '\n' ' ')" "bash zsh "
expect "job ids over gRPC" "$(complete_bash --server "$GRPC" status '')" "$ID1
$ID2"
expect "job ids over REST, options after the verb" "$(complete_bash logs --rest "$REST" --rank 0 '')" "$ID1
$ID2"
expect "job ids by prefix" "$(complete_bash --server "$GRPC" cancel "$ID2")" "$ID2"
expect "no job ids from a server that is not there" \
  "$(complete_bash --server 127.0.0.1:1 status '')" ""
expect "a flag's own value is left alone" "$(complete_bash --server "$GRPC" logs --rank '')" ""
expect "submit -f completes files" "$(cd "$TMP" && complete_bash submit -f spec.y)" "spec.yaml"
expect "logs -f is --follow: job ids after it" "$(complete_bash --server "$GRPC" logs -f '')" "$ID1
$ID2"

if command -v zsh > /dev/null; then
  "$CTL" completion zsh > "$TMP/_onebitctl"
  if zsh -n "$TMP/_onebitctl"; then ok "zsh: the script parses"; else bad "zsh: the script parses" "zsh -n failed"; fi
  expect "zsh: compinit registers _onebitctl for onebitctl" \
    "$(HOME=$TMP zsh -f -c 'autoload -U compinit && compinit -u -d "$HOME/.zcompdump" && source "$0" && print -r -- $_comps[onebitctl]' "$TMP/_onebitctl")" \
    "_onebitctl"
  expect "zsh: from \$fpath too" \
    "$(HOME=$TMP zsh -f -c 'fpath=("$0" $fpath); autoload -U compinit && compinit -u -d "$HOME/.zcompdump" && print -r -- $_comps[onebitctl]' "$TMP")" \
    "_onebitctl"
  # complete_zsh WORD...: runs _onebitctl on the command line "WORD..." (the last word is the one
  # being completed) with stand-ins for compadd, _describe and _files that print what they are
  # given (unfiltered by the prefix: the completion system does that).
  complete_zsh() {
    CTL="$CTL" zsh -f -c '
      compdef() { :; }
      compadd() { local a; for a in "$@"; do [[ $a == -- ]] || print -r -- $a; done; }
      _describe() { local a; for a in ${(P)4}; do print -r -- ${a%%:*}; done; }
      _files() { if [[ $1 == -/ ]]; then print DIRS; else print FILES; fi; }
      source "$0" || exit 9
      words=("$CTL" "$@"); CURRENT=${#words}; PREFIX=$words[CURRENT]
      _onebitctl' "$TMP/_onebitctl" "$@" | sort
  }
  expect "zsh: verbs" "$(complete_zsh '' | tr '\n' ' ')" \
    "cancel checkpoints completion delete help inspect list logs status submit version watch "
  expect "zsh: a verb's flags and the global ones" "$(complete_zsh logs -- | tr '\n' ' ')" \
    "--ca --cert --follow --help --key --output --rank --rest --server --since --tail --tls --tls-server-name --token --token-file --version -f -h -o "
  expect "zsh: help completes verbs" "$(complete_zsh help '' | wc -l)" "12"
  expect "zsh: --state values" "$(complete_zsh list --state '' | tr '\n' ' ')" \
    "CANCELLED FAILED PENDING RESTARTING RUNNING SUCCEEDED "
  expect "zsh: job ids over gRPC" "$(complete_zsh --server "$GRPC" status '')" "$ID1
$ID2"
  expect "zsh: job ids over REST after --rank's value" "$(complete_zsh logs --rest "$REST" --rank 0 '')" "$ID1
$ID2"
  expect "zsh: a flag's own value is left alone" "$(complete_zsh logs --tail '')" ""
  expect "zsh: submit -f completes files" "$(complete_zsh submit -f '')" "FILES"
  expect "zsh: inspect completes directories" "$(complete_zsh inspect '')" "DIRS"
else
  echo "[ SKIPPED ] zsh is not installed: only bash is tested"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
