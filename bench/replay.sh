#!/usr/bin/env bash
# The replay benchmark (issue 7): throughput of `lakesink replay` into PostgreSQL.
#   1. produce RECORDS Debezium change events of the 10-column table (MODE snapshot: `r` events of
#      distinct rows; mixed: 70% inserts, 25% updates, 5% deletes) to a topic of PARTITIONS;
#   2. `lakesink run` with [raw] only builds the raw layer (snappy Parquet on the stack's S3) until
#      its consumer group's lag is zero, i.e. every file is uploaded;
#   3. `lakesink replay` into an empty table of the stack's replica database, timed by
#      /usr/bin/time -v; then the table is counted and checksummed.
# It prints rows/s, wall and CPU seconds, peak RSS, and PostgreSQL's CPU meanwhile.
#
#   bench/replay.sh                      RECORDS=1000000 PARTITIONS=4 MODES="snapshot mixed"
#   PARALLELISM=2 BATCH_ROWS=50000 bench/replay.sh
#   STAMP=1764500000 bench/replay.sh     replay the raw layer of an earlier run again (no produce)
#
# Optional env: BUILD=0 (no cargo build), LAKESINK_BIN (the binary to time), KEEP_TABLES=1,
# TIMEOUT_SECONDS (lag wait, default 1800).
# Needs the stack (dev/stack up). Release builds go to $CARGO_TARGET_DIR (or target/).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=bench/peer-s3-sink.sh
source "$here/peer-s3-sink.sh"
say() { printf '[replay] %s\n' "$*" >&2; }
die() { printf '[replay] error: %s\n' "$*" >&2; exit 1; }

RECORDS=${RECORDS:-1000000}
PARTITIONS=${PARTITIONS:-4}
MODES=${MODES:-snapshot mixed}
PARALLELISM=${PARALLELISM:-4}
BATCH_ROWS=${BATCH_ROWS:-50000}
TIMEOUT=${TIMEOUT_SECONDS:-1800}
TARGET=${CARGO_TARGET_DIR:-$root/target}
# Another build to time (an older commit's, to compare): BUILD=0 LAKESINK_BIN=path.
LAKESINK_BIN=${LAKESINK_BIN:-$TARGET/release/lakesink}
PG_DB=replica
stamp=${STAMP:-$(date +%s)}
work=$CACHE/bench/replay-$stamp
mkdir -p "$work"
results=$work/results.txt
: >"$results"

export PGPASSWORD=$PG_PASSWORD PGOPTIONS="-c client_min_messages=warning"
psql_q() { psql -qAtX -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d "$PG_DB" -c "$1"; }
PG_PID=$(head -n 1 "$(psql_q 'SHOW data_directory' 2>/dev/null)/postmaster.pid" 2>/dev/null || true)
pg_ticks() {
  if [ -n "$PG_PID" ] && [ -r "/proc/$PG_PID/stat" ]; then awk '{print $14 + $15 + $16 + $17}' "/proc/$PG_PID/stat"; else echo 0; fi
}
hz=$(getconf CLK_TCK)

if [ "${BUILD:-1}" = 1 ]; then
  say "building release binaries"
  (cd "$root" && cargo build -q --release -p lakesink --bin lakesink -p lakesink-tests --example produce) \
    || die "cargo build failed"
fi
fetch >/dev/null

per_partition=$(( (RECORDS + PARTITIONS - 1) / PARTITIONS ))
flush=$(( (per_partition + 4) / 5 ))

raw_section() {
  cat <<T
[raw]
url = "s3://$BUCKET/bench/replay/$1"
flush-size = $flush
# Partitions of the mixed stream hold uneven counts: their last segment closes on the wall-clock
# schedule. (Not rotate-interval-ms: the records are 1 ms apart in record time, so a 2 s span
# cut every 500 records and made a raw layer of 2,000 small files.)
rotate-schedule-interval-ms = 5000
codec = "snappy"

[raw.store]
endpoint = "$S3"
region = "us-east-1"
access-key-id = "$S3_KEY"
secret-access-key = "$S3_SECRET"
allow-http = true
T
}

for mode in $MODES; do
  topic=bench-replay-$mode-$stamp
  if [ -z "${STAMP:-}" ]; then
    say "producing $RECORDS $mode records to $topic ($PARTITIONS partitions)"
    "$TARGET/release/examples/produce" "$topic" "$PARTITIONS" "$RECORDS" "$mode" >&2
    group=bench-replay-raw-$mode-$stamp
    cat >"$work/raw-$mode.toml" <<T
[kafka]
brokers = "$BROKERS"
group-id = "$group"
topics = ["$topic"]
properties = { "auto.commit.interval.ms" = "500" }

[registry]
url = "$REGISTRY"

$(raw_section "$topic")
T
    say "building the raw layer: lakesink run, flush-size $flush"
    RUST_LOG=warn "$LAKESINK_BIN" run --config "$work/raw-$mode.toml" 2>"$work/raw-$mode.log" &
    pid=$!
    "$JAVA_BIN" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$KAFKA_LIBS/*:$TOOLS/classes" Lag \
      "$BROKERS" "$group" "$topic" "$RECORDS" "$TIMEOUT" >/dev/null \
      || { kill "$pid"; tail -n 20 "$work/raw-$mode.log" >&2; die "the raw layer was never complete"; }
    kill -TERM "$pid"; wait "$pid" || die "lakesink run did not stop cleanly; log $work/raw-$mode.log"
  fi

  table=bench_replay_${mode}_$stamp
  group=bench-replay-$mode-$(date +%s)
  cat >"$work/replay-$mode.toml" <<T
[kafka]
brokers = "$BROKERS"
group-id = "$group"
topics = ["$topic"]

$(raw_section "$topic")

[replica]
url = "postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB"
table-name-format = "$table"
pool-size = $PARALLELISM
batch-max-rows = $BATCH_ROWS
T
  psql_q "DROP TABLE IF EXISTS public.\"$table\"" >/dev/null
  say "replay: $mode into public.$table, parallelism $PARALLELISM, $BATCH_ROWS rows per transaction"
  p0=$(pg_ticks)
  RUST_LOG=warn /usr/bin/time -v -o "$work/time-$mode.txt" "$LAKESINK_BIN" replay \
    --config "$work/replay-$mode.toml" --parallelism "$PARALLELISM" >"$work/summary-$mode.txt" 2>"$work/replay-$mode.log" \
    || { cat "$work/summary-$mode.txt" >&2; tail -n 20 "$work/replay-$mode.log" >&2; die "replay failed"; }
  sleep 1; p1=$(pg_ticks)
  rows=$(psql_q "SELECT count(*) FROM public.\"$table\"")
  sums=$(psql_q "SELECT coalesce(sum(id),0) || '/' || coalesce(sum(quantity),0) || '/' || coalesce(sum(price),0) FROM public.\"$table\"")
  python3 - "$mode" "$work/summary-$mode.txt" "$work/time-$mode.txt" "$p0" "$p1" "$hz" "$rows" "$sums" "$PARALLELISM" <<'P' | tee -a "$results"
import re, sys
mode, summary, timef, p0, p1, hz, rows, sums, par = sys.argv[1:10]
s = open(summary).read().splitlines()[0]
t = open(timef).read()
get = lambda k: re.search(re.escape(k) + r": (.*)", t).group(1).strip()
applied = int(re.search(r"(\d+) row\(s\) applied", s).group(1))
inner = float(re.search(r", ([\d.]+) s, ", s).group(1))
wall = get("Elapsed (wall clock) time (h:mm:ss or m:ss)")
parts = [float(x) for x in wall.split(":")]
wall_s = sum(x * 60 ** i for i, x in enumerate(reversed(parts)))
cpu = float(get("User time (seconds)")) + float(get("System time (seconds)"))
rss = int(get("Maximum resident set size (kbytes)")) / 1024
pg = (int(p1) - int(p0)) / int(hz)
print(f"replay {mode}: {applied} rows, parallelism {par}")
print(f"  rows/s             {applied / wall_s:,.0f} (process start to exit, {wall_s:.1f} s); {applied / inner:,.0f} replaying ({inner:.1f} s, after planning)")
print(f"  lakesink CPU       {cpu:.1f} s ({cpu / wall_s * 100:.0f}% of one core)")
print(f"  PostgreSQL CPU     {pg:.1f} s")
print(f"  peak RSS           {rss:.0f} MiB")
print(f"  table              {rows} rows, sum(id)/sum(quantity)/sum(price) {sums}")
print(f"  summary            {s}")
P
  [ "${KEEP_TABLES:-0}" = 1 ] || psql_q "DROP TABLE IF EXISTS public.\"$table\"" >/dev/null
  psql_q "DELETE FROM public.lakesink_offsets WHERE group_id = '$group'" >/dev/null
done
say "figures in $results"
