#!/usr/bin/env bash
# The raw-layer and lake-table benchmark (issues 4 and 21): preload a topic with Debezium Avro
# change events of a 10-column table, then time lakesink from start until its consumer group's
# lag is zero, which it reaches only once every file holding the records is uploaded to the S3
# server (raw layer) or committed to the Iceberg table (lake). Then the peer (Iceberg's Kafka
# Connect sink, bench/peer-s3-sink.sh) reads the same topic, and all are printed side by side.
#
#   bench/raw-layer.sh                 RECORDS=5000000 PARTITIONS=8 by default
#   RECORDS=1000000 RUN_PEER=0 bench/raw-layer.sh     lakesink only
#   RUN_RAW=0 bench/raw-layer.sh        the lake sink and the peer only (RUN_LAKE=0: no lake)
#   BENCH_TOPIC=t BUILD=0 LAKESINK_BIN=path bench/raw-layer.sh   another build, an earlier topic
#   SHAPE=wide bench/raw-layer.sh       the 32-column table, ~1.2 KB a record (10 columns: ~185 B)
#   CODEC=zstd bench/raw-layer.sh       every side's Parquet codec: snappy (default), zstd (the
#                                       published Confluent S3 sink figures'), gzip or none
#   FETCH=default RAW_OPTIONS='memory-budget-bytes = 134217728' bench/raw-layer.sh
#                                       lakesink's own fetch sizes (not the peer's), a [raw] key
#   KAFKA_PROPERTIES='"queued.min.messages" = "10000"' bench/raw-layer.sh   more consumer properties
#   INSTANCES=2 bench/raw-layer.sh      two lakesink processes in one group (CPU summed)
#   RECORDS=50000000 FLUSH_SIZE=125000 bench/raw-layer.sh   a 10x backlog, files as at 5M
#   LAKESINK_ENV='MALLOC_MMAP_THRESHOLD_=4194304' bench/raw-layer.sh   variables for the lakesink
#                                       processes only (that one: as the container image runs it)
#   RAW_DIR=/mnt/x bench/raw-layer.sh   the raw layer to a local directory (file://) instead of the
#                                       S3 server, whose CPU then no longer shares the machine
#   KEEP_OBJECTS=1 bench/raw-layer.sh   keep each side's files on the S3 server (by default they
#                                       are deleted once listed and counted)
#
# Needs the stack (dev/stack up). Release builds go to $CARGO_TARGET_DIR (or target/).
set -euo pipefail

RUN_PEER=${RUN_PEER:-1}
RUN_RAW=${RUN_RAW:-1}
RUN_LAKE=${RUN_LAKE:-1}
# The lake's commit interval, the peer's too (iceberg.control.commit.interval-ms).
COMMIT_INTERVAL_MS=${COMMIT_INTERVAL_MS:-10000}
export COMMIT_INTERVAL_MS
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=bench/peer-s3-sink.sh
source "$here/peer-s3-sink.sh"
say() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }

RECORDS=${RECORDS:-5000000}
SHAPE=${SHAPE:-narrow}
case $SHAPE in narrow) shape_arg=() ;; wide) shape_arg=(wide) ;; *) die "SHAPE is narrow or wide, not $SHAPE" ;; esac
PARTITIONS=${PARTITIONS:-8}
# One Parquet codec for lakesink's raw layer, its lake table and the peer.
CODEC=${CODEC:-snappy}
# Not lz4: lakesink's is LZ4_RAW, parquet-java's the older Hadoop framing, not one codec.
case $CODEC in snappy|zstd|gzip|none) ;; *) die "CODEC is snappy, zstd, gzip or none, not $CODEC" ;; esac
export CODEC
# lakesink processes in the consumer group (the scaling measurement): each takes its share of
# the partitions, as separate machines would.
INSTANCES=${INSTANCES:-1}
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
  say "producing $RECORDS records of the $SHAPE table to $TOPIC ($PARTITIONS partitions)"
  mkdir -p "$CACHE/bench/topics"
  "$TARGET/release/examples/produce" "$TOPIC" "$PARTITIONS" "$RECORDS" "${shape_arg[@]}" | tee /dev/stderr \
    | awk '/^bytes / {print $2}' >"$CACHE/bench/topics/$TOPIC.bytes"
  echo "$SHAPE" >"$CACHE/bench/topics/$TOPIC.shape"
fi
# For bench/summary.py: the shape the topic was produced with (narrow before it was kept).
cat "$CACHE/bench/topics/$TOPIC.shape" 2>/dev/null >"$work/shape" || echo narrow >"$work/shape"

# The bytes of the topic's keys and values as produced (the producer compresses with lz4, so
# the broker's log is smaller), for MB/s: what the published S3 sink figures count. Kept beside
# the topic's name for later runs on it (BENCH_TOPIC).
TOPIC_BYTES=$(cat "$CACHE/bench/topics/$TOPIC.bytes" 2>/dev/null || true)
TOPIC_BYTES=${TOPIC_BYTES:-0}
[ "$TOPIC_BYTES" != 0 ] || say "no byte count for $TOPIC (produced before the bench kept them): no MB/s"

# Segments close on their record count, so the last one closes with the last record.
per_partition=$(( (RECORDS + PARTITIONS - 1) / PARTITIONS ))
flush=$(( (per_partition + 4) / 5 ))
# Another flush-size (the same files whatever RECORDS, to compare backlogs): FLUSH_SIZE=125000.
flush=${FLUSH_SIZE:-$flush}

# The peer's fetch sizes (bench/peer-s3-sink.sh) by default, so both read alike; FETCH=default
# leaves lakesink's own (consumer/src/kafka.rs), the configuration its memory figures are for.
fetch_props=', "fetch.max.bytes" = "104857600", "max.partition.fetch.bytes" = "10485760"'
[ "${FETCH:-peer}" = default ] && fetch_props=
# More consumer properties, TOML: KAFKA_PROPERTIES='"queued.min.messages" = "10000"'.
[ -z "${KAFKA_PROPERTIES:-}" ] || fetch_props="$fetch_props, $KAFKA_PROPERTIES"
RAW_OPTIONS=${RAW_OPTIONS:-}

# config NAME SECTION: a config for one timed run, under its own group.
config() {
  cat >"$work/$1.toml" <<T
[kafka]
brokers = "$BROKERS"
group-id = "bench-lakesink-$1-$stamp"
topics = ["$TOPIC"]
properties = { "auto.commit.interval.ms" = "500"$fetch_props }

[registry]
url = "$REGISTRY"

$2
T
}

store_section() {
  cat <<T
[$1.store]
endpoint = "$S3"
region = "us-east-1"
access-key-id = "$S3_KEY"
secret-access-key = "$S3_SECRET"
allow-http = true
T
}

# timed NAME TITLE: runs INSTANCES lakesink processes (one group) on $work/NAME.toml until the
# group's lag is 0; prints figures (CPU summed over the processes, peak RSS the largest one's).
timed() {
  local name=$1 title=$2 hz t0 pids=() out t1 done_records cpu=0 hwm=0 i h
  hz=$(getconf CLK_TCK)
  t0=$(date +%s%3N)
  for i in $(seq 1 "$INSTANCES"); do
    cp "$work/$name.toml" "$work/$name.$i.toml"
    # Each instance its own metrics port (the default one's 127.0.0.1:9400).
    [ "$INSTANCES" = 1 ] || printf '\n[service]\nhttp-listen = "127.0.0.1:%d"\n' $((9410 + i)) >>"$work/$name.$i.toml"
    # shellcheck disable=SC2086  # LAKESINK_ENV: NAME=value words, split on purpose
    env ${LAKESINK_ENV:-} RUST_LOG=warn "$LAKESINK_BIN" run --config "$work/$name.$i.toml" \
      2>"$work/$name.$i.log" &
    pids+=($!)
  done
  # shellcheck disable=SC2064
  trap "kill ${pids[*]} 2>/dev/null || true" EXIT
  out=$("$JAVA_BIN" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$KAFKA_LIBS/*:$TOOLS/classes" Lag \
    "$BROKERS" "bench-lakesink-$name-$stamp" "$TOPIC" "$RECORDS" 3600) \
    || { tail -n 20 "$work/$name".*.log >&2; die "lag never reached 0"; }
  read -r _ t1 done_records <<<"$out"
  for i in "${!pids[@]}"; do
    pid=${pids[$i]}
    [ -e "/proc/$pid/stat" ] || { tail -n 20 "$work/$name.$((i + 1)).log" >&2; die "instance $((i + 1)) exited before the end"; }
    cpu=$((cpu + $(cpu_ticks "$pid")))
    h=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    [ "$h" -gt "$hwm" ] && hwm=$h
  done
  kill -TERM "${pids[@]}"
  for pid in "${pids[@]}"; do
    wait "$pid" || die "lakesink did not stop cleanly; logs $work/$name.*.log"
  done
  trap - EXIT
  [ "$INSTANCES" = 1 ] || title="$title, $INSTANCES instances in one group"
  python3 - "$done_records" "$t0" "$t1" "$cpu" "$hz" "$hwm" "$TOPIC_BYTES" "$RECORDS" "$title" <<P | tee "$work/$name.txt"
import sys
recs, t0, t1, cpu, hz, hwm, topic_bytes, total = (int(x) for x in sys.argv[1:9])
wall = (t1 - t0) / 1000
print(f"lakesink             {sys.argv[9]}, release build")
print(f"records              {recs}")
print(f"wall seconds         {wall:.1f} (process start to consumer lag 0)")
print(f"records/s            {recs / wall:.0f}")
if topic_bytes:
    print(f"MB/s                 {topic_bytes * recs / total / wall / 1e6:.1f} (keys and values as produced)")
print(f"CPU seconds          {cpu / hz:.1f} ({cpu / hz / (recs / 1e6):.1f} per million records)")
print(f"peak RSS             {hwm / 1024:.0f} MiB (VmHWM)")
P
}

if [ "$RUN_RAW" = 1 ]; then
  # Per run: a topic timed again (BENCH_TOPIC) must not find the files of an earlier run, which
  # the raw layer would resume from instead of writing them.
  prefix=bench/lakesink/$TOPIC/$stamp
  if [ -n "${RAW_DIR:-}" ]; then
    # lakesink reads file://x as /x: the directory made absolute, and fit for a TOML string.
    RAW_DIR=$(realpath -m "$RAW_DIR")
    case $RAW_DIR in *'"'* | *'\'*) die "RAW_DIR may not hold a quote or a backslash: $RAW_DIR" ;; esac
    out_dir=$RAW_DIR/$prefix
    mkdir -p "$out_dir" || die "cannot create $out_dir"
    url="file://$out_dir" store=""
  else
    url="s3://$BUCKET/$prefix" store=$(store_section raw)
  fi
  config raw "[raw]
url = \"$url\"
flush-size = $flush
codec = \"$CODEC\"
$RAW_OPTIONS

$store"
  say "lakesink raw layer: flush-size $flush, files under $url/"
  timed raw "raw layer (Parquet, $CODEC${RAW_DIR:+, local directory})"
  if [ -n "${RAW_DIR:-}" ]; then
    find "$out_dir" -type f -printf '%s %P\n' >"$work/objects.txt"
  else
    s3_list "$prefix" >"$work/objects.txt" || die "cannot list s3://$BUCKET/$prefix/"
  fi
  python3 - "$work/objects.txt" <<P | tee -a "$work/raw.txt"
import sys
objs = [l.split(" ", 1) for l in open(sys.argv[1]).read().splitlines() if l.strip()]
data = [(int(s), k) for s, k in objs if k.endswith(".parquet")]
print(f"parquet data files   {len(data)} ({sum(s for s, _ in data) / 1048576:.1f} MiB)")
P
  if [ -n "${RAW_DIR:-}" ]; then
    if [ "${KEEP_OBJECTS:-0}" != 1 ]; then
      rm -rf "$out_dir"
      (cd "$RAW_DIR" && rmdir -p --ignore-fail-on-non-empty "$(dirname "$prefix")")
      say "deleted $out_dir (KEEP_OBJECTS=1 keeps it)"
    fi
  else
    s3_drop_listed "$work/objects.txt"
  fi
fi

if [ "$RUN_LAKE" = 1 ]; then
  # The SQL catalog in the replica PostgreSQL, a catalog name and warehouse per run; every
  # other [lake] key at its default but the codec (the peer's) and the commit interval.
  lake_prefix=bench/lake/$TOPIC/$stamp
  config lake "[lake]
catalog-uri = \"postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/replica\"
catalog-name = \"bench_$stamp\"
warehouse = \"s3://$BUCKET/$lake_prefix\"
namespace = \"bench\"
commit-interval-ms = $COMMIT_INTERVAL_MS
codec = \"$CODEC\"

$(store_section lake)"
  say "lakesink lake table: SQL catalog bench_$stamp, warehouse s3://$BUCKET/$lake_prefix/"
  timed lake "lake table (Iceberg v2, Parquet $CODEC, SQL catalog, commit every $COMMIT_INTERVAL_MS ms)"
  s3_list "$lake_prefix" >"$work/lake-objects.txt" || die "cannot list s3://$BUCKET/$lake_prefix/"
  python3 - "$work/lake-objects.txt" <<P | tee -a "$work/lake.txt"
import sys
objs = [l.split(" ", 1) for l in open(sys.argv[1]).read().splitlines() if l.strip()]
data = [(int(s), k) for s, k in objs if k.endswith(".parquet")]
print(f"objects              {len(objs)} ({sum(int(s) for s, _ in objs) / 1048576:.1f} MiB)")
print(f"parquet data files   {len(data)} ({sum(s for s, _ in data) / 1048576:.1f} MiB)")
P
  s3_drop_listed "$work/lake-objects.txt"
fi

if [ "$RUN_PEER" = 1 ]; then
  say "peer: the same topic"
  (TOPIC=$TOPIC PARTITIONS=$PARTITIONS EXPECTED_RECORDS=$RECORDS TOPIC_BYTES=$TOPIC_BYTES "$here/peer-s3-sink.sh" run) | tee "$work/peer.txt"
fi

# Ratios of what ran: records/s and CPU seconds per million records.
python3 - "$work" <<'P'
import os, re, sys
def read(name):
    p = os.path.join(sys.argv[1], name + ".txt")
    if not os.path.exists(p):
        return None
    t = open(p).read()
    recs = int(re.search(r"^records\s+(\d+)", t, re.M).group(1))
    rate = float(re.search(r"^records/s\s+(\d+)", t, re.M).group(1))
    cpu = float(re.search(r"CPU seconds\s+([\d.]+)", t).group(1))
    return rate, cpu / (recs / 1e6)
raw, lake, peer = read("raw"), read("lake"), read("peer")
print()
if lake and peer:
    print(f"lake / peer          {lake[0] / peer[0]:.1f}x records/s, {lake[1] / peer[1]:.2f}x CPU seconds per million")
if lake and raw:
    print(f"lake / raw layer     {lake[0] / raw[0]:.2f}x records/s, {lake[1] / raw[1]:.2f}x CPU seconds per million")
if raw and peer:
    print(f"raw layer / peer     {raw[0] / peer[0]:.1f}x records/s, {raw[1] / peer[1]:.2f}x CPU seconds per million")
P
say "figures kept in $work"
