#!/usr/bin/env bash
# Run the generated API tests of OpenPAI's JavaScript SDK (npm @microsoft/openpai-js-sdk),
# unchanged, against a platform started here with `pai up`.
#
#   bash bench/openpai_sdk.sh            # prints mocha's summary: passing / failing / pending
#   SDK_VERSION=0.1.5 KEEP=1 bash bench/openpai_sdk.sh
#
# Needs node and npm (the SDK and its test tools come from the npm registry into a temporary
# directory; nothing is installed into the repository). The SDK generates its test cases from
# its own swagger, which refers to the job protocol's schema by URL; without internet access
# that reference is pointed at a local copy (PROTOCOL_SCHEMA, the OpenPAI reference next to
# this checkout), the only change made to what the SDK runs. The cluster is given to the tests
# the way the SDK reads one: the first entry of its .tests/clusters.json.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SDK_VERSION="${SDK_VERSION:-0.1.5}"
PROTOCOL_SCHEMA="${PROTOCOL_SCHEMA:-$ROOT/../shared/anchors/openpai/protocol/schema.yaml}"
PAI="${PAI:-$ROOT/.venv/bin/pai}"
PASSWORD="sdk-bench-$RANDOM$RANDOM"

command -v node >/dev/null && command -v npm >/dev/null || { echo "skipped: node and npm are needed" >&2; exit 0; }
# The SDK's own tests build some clients with `https: true` whatever the cluster says, so the
# platform is reached through a TLS front (socat, a throw-away self-signed certificate).
command -v socat >/dev/null && command -v openssl >/dev/null || { echo "skipped: socat and openssl are needed" >&2; exit 0; }
[ -f "$PROTOCOL_SCHEMA" ] || { echo "skipped: no job protocol schema at $PROTOCOL_SCHEMA" >&2; exit 0; }

WORK="$(mktemp -d /tmp/openpai-sdk.XXXXXX)"
PAI_PID=""
TLS_PID=""
cleanup() {
  if [ -n "$TLS_PID" ]; then kill -TERM "$TLS_PID" 2>/dev/null || true; wait "$TLS_PID" 2>/dev/null || true; fi
  if [ -n "$PAI_PID" ]; then kill -TERM "$PAI_PID" 2>/dev/null || true; wait "$PAI_PID" 2>/dev/null || true; fi
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

cd "$WORK"
npm init -y >/dev/null 2>&1
npm install --no-audit --no-fund --loglevel=error \
  "@microsoft/openpai-js-sdk@$SDK_VERSION" mocha@8 chai@4 dirty-chai@2 ajv@6 nock@12 >/dev/null
SDK="$WORK/node_modules/@microsoft/openpai-js-sdk/lib"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT="$(free_port)"
TLS_PORT="$(free_port)"
# The cluster first: the generated cases embed its address and user name.
cat >"$SDK/.tests/clusters.json" <<JSON
[{"alias": "local", "rest_server_uri": "127.0.0.1:$TLS_PORT/rest-server", "username": "admin",
  "password": "$PASSWORD", "token": "", "https": true}]
JSON
sed "s#https://raw.githubusercontent.com/microsoft/openpai-protocol/master/schemas/v2/schema.yaml#$PROTOCOL_SCHEMA#" \
  "$SDK/src/api/v2/swagger.yaml" >"$WORK/swagger.yaml"
node "$SDK/tests/common/apiTestCaseGenerator.js" -- "$WORK/swagger.yaml" "$SDK/.tests/apiTestCase.json" >/dev/null

PAI_ADMIN_PASSWORD="$PASSWORD" "$PAI" up --port "$PORT" --data-dir "$WORK/pai" >"$WORK/pai.log" 2>&1 &
PAI_PID=$!
for _ in $(seq 1 120); do
  curl -fs "http://127.0.0.1:$PORT/api/v2/info" >/dev/null 2>&1 && break
  sleep 0.5
done
curl -fs "http://127.0.0.1:$PORT/api/v2/info" >/dev/null || { echo "pai up did not answer; see $WORK/pai.log" >&2; exit 1; }
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 \
  -keyout "$WORK/tls.key" -out "$WORK/tls.crt" >/dev/null 2>&1
cat "$WORK/tls.key" "$WORK/tls.crt" >"$WORK/tls.pem"
socat "OPENSSL-LISTEN:$TLS_PORT,bind=127.0.0.1,reuseaddr,fork,cert=$WORK/tls.pem,verify=0" \
  "TCP:127.0.0.1:$PORT" 2>"$WORK/socat.log" &
TLS_PID=$!
for _ in $(seq 1 40); do
  curl -kfs "https://127.0.0.1:$TLS_PORT/rest-server/api/v2/info" >/dev/null 2>&1 && break
  sleep 0.25
done

# The trailing slash the SDK sends, by hand: POST .../users/ creates a user as POST .../users does.
TOKEN="$(curl -fs -X POST "http://127.0.0.1:$PORT/rest-server/api/v2/authn/basic/login" \
  -H 'Content-Type: application/json' -d "{\"username\": \"admin\", \"password\": \"$PASSWORD\"}" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')"
echo "curl -X POST /rest-server/api/v2/users/ (trailing slash): $(curl -s -o /dev/null -w '%{http_code}' \
  -X POST "http://127.0.0.1:$PORT/rest-server/api/v2/users/" -H "Authorization: Bearer $TOKEN" \
  -H 'Content-Type: application/json' -d '{"username": "slash_user", "password": "slash-pw-1"}')"
curl -fs "http://127.0.0.1:$PORT/api/v2/users/slash_user" -H "Authorization: Bearer $TOKEN" && echo
cd "$WORK/node_modules/@microsoft/openpai-js-sdk"
NODE_TLS_REJECT_UNAUTHORIZED=0 "$WORK/node_modules/.bin/mocha" "lib/tests/api_tests/v2/api.v2.spec.js" -t 20000 --reporter "${REPORTER:-spec}" || true
