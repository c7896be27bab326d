#!/usr/bin/env bash
# `make demo`: seal a sample recording into a local S3 (moto server on loopback) under Object
# Lock, list and inspect it, open it with its identity, and show a wrong identity refused.
# Starts everything it needs and stops it on exit; keys live in a temporary directory that is
# removed on exit, and plaintext only ever goes through pipes.
set -euo pipefail

work="$(mktemp -d)"
moto_pid=""
cleanup() {
  [[ -n "$moto_pid" ]] && kill "$moto_pid" 2>/dev/null && wait "$moto_pid" 2>/dev/null || true
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

step "seal a sample into $store (production holds only the .pub)"
sample() {
  # The pricing story's inputs, as a recorder would see them at the call boundary.
  printf '{"event":0,"call":"socket.recv","result":"POST /orders {\\"items\\":[{\\"sku\\":\\"MUG-01\\",\\"price\\":49.99}],\\"promo\\":\\"STAFF100\\"}"}\n'
  printf '{"event":1,"call":"sqlite3.Cursor.fetchone","args":["STAFF100"],"result":[100]}\n'
  printf '{"event":2,"call":"time.time","result":1795000000.25}\n'
  printf '{"event":3,"call":"socket.send","args":["{\\"total_price\\": 0.00, \\"currency\\": \\"GBP\\"}"]}\n'
  for i in $(seq 4 3000); do printf '{"event":%d,"call":"time.monotonic","result":%d.5}\n' "$i" "$i"; done
}
sample | sealtrace seal --recipient "$work/keys/$run.pub" --run-id "$run" --output "$store" \
  --chunk-size 16384 --segment-size 65536

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

step "open with the run's identity and compare with what was sealed"
if cmp <(sealtrace open --identity "$work/keys/$run.key" "$store") <(sample); then
  echo "opened: identical to the sealed input ($(sample | wc -c) bytes)"
fi
head -n 2 < <(sealtrace open --identity "$work/keys/$run.key" "$store")

step "a wrong identity is refused (exit 4)"
sealtrace keygen --out "$work/keys" --name intruder >/dev/null
set +e
sealtrace open --identity "$work/keys/intruder.key" "$store" >/dev/null
code=$?
set -e
echo "exit code: $code"
[[ $code -eq 4 ]]

step "done: moto server stopped, keys removed"
