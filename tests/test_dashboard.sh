#!/usr/bin/env bash
# The web dashboard (/ui/) of the real onebitd, with the API token onebitd makes at its first
# start.
#   routes:  curl against the embedded files: bytes identical to service/ui/, content types,
#            security headers, 404 for every other path under /ui/ (traversal included), 405,
#            the token still required for every API call, Host screening, and the page's source
#            free of inline script and HTML sinks.
#   browser: headless Chromium loading /ui/#token=... while the real onebit-worker trains (two
#            ranks, 1-bit Adam): the job rows, the loss curve fed by the event stream and
#            growing between two loads of a running job, the freeze step, bytes against fp32,
#            attempts, checkpoints and the log of a finished job, and a wrong or missing token.
#            Exits 77 (skipped) without Chromium. ONEBIT_DASHBOARD_SCREENSHOT=FILE also writes
#            a screenshot of the finished job (docs/dashboard.png).
# usage: test_dashboard.sh routes|browser ONEBITD UI_DIR EXAMPLES_DIR
set -u
MODE=$1
ONEBITD=$2
UI=$3
EXAMPLES=$4

if [ "$MODE" = browser ]; then
  CHROMIUM=${ONEBIT_CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
  if [ -z "$CHROMIUM" ]; then
    echo "SKIPPED: no chromium (install it with: bash scripts/install-deps.sh --browser, or set ONEBIT_CHROMIUM)"
    exit 77
  fi
fi

QUERY=$(dirname "$0")/dom_query.py
. "$(dirname "$0")/daemon_harness.sh"

# with its API token (no --insecure-no-auth)
launch_daemon "$TMP/var" --slots 4 --backoff 0.2 --cancel-grace 20 ||
  { echo "onebitd did not start"; cat "$TMP/onebitd.log"; exit 1; }
TOKEN=$(cat "$TMP/var/token")
[ ${#TOKEN} -ge 32 ] || { echo "no token in $TMP/var/token"; exit 1; }
AUTH="Authorization: Bearer $TOKEN"

# fetch PATH [curl args]: headers to $TMP/h, body to $TMP/b; prints the status.
fetch() { local p=$1; shift; curl -s --path-as-is -D "$TMP/h" -o "$TMP/b" -w '%{http_code}' "$@" "http://$REST$p"; }
header() { tr -d '\r' < "$TMP/h" | sed -n "s/^$1: //Ip" | head -1; }

if [ "$MODE" = routes ]; then
  # --- the embedded files ------------------------------------------------------------------------
  for f in index.html:text/html app.js:text/javascript style.css:text/css; do
    name=${f%%:*} type=${f#*:}
    st=$(fetch "/ui/$name")
    check "GET /ui/$name: 200, $type, the bytes of service/ui/$name" '[ "$st" = 200 ] && [ "$(header Content-Type)" = "$type; charset=utf-8" ] && cmp -s "$TMP/b" "$UI/$name"' "status $st, $(header Content-Type), $(cmp "$TMP/b" "$UI/$name" 2>&1)"
  done
  st=$(fetch /ui/)
  check "GET /ui/ is index.html" '[ "$st" = 200 ] && cmp -s "$TMP/b" "$UI/index.html"' "status $st"
  csp=$(header Content-Security-Policy)
  check "the page's security headers: a CSP without inline script, nosniff, no framing, no referrer" \
    '[[ "$csp" == *"default-src '"'none'"'"* && "$csp" == *"script-src '"'self'"';"* && "$csp" == *"frame-ancestors '"'none'"'"* && "$csp" != *unsafe* ]] && [ "$(header X-Content-Type-Options)" = nosniff ] && [ "$(header X-Frame-Options)" = DENY ] && [ "$(header Referrer-Policy)" = no-referrer ]' "$(cat "$TMP/h")"
  st=$(fetch /ui)
  check "GET /ui: 301 to /ui/" '[ "$st" = 301 ] && [ "$(header Location)" = /ui/ ]' "status $st $(cat "$TMP/h")"
  st=$(curl -s -I -o "$TMP/hh" -w '%{http_code}' "http://$REST/ui/app.js")
  check "HEAD /ui/app.js: 200 with the file's length" '[ "$st" = 200 ] && [ "$(tr -d "\r" < "$TMP/hh" | sed -n "s/^Content-Length: //Ip")" = "$(wc -c < "$UI/app.js")" ]' "status $st $(cat "$TMP/hh")"

  # --- nothing else under /ui/, whatever the path says -------------------------------------------
  for p in /ui/nope.js /ui/index.htm /ui/INDEX.HTML /ui/app.js/ /ui//app.js /ui/./app.js \
           /ui/../v1/jobs /ui/../token /ui/%2e%2e/token /ui/..%2ftoken /ui/..%2f..%2fetc%2fpasswd \
           /ui/%2e%2e%2f%2e%2e%2fetc%2fpasswd "/ui/app.js%00.html" /ui/embed.cmake /ui/../../service/ui/app.js \
           /ui/.. /ui/%00 "/ui/app.js?x=1/../../token"; do
    st=$(fetch "$p")
    if [ "$p" = "/ui/app.js?x=1/../../token" ]; then
      # A query is no part of the path: this is app.js.
      check "GET $p: app.js" '[ "$st" = 200 ] && cmp -s "$TMP/b" "$UI/app.js"' "status $st"
      continue
    fi
    check "GET $p: 404, nothing of the state directory" '[ "$st" = 404 ] && [ "$(jq -r .error.status "$TMP/b")" = NOT_FOUND ] && ! grep -q "$TOKEN" "$TMP/b" && ! grep -q "root:" "$TMP/b"' "status $st $(head -c 300 "$TMP/b")"
  done
  st=$(fetch /ui/ -X POST -H 'Content-Type: application/json' -d '{}')
  check "POST /ui/: 405, Allow: GET, HEAD" '[ "$st" = 405 ] && [ "$(header Allow)" = "GET, HEAD" ]' "status $st"
  st=$(fetch /ui/app.js -X DELETE)
  check "DELETE /ui/app.js: 405" '[ "$st" = 405 ]' "status $st"
  st=$(fetch /ui/ -H 'Host: dashboard.example')
  check "a Host that is not loopback: 421, for the dashboard too (DNS rebinding)" '[ "$st" = 421 ]' "status $st"

  # --- the data still needs the token ------------------------------------------------------------
  st=$(fetch /v1/jobs)
  check "GET /v1/jobs without the token: 401" '[ "$st" = 401 ] && [ "$(jq -r .error.status "$TMP/b")" = UNAUTHENTICATED ]' "status $st"
  check "API answers are not cached or sniffed" '[ "$(header Cache-Control)" = no-store ] && [ "$(header X-Content-Type-Options)" = nosniff ]' "$(cat "$TMP/h")"
  st=$(fetch /v1/jobs -H "Authorization: Bearer ${TOKEN}x")
  check "GET /v1/jobs with a wrong token: 401" '[ "$st" = 401 ]' "status $st"
  st=$(fetch /v1/jobs -H "$AUTH")
  check "GET /v1/jobs with the token: 200, not cached" '[ "$st" = 200 ] && [ "$(header Cache-Control)" = no-store ]' "status $st"
  st=$(fetch /ui/../v1/jobs -H "$AUTH")
  check "GET /ui/../v1/jobs with the token is still no API call: 404" '[ "$st" = 404 ]' "status $st"
  st=$(fetch "/v1/jobs/job-1%00x" -H "$AUTH")
  check "%00 in an API path stays text: no job 'job-1%00x' (not job-1)" '[ "$st" = 404 ] && [ "$(jq -r .error.message "$TMP/b")" = "no job with id '"'job-1%00x'"'" ]' "status $st $(cat "$TMP/b")"
  st=$(fetch "/v1/jobs?state=RUNNING%00x" -H "$AUTH")
  check "%00 in a query argument stays text: 400 naming it" '[ "$st" = 400 ] && jq -r .error.message "$TMP/b" | grep -qF "got '"'RUNNING%00x'"'"' "status $st $(cat "$TMP/b")"
  st=$(fetch /v1/jobs/job-000001/events?afterSeq=0)
  check "the event stream without the token: 401" '[ "$st" = 401 ]' "status $st"
  for f in index.html app.js style.css; do
    curl -s "http://$REST/ui/$f" > "$TMP/page"
    check "/ui/$f does not carry the token" '! grep -q "$TOKEN" "$TMP/page"'
  done

  # --- the page's source: no inline script or style, no HTML built from text ----------------------
  check "index.html: every script from a file, no inline handlers or style attributes" \
    '! grep -Ei "<script" "$UI/index.html" | grep -qv "<script src=\"[a-z]*\.js\" defer></script>" && ! grep -Eqi "[[:space:]]on[a-z]+=|[[:space:]]style=|javascript:" "$UI/index.html" && [ "$(grep -c "<script src=" "$UI/index.html")" = 1 ]' \
    "$(grep -nEi "<script|[[:space:]]on[a-z]+=|style=" "$UI/index.html")"
  if command -v node > /dev/null; then
    node --check "$UI/app.js" > "$TMP/node.err" 2>&1; rc=$?
    check "app.js parses (node --check)" '[ $rc -eq 0 ]' "$(cat "$TMP/node.err")"
  fi
  check "app.js: no innerHTML, outerHTML, insertAdjacentHTML, document.write, eval or Function" \
    '! grep -nE "innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(.style" "$UI/app.js"' \
    "$(grep -nE "innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function" "$UI/app.js")"
  check "app.js: the token leaves only in an Authorization header (no EventSource, no token in a URL)" \
    '! grep -vE "^ *//" "$UI/app.js" | grep -qE "EventSource|[?&]token=|localStorage|document\.cookie"' "$(grep -nE "EventSource|[?&]token=|localStorage|document\.cookie" "$UI/app.js")"
fi

if [ "$MODE" = browser ]; then
  export OMPI_MCA_rmaps_base_oversubscribe=1
  # dom URL FILE: the page as Chromium's DOM has it after a few seconds of (virtual) time.
  dom() {
    timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$TMP/chrome" \
      --virtual-time-budget=4000 --dump-dom "$1" > "$2" 2>> "$TMP/chromium.log"
  }
  q() { python3 "$QUERY" "$@"; } # FILE QUERY ARGS (tests/dom_query.py)
  submit() { # SPECFILE RESTARTS -> id
    jq -n --rawfile s "$1" --argjson r "$2" '{spec: $s, worldSize: 2, maxRestarts: $r}' |
      curl -s -X POST -H "$AUTH" -H 'Content-Type: application/json' --data-binary @- "http://$REST/v1/jobs" | jq -r .id
  }
  job() { curl -s -H "$AUTH" "http://$REST/v1/jobs/$1"; }
  wait_for() { # ID JQ-CONDITION SECONDS
    for _ in $(seq $(($3 * 10))); do
      [ "$(job "$1" | jq "$2")" = true ] && return 0
      sleep 0.1
    done
    return 1
  }

  # A short job to its end (400 steps: the freeze at 50, evals every 100, checkpoints every 200)
  # and a long one to watch while it runs.
  sed 's/^steps: 200/steps: 400/; s/^  interval: 50/  interval: 100/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/short.yaml"
  printf 'checkpoint: {interval: 200, keep: 5}\n' >> "$TMP/short.yaml"
  sed 's/^steps: 200/steps: 5000000/; s/^log_interval: 10/log_interval: 100/; s/^  interval: 50/  interval: 20000/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/long.yaml"
  printf 'checkpoint: {interval: 0}\n' >> "$TMP/long.yaml"
  a=$(submit "$TMP/short.yaml" 0)
  check "the short job runs to SUCCEEDED" 'wait_for "$a" ".state == \"JOB_STATE_SUCCEEDED\"" 120' "$(job "$a") $(tail -5 "$TMP/var/jobs/$a/worker.log" 2>&1)"
  b=$(submit "$TMP/long.yaml" 1)
  check "the long job runs past step 2000" 'wait_for "$b" "(.progress.step // \"0\" | tonumber) >= 2000" 120' "$(job "$b")"

  # --- the running job, loaded twice ---------------------------------------------------------------
  dom "http://$REST/ui/#token=$TOKEN&job=$b" "$TMP/run1.html"
  sleep 3
  dom "http://$REST/ui/#token=$TOKEN&job=$b" "$TMP/run2.html"
  f=$TMP/run1.html
  check "both jobs are rows of the list, with their states" '[ "$(q "$f" jobs)" = "$(printf "%s RUNNING\n%s SUCCEEDED" "$b" "$a")" ]' "$(q "$f" jobs) $(tail -3 "$TMP/chromium.log")"
  check "the running job is shown RUNNING" '[ "$(q "$f" attr job data-state)" = RUNNING ] && [ "$(q "$f" text job-state)" = RUNNING ]' "$(q "$f" attr job data-state)"
  n1=$(q "$f" attr curve data-train-points) s1=$(q "$f" attr curve data-last-step) e1=$(q "$f" attr job data-sse-events)
  n2=$(q "$TMP/run2.html" attr curve data-train-points) s2=$(q "$TMP/run2.html" attr curve data-last-step)
  check "the event stream delivered steps: the curve has points" '[ "${n1:-0}" -gt 5 ] && [ "${e1:-0}" -ge "${n1:-0}" ] && [ "${s1:-0}" -ge 2000 ]' "points=$n1 events=$e1 last=$s1"
  check "the curve grows between two loads of the running job" '[ "${n2:-0}" -gt "${n1:-0}" ] && [ "${s2:-0}" -gt "${s1:-0}" ]' "points $n1 -> $n2, last step $s1 -> $s2"
  check "the freeze step is on the curve" '[ "$(q "$f" attr curve data-freeze-step)" = 50 ] && q "$f" text curve-summary | grep -q "variance frozen at step 50"' "$(q "$f" text curve-summary)"
  check "bytes sent against an fp32 allreduce" 'q "$f" text bytes-ratio | grep -Eq "^[0-9.]+× less than an fp32 ring allreduce"' "$(q "$f" text bytes-ratio)"
  check "the running attempt" '[ "$(q "$f" rows attempts | cut -d"|" -f1,3)" = "1|running" ]' "$(q "$f" rows attempts)"
  check "the log's tail" 'q "$f" text log | grep -q "<stdout>:{\"event\":\"step\""' "$(q "$f" text log | tail -2)"
  check "the token is in neither page" '! grep -q "$TOKEN" "$f" && ! grep -q "$TOKEN" "$TMP/run2.html"'

  # --- a rank killed: a failed attempt with its reason, the curve starting over ----------------------
  # (No checkpoint yet: the second attempt starts from step 0, and while it is below the step the
  # first one reached, the job's progress is the second attempt's.)
  wait_for "$b" "(.progress.step // \"0\" | tonumber) >= 10000" 120
  victim=""
  for p in $(pgrep -x onebit-worker); do
    tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -qF "$TMP/var/jobs/$b/spec.json" && victim=$p
  done
  check "found a rank of the long job to kill" '[ -n "$victim" ]' "$(pgrep -af onebit-worker)"
  killed_at=$(job "$b" | jq -r .progress.step)
  [ -n "$victim" ] && kill -KILL "$victim"
  check "the long job runs again in a second attempt, from step 0" 'wait_for "$b" "(.attempts | length) == 2 and .state == \"JOB_STATE_RUNNING\" and (.progress.step | tonumber) >= 1000 and (.progress.step | tonumber) < $killed_at" 120' "killed at $killed_at: $(job "$b" | jq -c '{state, attempts, step: .progress.step}')"
  f=$TMP/restarted.html
  dom "http://$REST/ui/#token=$TOKEN&job=$b" "$f"
  q "$f" rows attempts > "$TMP/attempts"
  check "the killed attempt with its exit code and reason, and the running one" '[ "$(wc -l < "$TMP/attempts")" = 2 ] && head -1 "$TMP/attempts" | grep -Eq "^1\|[^|]+\|[^|]+\|0\|[1-9-][0-9]*\|workers failed" && [ "$(tail -1 "$TMP/attempts" | cut -d"|" -f1,3)" = "2|running" ]' "$(cat "$TMP/attempts")"
  now=$(job "$b" | jq -r .progress.step) last=$(q "$f" attr curve data-last-step)
  check "the curve follows the new attempt, without the old attempt's steps" '[ "${last:-0}" -ge 1000 ] && [ "${last:-0}" -lt "$killed_at" ] && [ "$(q "$f" attr curve data-train-points)" -le $((last / 100)) ]' "first attempt killed at $killed_at, last point $last, job at $now: $(q "$f" text curve-summary)"

  curl -s -X POST -H "$AUTH" -H 'Content-Type: application/json' "http://$REST/v1/jobs/$b:cancel" > /dev/null
  check "the long job is cancelled" 'wait_for "$b" ".state == \"JOB_STATE_CANCELLED\"" 120' "$(job "$b" | jq -c '{state, message}')"
  f=$TMP/cancelled.html
  dom "http://$REST/ui/#token=$TOKEN&job=$b" "$f"
  check "the cancelled job: its state and the checkpoint the cancel left" '[ "$(q "$f" attr job data-state)" = CANCELLED ] && [ "$(q "$f" rows checkpoints | wc -l)" = 1 ]' "$(q "$f" attr job data-state) $(q "$f" rows checkpoints)"

  # --- the finished job ----------------------------------------------------------------------------
  f=$TMP/done.html
  dom "http://$REST/ui/#token=$TOKEN&job=$a" "$f"
  check "the finished job: its whole curve, 40 train and 4 eval points up to step 400" '[ "$(q "$f" attr curve data-train-points)" = 40 ] && [ "$(q "$f" attr curve data-eval-points)" = 4 ] && [ "$(q "$f" attr curve data-last-step)" = 400 ] && [ "$(q "$f" attr curve data-freeze-step)" = 50 ]' "$(q "$f" text curve-summary)"
  check "the finished job: its attempt with exit code and reason" '[ "$(q "$f" rows attempts | cut -d"|" -f1,4-)" = "1|0|0|completed" ]' "$(q "$f" rows attempts)"
  check "the finished job: its checkpoints, newest first" '[ "$(q "$f" rows checkpoints | cut -d"|" -f1,3,4,5 | tr "\n" " ")" = "400|compression|50|2 200|compression|50|2 " ]' "$(q "$f" rows checkpoints)"
  check "the finished job: the end of its log" 'q "$f" text log | grep -q "<stdout>:{\"event\":\"summary\""' "$(q "$f" text log | tail -2)"

  # --- without the right token: nothing but the question ------------------------------------------
  f=$TMP/wrong.html
  dom "http://$REST/ui/#token=wrong-token&job=$a" "$f"
  check "a wrong token: no rows, no curve, the token refused" '[ -z "$(q "$f" jobs)" ] && [ "$(q "$f" attr curve data-train-points)" = 0 ] && q "$f" text status | grep -q "the token was refused"' "$(q "$f" jobs) $(q "$f" text status)"
  rm -rf "$TMP/chrome" # a fresh profile: no token kept from before
  f=$TMP/none.html
  dom "http://$REST/ui/" "$f"
  check "no token: no rows, the page asks for it" '[ -z "$(q "$f" jobs)" ] && q "$f" text status | grep -q "enter the API token"' "$(q "$f" jobs) $(q "$f" text status)"

  if [ -n "${ONEBIT_DASHBOARD_SCREENSHOT:-}" ]; then
    timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$TMP/chrome" \
      --hide-scrollbars --window-size=1280,1350 --virtual-time-budget=4000 \
      --screenshot="$ONEBIT_DASHBOARD_SCREENSHOT" "http://$REST/ui/#token=$TOKEN&job=$a" 2>> "$TMP/chromium.log"
    check "screenshot written to $ONEBIT_DASHBOARD_SCREENSHOT" '[ -s "$ONEBIT_DASHBOARD_SCREENSHOT" ]'
  fi
fi

stop_daemon
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
