#!/usr/bin/env bash
# `make demo`: record the £0.00 checkout job into a local S3 (moto server on loopback) under
# Object Lock, list and inspect the recording, take the job's inputs away, replay it bit-exact,
# and show a wrong identity refused.
# Starts everything it needs and stops it on exit; keys live in a temporary directory that is
# removed on exit, and plaintext only ever goes through pipes.
set -euo pipefail

work="$(mktemp -d)"
moto_pid=""
http_pid=""
cleanup() {
  [[ -n "$moto_pid" ]] && kill "$moto_pid" 2>/dev/null && wait "$moto_pid" 2>/dev/null || true
  [[ -n "$http_pid" ]] && kill "$http_pid" 2>/dev/null && wait "$http_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

port="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
python -m moto.server -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
moto_pid=$!
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo \
  AWS_DEFAULT_REGION=us-east-1
for _ in $(seq 100); do
  python -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null && break
  sleep 0.1
done

bucket=sealtrace-demo
run=run-0001
store="s3://$bucket/acme/checkout-api/$run"

step "local S3 (moto) on $AWS_ENDPOINT_URL: a versioned bucket with Object Lock"
python - "$bucket" <<'PY'
import sys, boto3
s3 = boto3.client("s3")
s3.create_bucket(Bucket=sys.argv[1], ObjectLockEnabledForBucket=True)
print(f"created {sys.argv[1]}: object lock", s3.get_object_lock_configuration(Bucket=sys.argv[1])["ObjectLockConfiguration"]["ObjectLockEnabled"])
PY

step "a per-run key pair (the server's key service will mint these)"
sealtrace keygen --out "$work/keys" --name "$run"

step "the checkout job's inputs: an order over HTTP, a promotion in SQLite"
app="$(cd "$(dirname "$0")/../../examples/pricing" && pwd)"
python "$app/serve_inputs.py" "$work/inputs" >"$work/http.port" &
http_pid=$!
for _ in $(seq 100); do [ -s "$work/http.port" ] && break; sleep 0.1; done
http_port="$(head -1 "$work/http.port")"
echo "order: $(cat "$work/inputs/order.json")"

step "record the checkout job into $store (production holds only the .pub)"
sealtrace record --recipient "$work/keys/$run.pub" --output "$store" --run-id "$run" \
  --app-root "$app" -- python "$app/app.py" "http://127.0.0.1:$http_port/order.json" \
  "$work/inputs/promotions.db"

step "take the inputs away: stop the HTTP server, delete the database"
kill "$http_pid"; wait "$http_pid" 2>/dev/null || true
rm -rf "$work/inputs"
echo "inputs gone"

step "list: the objects in the bucket and their retention"
python - "$bucket" <<'PY'
import sys, boto3
s3 = boto3.client("s3")
for obj in s3.list_objects_v2(Bucket=sys.argv[1])["Contents"]:
    head = s3.head_object(Bucket=sys.argv[1], Key=obj["Key"])
    print(f'{obj["Key"]:45} {obj["Size"]:>7} B  {head["ObjectLockMode"]} until {head["ObjectLockRetainUntilDate"]:%Y-%m-%d}')
PY

step "inspect (no key needed)"
sealtrace inspect "$store"

step "replay in the hardened sandbox (the default): every external call served from the recording and checked"
sealtrace replay "$store" --identity "$work/keys/$run.key"

step "why was the customer charged £0.00? trace order.total_price back to its origin"
sealtrace trace "$store" --identity "$work/keys/$run.key" \
  --at routes/orders.py:4 --var order.total_price --depth 12

step "and forward: where did the promotions read (the fetchone result) go?"
event="$(sealtrace trace "$store" --identity "$work/keys/$run.key" --at routes/orders.py:4 \
  --var order.total_price --depth 12 --json | python -c '
import json, sys
def walk(node):
    origin = node.get("origin") or {}
    if origin.get("call") == "sqlite3.Cursor.fetchone":
        return origin["event"]
    return next((e for e in map(walk, node["inputs"]) if e is not None), None)
print(walk(json.load(sys.stdin)["root"]))')"
sealtrace flows "$store" --identity "$work/keys/$run.key" --from "event:$event"

step "a wrong identity is refused (exit 4)"
sealtrace keygen --out "$work/keys" --name intruder >/dev/null
set +e
sealtrace replay "$store" --identity "$work/keys/intruder.key" >/dev/null
code=$?
set -e
echo "exit code: $code"
[[ $code -eq 4 ]]

step "done: moto server stopped, keys removed"
