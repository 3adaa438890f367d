#!/usr/bin/env bash
# Black-box tests of TLS on both APIs: a throwaway CA and a certificate for 127.0.0.1/localhost
# made with openssl, the real onebitd serving them, onebitctl, curl, openssl s_client and obrpc
# as clients. Every check fails if the port were plaintext: the handshake shows the certificate's
# subject, plaintext clients are turned away, a wrong CA or name is refused with its message.
# usage: test_tls.sh ONEBITD ONEBITCTL OBRPC FAKE_WORKER
set -u
ONEBITD=$1
CTL=$2
OBRPC=$3
FAKE=$4
. "$(dirname "$0")/daemon_harness.sh"
command -v openssl > /dev/null || { echo "openssl is needed"; exit 1; }

# --- a CA, a server certificate for 127.0.0.1 and localhost, a client certificate, strangers ---
P=$TMP/pki
mkdir -p "$P"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2> /dev/null; }
ca() { # NAME CN
  key "$P/$1.key"
  openssl req -x509 -new -key "$P/$1.key" -out "$P/$1.pem" -days 2 -subj "/CN=$2" 2> /dev/null
}
leaf() { # NAME CN CA EXTENSIONS
  key "$P/$1.key"
  openssl req -new -key "$P/$1.key" -out "$P/$1.csr" -subj "/CN=$2" 2> /dev/null
  printf '%s\n' "$4" > "$P/$1.ext"
  openssl x509 -req -in "$P/$1.csr" -CA "$P/$3.pem" -CAkey "$P/$3.key" -CAcreateserial \
    -out "$P/$1.pem" -days 2 -extfile "$P/$1.ext" 2> /dev/null
}
ca ca "onebit test CA"
ca other "some other CA"
leaf server "onebitd tls test server" ca \
  "$(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth')"
leaf client "onebitctl tls test client" ca "extendedKeyUsage=clientAuth"
leaf stranger "a client of another CA" other "extendedKeyUsage=clientAuth"
chmod 600 "$P"/*.key
head -c 600 /dev/urandom | base64 > "$P/garbage.pem"
chmod 600 "$P/garbage.pem" # refused for what it holds, not for its mode
check "openssl made the certificates" '[ -s "$P/server.pem" ] && [ -s "$P/client.pem" ]'

TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$TOKEN" > "$TMP/token"
chmod 600 "$TMP/token"
export ONEBIT_TOKEN=$TOKEN # onebitctl's and obrpc's token

# start_tls STATE [onebitd options]: a daemon with the token; sets PID, GRPC, REST, REPORT, and
# DRC (its exit status when it did not start).
start_tls() {
  local state=$1
  shift
  rm -f "$TMP/ready"
  "$ONEBITD" --state-dir "$TMP/$state" --ready-file "$TMP/ready" --token-file "$TMP/token" \
    --worker "$FAKE" --backoff 0.2 --cancel-grace 5 "$@" > "$TMP/$state.log" 2>&1 &
  PID=$!
  DRC=""
  for _ in $(seq 200); do
    [ -s "$TMP/ready" ] && break
    if ! kill -0 "$PID" 2> /dev/null; then wait "$PID"; DRC=$?; PID=""; return; fi
    sleep 0.05
  done
  GRPC=127.0.0.1:$(sed -n 's/^grpc=//p' "$TMP/ready")
  REST=127.0.0.1:$(sed -n 's/^rest=//p' "$TMP/ready")
  REPORT=127.0.0.1:$(sed -n 's/^report=//p' "$TMP/ready")
}
# ctl OUT ARGS...: onebitctl's stdout to OUT, stderr to OUT.err; its exit status
ctl() {
  local out=$1
  shift
  timeout 60 "$CTL" "$@" > "$out" 2> "$out.err"
}
# wait_done ID TRANSPORT-ARGS...: until onebitctl sees the job SUCCEEDED (20 s)
wait_done() {
  local id=$1
  shift
  for _ in $(seq 200); do
    [ "$(timeout 20 "$CTL" "$@" -o json status "$id" 2> /dev/null | jq -r .state)" = JOB_STATE_SUCCEEDED ] &&
      return 0
    sleep 0.1
  done
  return 1
}
printf 'name: tls\nmodel: {type: mlp, hidden: [8]}\ndata: {type: synthetic_classification}\noptimizer: {type: adam}\nbatch_size: 8\nsteps: 20\nlog_interval: 5\ncheckpoint: {interval: 10}\n' > "$TMP/job.yaml"

# --- onebitd with TLS ------------------------------------------------------------------------
start_tls tls --grpc 127.0.0.1:0 --rest 127.0.0.1:0 --tls-cert "$P/server.pem" --tls-key "$P/server.key"
check "onebitd starts with TLS and says so" '[ -n "$PID" ] && grep -q "REST on port [0-9]* (TLS)" "$TMP/tls.log"' "$(cat "$TMP/tls.log")"

# The handshake on each port shows our certificate, verified against our CA.
for port in "$GRPC" "$REST"; do
  echo | timeout 10 openssl s_client -connect "$port" -CAfile "$P/ca.pem" -alpn h2 > "$TMP/sc" 2>&1
  check "openssl s_client on $port: the server certificate, verified" \
    'grep -q "subject=CN *= *onebitd tls test server" "$TMP/sc" && grep -q "Verify return code: 0 (ok)" "$TMP/sc"' \
    "$(grep -a -E 'subject|Verify|error' "$TMP/sc" | head -5)"
done

# Old protocol versions are refused on both ports, whatever ciphers the client offers; 1.2 works.
for port in "$GRPC" "$REST"; do
  for v in -tls1 -tls1_1; do
    echo | timeout 10 openssl s_client -connect "$port" "$v" -cipher 'DEFAULT@SECLEVEL=0' > "$TMP/sc" 2>&1
    check "openssl s_client $v on $port: refused" '! grep -E -q "Cipher is [A-Z0-9]" "$TMP/sc"' \
      "$(grep -a -E 'Protocol|Cipher' "$TMP/sc" | head -3)"
  done
  echo | timeout 10 openssl s_client -connect "$port" -tls1_2 -CAfile "$P/ca.pem" > "$TMP/sc" 2>&1
  check "openssl s_client -tls1_2 on $port: accepted, with an AEAD cipher" \
    'grep -q "Verify return code: 0 (ok)" "$TMP/sc" && grep -E -q "Cipher is [A-Z0-9-]*(GCM|CHACHA20)" "$TMP/sc"' \
    "$(grep -a -E 'Protocol|Cipher|error' "$TMP/sc" | head -3)"
done

# onebitctl over gRPC with the CA: submit, list, status.
ctl "$TMP/g1" --server "$GRPC" --ca "$P/ca.pem" submit -f "$TMP/job.yaml" --np 1; rc=$?
G1=$(head -1 "$TMP/g1")
check "gRPC+TLS: onebitctl --ca submit" '[ $rc -eq 0 ] && [[ "$G1" == job-* ]]' "rc=$rc $(cat "$TMP/g1" "$TMP/g1.err")"
check "gRPC+TLS: the job runs to SUCCEEDED (status)" 'wait_done "$G1" --server "$GRPC" --ca "$P/ca.pem"' "$(cat "$TMP/tls.log" | tail -5)"
ctl "$TMP/gl" --server "$GRPC" --ca "$P/ca.pem" list; rc=$?
check "gRPC+TLS: list shows it" '[ $rc -eq 0 ] && grep -q "^$G1 .*SUCCEEDED" "$TMP/gl"' "rc=$rc $(cat "$TMP/gl" "$TMP/gl.err")"
ctl "$TMP/gn" --server "localhost:${GRPC#*:}" --tls --ca "$P/ca.pem" status "$G1"; rc=$?
check "gRPC+TLS: by the name localhost too" '[ $rc -eq 0 ] && grep -q "$G1" "$TMP/gn"' "rc=$rc $(cat "$TMP/gn.err")"
ONEBIT_CA=$P/ca.pem ONEBIT_TLS=1 ctl "$TMP/ge" --server "$GRPC" status "$G1"; rc=$?
check "gRPC+TLS: ONEBIT_TLS=1 and ONEBIT_CA" '[ $rc -eq 0 ] && grep -q "$G1" "$TMP/ge"' "rc=$rc $(cat "$TMP/ge.err")"

# onebitctl over REST (https) with the CA.
ctl "$TMP/r1" --rest "https://$REST" --ca "$P/ca.pem" submit -f "$TMP/job.yaml" --np 1; rc=$?
R1=$(head -1 "$TMP/r1")
check "REST+TLS: onebitctl --rest https:// --ca submit" '[ $rc -eq 0 ] && [[ "$R1" == job-* ]]' "rc=$rc $(cat "$TMP/r1" "$TMP/r1.err")"
check "REST+TLS: the job runs to SUCCEEDED (status)" 'wait_done "$R1" --rest "https://$REST" --ca "$P/ca.pem"'
ctl "$TMP/rl" --rest "https://$REST" --ca "$P/ca.pem" list; rc=$?
check "REST+TLS: list shows both jobs" '[ $rc -eq 0 ] && grep -q "^$R1 " "$TMP/rl" && grep -q "^$G1 " "$TMP/rl"' "rc=$rc $(cat "$TMP/rl" "$TMP/rl.err")"

# curl with the CA: /healthz, the API with the token, the dashboard.
h=$(curl -sS --cacert "$P/ca.pem" "https://$REST/healthz" 2>&1)
check "curl --cacert https /healthz" '[ "$(echo "$h" | jq -r .status)" = SERVING ]' "$h"
j=$(curl -sS --cacert "$P/ca.pem" -H "Authorization: Bearer $TOKEN" "https://$REST/v1/jobs" 2>&1)
check "curl --cacert https /v1/jobs with the token lists the jobs" \
  'echo "$j" | jq -e --arg a "$G1" --arg b "$R1" "[.jobs[].id] | index(\$a) != null and index(\$b) != null" > /dev/null' "$j"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$P/ca.pem" "https://$REST/v1/jobs")
check "https /v1/jobs without the token: 401" '[ "$code" = 401 ]' "got $code"
code=$(curl -s -o "$TMP/ui" -w '%{http_code}' --cacert "$P/ca.pem" "https://localhost:${REST#*:}/ui/")
check "the dashboard over https" '[ "$code" = 200 ] && grep -qi "<html" "$TMP/ui"' "got $code"

# Plaintext against TLS is turned away, with a message that says what to do.
out=$(curl -sS "http://$REST/healthz" 2>&1); rc=$?
check "plain http to the REST port fails" '[ $rc -ne 0 ] && ! echo "$out" | grep -q SERVING' "rc=$rc $out"
ctl "$TMP/p1" --rest "http://$REST" list; rc=$?
check "onebitctl --rest http:// against TLS: exit 3, says to use TLS" \
  '[ $rc -eq 3 ] && grep -q "did not answer in plaintext.*https://" "$TMP/p1.err"' "rc=$rc $(cat "$TMP/p1.err")"
ctl "$TMP/p2" --server "$GRPC" list; rc=$?
check "onebitctl gRPC plaintext against TLS: exit 3, says to pass --tls" \
  '[ $rc -eq 3 ] && grep -q "did not answer in plaintext.*--tls" "$TMP/p2.err"' "rc=$rc $(cat "$TMP/p2.err")"
"$OBRPC" "$GRPC" health > /dev/null 2>&1; rc=$?
check "a plaintext gRPC health check on the TLS port fails" '[ $rc -ne 0 ]' "rc=$rc"

# Without our CA, with another CA, with a wrong name: refused, each with its message.
env -u ONEBIT_CA SSL_CERT_FILE=/nonexistent "$CTL" --server "$GRPC" --tls list > "$TMP/n1" 2> "$TMP/n1.err"; rc=$?
check "gRPC --tls without a CA: exit 3, not trusted" '[ $rc -eq 3 ] && grep -q "is not trusted.*--ca" "$TMP/n1.err"' "rc=$rc $(cat "$TMP/n1.err")"
ctl "$TMP/n2" --server "$GRPC" --ca "$P/other.pem" list; rc=$?
check "gRPC with another CA: exit 3, not trusted" '[ $rc -eq 3 ] && grep -q "is not trusted" "$TMP/n2.err"' "rc=$rc $(cat "$TMP/n2.err")"
ctl "$TMP/n3" --rest "https://$REST" list; rc=$?
check "REST https without a CA: exit 3, not trusted" '[ $rc -eq 3 ] && grep -q "is not trusted" "$TMP/n3.err"' "rc=$rc $(cat "$TMP/n3.err")"
ctl "$TMP/n4" --rest "https://$REST" --ca "$P/other.pem" list; rc=$?
check "REST with another CA: exit 3, not trusted" '[ $rc -eq 3 ] && grep -q "is not trusted" "$TMP/n4.err"' "rc=$rc $(cat "$TMP/n4.err")"
ctl "$TMP/n5" --server "$GRPC" --ca "$P/ca.pem" --tls-server-name wrong.example list; rc=$?
check "gRPC with a name the certificate lacks: exit 3, not for this name" \
  '[ $rc -eq 3 ] && grep -q "not for this name" "$TMP/n5.err"' "rc=$rc $(cat "$TMP/n5.err")"
ctl "$TMP/n6" --server "$GRPC" --ca "$TMP/nothere.pem" list; rc=$?
check "a --ca that does not exist is named" '[ $rc -ne 0 ] && grep -q "nothere.pem" "$TMP/n6.err"' "rc=$rc $(cat "$TMP/n6.err")"
out=$(curl -sS --cacert "$P/other.pem" "https://$REST/healthz" 2>&1); rc=$?
check "curl with another CA fails" '[ $rc -ne 0 ]' "rc=$rc $out"

# Workers (no TLS of their own) report to a plaintext port on loopback.
"$OBRPC" "$REPORT" health > "$TMP/wh" 2>&1; rc=$?
check "the workers' port: plaintext, loopback" '[ $rc -eq 0 ] && grep -q "\"status\":1" "$TMP/wh" && grep -q "workers report to plaintext port ${REPORT#*:}" "$TMP/tls.log"' "rc=$rc $(cat "$TMP/wh")"
stop_daemon

# --- TLS client against a plaintext onebitd ---------------------------------------------------
start_tls plain --grpc 127.0.0.1:0 --rest 127.0.0.1:0
ctl "$TMP/t1" --server "$GRPC" --ca "$P/ca.pem" list; rc=$?
check "onebitctl --ca against plaintext gRPC: exit 3, TLS failed" '[ $rc -eq 3 ] && grep -q "TLS with onebitd .* failed" "$TMP/t1.err"' "rc=$rc $(cat "$TMP/t1.err")"
ctl "$TMP/t2" --rest "https://$REST" --ca "$P/ca.pem" list; rc=$?
check "onebitctl https against plaintext REST: exit 3, TLS failed" '[ $rc -eq 3 ] && grep -q "TLS with onebitd .* failed" "$TMP/t2.err"' "rc=$rc $(cat "$TMP/t2.err")"
check "plaintext onebitd says so" 'grep -q "(plaintext)" "$TMP/plain.log"'
stop_daemon

# --- addresses other than loopback -------------------------------------------------------------
start_tls any --grpc 0.0.0.0:0 --rest 0.0.0.0:0 --tls-cert "$P/server.pem" --tls-key "$P/server.key"
h=$(curl -sS --cacert "$P/ca.pem" "https://$REST/healthz" 2>&1)
check "0.0.0.0 with TLS: accepted and serving" '[ -n "$PID" ] && [ "$(echo "$h" | jq -r .status)" = SERVING ]' "DRC=$DRC $(cat "$TMP/any.log")"
stop_daemon
start_tls any2 --grpc 0.0.0.0:0 --rest 127.0.0.1:0
check "0.0.0.0 without TLS: refused (exit 2), naming TLS" '[ "$DRC" = 2 ] && grep -q "0.0.0.0:0 is not a loopback address.*--tls-cert" "$TMP/any2.log"' "DRC=$DRC $(cat "$TMP/any2.log")"
stop_daemon
start_tls any3 --grpc 127.0.0.1:0 --rest 127.0.0.1:0 --tls-cert "$P/server.pem" --tls-key "$P/server.key" --report-listen 0.0.0.0:0
check "the workers' plaintext port on 0.0.0.0 without --allow-plaintext: refused" '[ "$DRC" = 2 ] && grep -q "report-listen 0.0.0.0:0 is not a loopback" "$TMP/any3.log"' "DRC=$DRC $(cat "$TMP/any3.log")"
stop_daemon

# --- bad TLS flags: exit 2, the file named -----------------------------------------------------
flag_case() { # NAME PATTERN onebitd-TLS-options...
  local name=$1 pat=$2
  shift 2
  start_tls flags --grpc 127.0.0.1:0 --rest 127.0.0.1:0 "$@"
  check "$name: exit 2, says '$pat'" '[ "$DRC" = 2 ] && grep -qF -- "$pat" "$TMP/flags.log"' "DRC=$DRC $(cat "$TMP/flags.log")"
  stop_daemon
}
flag_case "--tls-cert without --tls-key" "--tls-cert needs --tls-key" --tls-cert "$P/server.pem"
flag_case "--tls-key without --tls-cert" "--tls-key needs --tls-cert" --tls-key "$P/server.key"
flag_case "a garbage certificate" "--tls-cert $P/garbage.pem: no PEM certificate" --tls-cert "$P/garbage.pem" --tls-key "$P/server.key"
flag_case "a garbage key" "--tls-key $P/garbage.pem: not an unencrypted PEM private key" --tls-cert "$P/server.pem" --tls-key "$P/garbage.pem"
flag_case "a key of another certificate" "--tls-key $P/client.key does not belong to the certificate in --tls-cert $P/server.pem" --tls-cert "$P/server.pem" --tls-key "$P/client.key"
flag_case "a missing certificate" "--tls-cert $TMP/none.pem: No such file" --tls-cert "$TMP/none.pem" --tls-key "$P/server.key"
cp "$P/server.key" "$TMP/open.key"
chmod 644 "$TMP/open.key"
flag_case "a key others can read" "--tls-key $TMP/open.key can be read by others (mode 644)" --tls-cert "$P/server.pem" --tls-key "$TMP/open.key"
flag_case "--tls-client-ca without TLS" "--tls-client-ca is for TLS" --tls-client-ca "$P/ca.pem"
flag_case "a garbage client CA" "--tls-client-ca $P/garbage.pem: no PEM certificate" --tls-cert "$P/server.pem" --tls-key "$P/server.key" --tls-client-ca "$P/garbage.pem"

# --- client certificates (mutual TLS) ----------------------------------------------------------
start_tls mtls --grpc 127.0.0.1:0 --rest 127.0.0.1:0 --tls-cert "$P/server.pem" --tls-key "$P/server.key" --tls-client-ca "$P/ca.pem"
check "onebitd with --tls-client-ca says so" 'grep -q "(TLS, client certificates required)" "$TMP/mtls.log"'
ctl "$TMP/m1" --server "$GRPC" --ca "$P/ca.pem" --cert "$P/client.pem" --key "$P/client.key" list; rc=$?
check "mTLS gRPC: with the client certificate" '[ $rc -eq 0 ]' "rc=$rc $(cat "$TMP/m1.err")"
ctl "$TMP/m2" --server "$GRPC" --ca "$P/ca.pem" list; rc=$?
check "mTLS gRPC: without one, refused" '[ $rc -ne 0 ]' "rc=$rc $(cat "$TMP/m2.err")"
ctl "$TMP/m3" --server "$GRPC" --ca "$P/ca.pem" --cert "$P/stranger.pem" --key "$P/stranger.key" list; rc=$?
check "mTLS gRPC: with another CA's client certificate, refused" '[ $rc -ne 0 ]' "rc=$rc $(cat "$TMP/m3.err")"
ctl "$TMP/m4" --rest "https://$REST" --ca "$P/ca.pem" --cert "$P/client.pem" --key "$P/client.key" list; rc=$?
check "mTLS REST: with the client certificate" '[ $rc -eq 0 ]' "rc=$rc $(cat "$TMP/m4.err")"
code=$(curl -s -o "$TMP/m5" -w '%{http_code}' --cacert "$P/ca.pem" -H "Authorization: Bearer $TOKEN" "https://$REST/v1/jobs")
check "mTLS REST: without one, refused" '[ "$code" != 200 ]' "got $code $(cat "$TMP/m5")"
code=$(curl -s -o "$TMP/m6" -w '%{http_code}' --cacert "$P/ca.pem" --cert "$P/stranger.pem" --key "$P/stranger.key" -H "Authorization: Bearer $TOKEN" "https://$REST/v1/jobs")
check "mTLS REST: another CA's client certificate, refused" '[ "$code" != 200 ]' "got $code $(cat "$TMP/m6")"
stop_daemon

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
