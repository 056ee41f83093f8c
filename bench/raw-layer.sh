#!/usr/bin/env bash
# The raw-layer benchmark (issue 4): preload a topic with Debezium Avro change events of a
# 10-column table, then time lakesink from start until its consumer group's lag is zero, which
# it reaches only once every file holding the records is uploaded to the S3 server. Then the
# peer (Iceberg's Kafka Connect sink, bench/peer-s3-sink.sh) reads the same topic, and both
# are printed side by side.
#
#   bench/raw-layer.sh                 RECORDS=5000000 PARTITIONS=8 by default
#   RECORDS=1000000 RUN_PEER=0 bench/raw-layer.sh     lakesink only
#   BENCH_TOPIC=t BUILD=0 LAKESINK_BIN=path bench/raw-layer.sh   another build, an earlier topic
#
# Needs the stack (dev/stack up). Release builds go to $CARGO_TARGET_DIR (or target/).
set -euo pipefail

RUN_PEER=${RUN_PEER:-1}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=bench/peer-s3-sink.sh
source "$here/peer-s3-sink.sh"
say() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }

RECORDS=${RECORDS:-5000000}
PARTITIONS=${PARTITIONS:-8}
TARGET=${CARGO_TARGET_DIR:-$root/target}
# Another build to time (an older commit's, to compare): BUILD=0 LAKESINK_BIN=path.
LAKESINK_BIN=${LAKESINK_BIN:-$TARGET/release/lakesink}
stamp=$(date +%s)
TOPIC=${BENCH_TOPIC:-bench-raw-$stamp}
work=$CACHE/bench/$stamp
mkdir -p "$work"

if [ "${BUILD:-1}" = 1 ]; then
  say "building release binaries"
  (cd "$root" && cargo build -q --release -p lakesink --bin lakesink -p lakesink-tests --example produce) \
    || die "cargo build failed"
fi
fetch >/dev/null

if [ -z "${BENCH_TOPIC:-}" ]; then
  say "producing $RECORDS records to $TOPIC ($PARTITIONS partitions)"
  "$TARGET/release/examples/produce" "$TOPIC" "$PARTITIONS" "$RECORDS" >&2
fi

# Segments close on their record count, so the last one closes with the last record.
per_partition=$(( (RECORDS + PARTITIONS - 1) / PARTITIONS ))
flush=$(( (per_partition + 4) / 5 ))
group=bench-lakesink-$stamp
# Per run: a topic timed again (BENCH_TOPIC) must not find the files of an earlier run, which
# the raw layer would resume from instead of writing them.
prefix=bench/lakesink/$TOPIC/$stamp
cat >"$work/lakesink.toml" <<T
[kafka]
brokers = "$BROKERS"
group-id = "$group"
topics = ["$TOPIC"]
properties = { "auto.commit.interval.ms" = "500", "fetch.max.bytes" = "104857600", "max.partition.fetch.bytes" = "10485760" }

[registry]
url = "$REGISTRY"

[raw]
url = "s3://$BUCKET/$prefix"
flush-size = $flush
codec = "snappy"

[raw.store]
endpoint = "$S3"
region = "us-east-1"
access-key-id = "$S3_KEY"
secret-access-key = "$S3_SECRET"
allow-http = true
T

say "lakesink: flush-size $flush, objects under s3://$BUCKET/$prefix/"
hz=$(getconf CLK_TCK)
t0=$(date +%s%3N)
RUST_LOG=warn "$LAKESINK_BIN" run --config "$work/lakesink.toml" 2>"$work/lakesink.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
out=$("$JAVA_BIN" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$KAFKA_LIBS/*:$TOOLS/classes" Lag \
  "$BROKERS" "$group" "$TOPIC" "$RECORDS" 3600) || { tail -n 20 "$work/lakesink.log" >&2; die "lag never reached 0"; }
read -r _ t1 done_records <<<"$out"
cpu=$(cpu_ticks "$pid")
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
kill -TERM "$pid"; wait "$pid" || die "lakesink did not stop cleanly; log $work/lakesink.log"
trap - EXIT
s3_list "$prefix" >"$work/objects.txt" || die "cannot list s3://$BUCKET/$prefix/"

python3 - "$done_records" "$t0" "$t1" "$cpu" "$hz" "$hwm" "$work/objects.txt" <<P | tee "$work/lakesink.txt"
import sys
recs, t0, t1, cpu, hz, hwm = (int(x) for x in sys.argv[1:7])
objs = [l.split(" ", 1) for l in open(sys.argv[7]).read().splitlines() if l.strip()]
data = [(int(s), k) for s, k in objs if k.endswith(".parquet")]
wall = (t1 - t0) / 1000
print("lakesink             raw layer (Parquet, snappy), release build")
print(f"records              {recs}")
print(f"wall seconds         {wall:.1f} (process start to consumer lag 0, every file uploaded)")
print(f"records/s            {recs / wall:.0f}")
print(f"CPU seconds          {cpu / hz:.1f} ({cpu / hz / (recs / 1e6):.1f} per million records)")
print(f"peak RSS             {hwm / 1024:.0f} MiB (VmHWM)")
print(f"parquet data files   {len(data)} ({sum(s for s, _ in data) / 1048576:.1f} MiB)")
P

if [ "$RUN_PEER" = 1 ]; then
  say "peer: the same topic"
  (TOPIC=$TOPIC PARTITIONS=$PARTITIONS EXPECTED_RECORDS=$RECORDS "$here/peer-s3-sink.sh" run) | tee "$work/peer.txt"
fi
say "figures kept in $work"
