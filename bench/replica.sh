#!/usr/bin/env bash
# The replica benchmark (issue 5): lakesink's PostgreSQL replica against the Debezium JDBC sink
# connector on the same topics and the same PostgreSQL (the stack's replica database), both
# upserting by the record key with deletes applied and basic schema evolution:
#   (a) snapshot: RECORDS `r` events of distinct rows;
#   (b) mixed: RECORDS events, 70% inserts of new rows, 25% updates, 5% deletes of earlier rows.
# Each sink is timed from its start (lakesink: process start; JDBC sink: connector creation on a
# freshly started worker) until its consumer group's committed offsets reach the end of the
# topic (bench/peer/Lag.java, polling every 50 ms; it is started, and has polled once, before the
# sink starts, so that its JVM start-up does not take CPU from the sink being timed). lakesink commits a Kafka offset only once the rows are committed
# in PostgreSQL; Connect commits the JDBC sink's offsets after its flush. Then both tables are
# counted and checksummed, and the figures are printed side by side.
#
#   bench/replica.sh                       RECORDS=1000000 PARTITIONS=4 MODES="snapshot mixed"
#   JDBC_BATCH_SIZES="500 5000" bench/replica.sh    the JDBC sink at each batch.size (default 500)
#   bench/replica.sh fetch                 only download the JDBC sink (~/.cache/lakesink/peer)
#
# Optional env: STAMP (reuse the topics bench-replica-MODE-STAMP of an earlier run instead of
# producing), LAKESINK=0 or JDBC=0 (skip a side), BUILD=0 (no cargo build), LAKESINK_BIN (the
# binary to time), KEEP_TABLES=1 (keep
# the tables in the replica database), TIMEOUT_SECONDS (per run, default 1800), KAFKA_PROPERTIES
# (more lakesink consumer properties, TOML: '"fetch.max.bytes" = "104857600"'), JDBC_CONFIG (more
# JDBC connector settings, JSON: '"consumer.override.fetch.max.bytes": "104857600"'),
# REPLICA_CONFIG (more lakesink [replica] settings, TOML lines: 'delete-mode = "soft"'),
# LAKESINK_ENV (variables for the lakesink process only, NAME=value words: 'MALLOC_MMAP_THRESHOLD_=4194304'
# runs it as the container image does), LAKESINK_LABEL (its name in the report, default lakesink) and LAKE=1 (also time lakesink
# writing the same topics to an upsert lake table: [lake] mode = "upsert", SQL catalog in the
# replica database, files on the stack's S3, every other key at its default; its rows and
# checksum are read by Spark afterwards, not timed: bench/lake_checksum.py). LAKE_CONFIG: more
# [lake] lines, default 'commit-interval-ms = 1000': the tail of a backlog smaller than a
# sixteenth of commit-bytes waits for the interval (60 s by default), which would be timed).
# With LAKE=1, COMPACT=1 (the default) also times a Spark scan of the table before and after
# `lakesink lake maintain` compacts it, and the compaction itself.
# Needs the stack (dev/stack up). The JDBC sink runs in its own standalone Connect worker on
# 127.0.0.1:8085 (the Iceberg peer's is :8084, the project's :8083; neither is touched).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=bench/peer-s3-sink.sh
source "$here/peer-s3-sink.sh"
say() { printf '[replica] %s\n' "$*" >&2; }
die() { printf '[replica] error: %s\n' "$*" >&2; exit 1; }

# The Debezium JDBC sink: 3.6.1.Final, the stack's Debezium, is not on Maven Central (its
# newest there is 3.6.0.Final); see bench/peer/jdbc-pom.xml.
JDBC_VERSION=3.6.0.Final
JDBC_PLUGINS=$PEER/debezium-jdbc-$JDBC_VERSION-plugins
RUN=$PEER/run-jdbc          # worker_pid and worker_down of peer-s3-sink.sh use it
WORKER_PORT=8085
PG_DB=replica

RECORDS=${RECORDS:-1000000}
PARTITIONS=${PARTITIONS:-4}
MODES=${MODES:-snapshot mixed}
BATCH_SIZES=${JDBC_BATCH_SIZES:-500}
TIMEOUT=${TIMEOUT_SECONDS:-1800}
TARGET=${CARGO_TARGET_DIR:-$root/target}
# Another build to time (an older commit's, to compare): BUILD=0 LAKESINK_BIN=path.
LAKESINK_BIN=${LAKESINK_BIN:-$TARGET/release/lakesink}
stamp=${STAMP:-$(date +%s)}
work=$CACHE/bench/replica-$stamp-$(date +%s)
results=$work/results.tsv
hz=$(getconf CLK_TCK)

export PGPASSWORD=$PG_PASSWORD PGOPTIONS="-c client_min_messages=warning"
psql_q() { psql -qAtX -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d "$PG_DB" -c "$1"; }
# PostgreSQL's CPU: the postmaster's own ticks and those of its exited children (the backends of
# a sink, once it disconnects; autovacuum workers; anything else using the server meanwhile).
PG_PID=$(head -n 1 "$(psql_q 'SHOW data_directory' 2>/dev/null)/postmaster.pid" 2>/dev/null || true)
pg_ticks() {
  if [ -n "$PG_PID" ] && [ -r "/proc/$PG_PID/stat" ]; then awk '{print $14 + $15 + $16 + $17}' "/proc/$PG_PID/stat"; else echo 0; fi
}

jdbc_fetch() {
  fetch >/dev/null   # kafka-tools and the Lag poller (and the Iceberg peer, cached)
  [ -f "$JDBC_PLUGINS/.done" ] && return 0
  say "resolving the Debezium JDBC sink $JDBC_VERSION and the Apicurio converter from Maven Central"
  rm -rf "$JDBC_PLUGINS"; mkdir -p "$JDBC_PLUGINS/debezium-connector-jdbc"
  "${MVN[@]}" -f "$here/peer/jdbc-pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DexcludeGroupIds=org.apache.kafka,com.fasterxml.jackson.core -DoutputDirectory="$JDBC_PLUGINS/debezium-connector-jdbc" \
    >"$PEER/mvn-jdbc.log" 2>&1 || die "resolving the JDBC sink failed, see $PEER/mvn-jdbc.log"
  touch "$JDBC_PLUGINS/.done"
}

jdbc_worker_up() {
  mkdir -p "$RUN"
  worker_down >/dev/null 2>&1 || true
  port_open $WORKER_PORT && die "port $WORKER_PORT is taken by another process"
  rm -f "$RUN/standalone.offsets"
  cat >"$RUN/worker.properties" <<E
bootstrap.servers=$BROKERS
offset.storage.file.filename=$RUN/standalone.offsets
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:$WORKER_PORT
rest.advertised.host.name=127.0.0.1
plugin.path=$JDBC_PLUGINS
key.converter=org.apache.kafka.connect.converters.ByteArrayConverter
value.converter=org.apache.kafka.connect.converters.ByteArrayConverter
connector.client.config.override.policy=All
E
  # The same JVM settings as the Iceberg peer's worker (Kafka's defaults, 2 GiB heap).
  setsid "$JAVA_BIN" -Xms256m -Xmx2g -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="file:$here/peer/log4j2.properties" \
    -cp "$KAFKA_LIBS/*" org.apache.kafka.connect.cli.ConnectStandalone "$RUN/worker.properties" \
    >"$RUN/worker.log" 2>&1 </dev/null &
  echo $! >"$RUN/worker.pid"
  local deadline=$((SECONDS + 180))
  until curl -fsS "http://127.0.0.1:$WORKER_PORT/connector-plugins" 2>/dev/null | grep -q JdbcSinkConnector; do
    worker_pid >/dev/null || { tail -n 30 "$RUN/worker.log" >&2; die "the JDBC worker exited; log $RUN/worker.log"; }
    [ $SECONDS -lt $deadline ] || die "the JDBC worker is not ready after 180 s; log $RUN/worker.log"
    sleep 1
  done
}

# lag_start GROUP TOPIC: starts the lag poller (pid in LAG_PID), which writes "lag-zero EPOCH_MS
# RECORDS" to $work/lag.out at lag 0, and returns once it has polled once: the sink under test
# then starts with the poller's JVM warm, not competing with its start-up for the two cores.
lag_start() {
  rm -f "$work/lag.ready" "$work/lag.out"
  "$JAVA_BIN" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$KAFKA_LIBS/*:$TOOLS/classes" Lag \
    "$BROKERS" "$1" "$2" "$RECORDS" "$TIMEOUT" "$work/lag.ready" >"$work/lag.out" &
  LAG_PID=$!
  local deadline=$((SECONDS + 60))
  until [ -e "$work/lag.ready" ]; do
    kill -0 "$LAG_PID" 2>/dev/null || die "the lag poller exited before its first poll"
    [ $SECONDS -lt $deadline ] || die "the lag poller did not poll within 60 s"
    sleep 0.05
  done
}

delete_group() {
  "$JAVA_BIN" -Xmx128m -cp "$KAFKA_LIBS/*:$TOOLS/*" org.apache.kafka.tools.consumer.group.ConsumerGroupCommand \
    --bootstrap-server "$BROKERS" --delete --group "$1" >/dev/null 2>&1 || true
}

# record MODE SINK TABLE T0 T1 CPU_TICKS HWM_KB PG_TICKS: one line of results.tsv.
record() {
  local rows sums
  rows=$(psql_q "SELECT count(*) FROM public.\"$3\"") || rows=missing
  sums=$(psql_q "SELECT coalesce(sum(id),0) || '/' || coalesce(sum(quantity),0) || '/' || coalesce(sum(price),0) || '/' || count(*) FILTER (WHERE status = 'paid') FROM public.\"$3\"") || sums=-
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$RECORDS" "$(( $5 - $4 ))" "$6" "$7" "$rows" "$sums" "$3" "$8" >>"$results"
  [ "${KEEP_TABLES:-0}" = 1 ] || psql_q "DROP TABLE IF EXISTS public.\"$3\", public.\"${3}_history\"" >/dev/null || true
}

# consumer_sections GROUP TOPIC: the [kafka] and [registry] sections of a timed lakesink.
consumer_sections() {
  cat <<T
[kafka]
brokers = "$BROKERS"
group-id = "$1"
topics = ["$2"]
properties = { "auto.commit.interval.ms" = "500"${KAFKA_PROPERTIES:+, $KAFKA_PROPERTIES} }

[registry]
url = "$REGISTRY"

T
}

run_lakesink() {
  local mode=$1 topic=$2 table="bench_lakesink_${1}_$stamp" group="bench-replica-lakesink-$1-$(date +%s)"
  { consumer_sections "$group" "$topic"; cat <<T
[replica]
url = "postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB"
table-name-format = "$table"
${REPLICA_CONFIG:-}
T
  } >"$work/lakesink-$mode.toml"
  # With history tables on (REPLICA_CONFIG='mode = "both"'), theirs too.
  psql_q "DROP TABLE IF EXISTS public.\"$table\", public.\"${table}_history\"" >/dev/null
  say "lakesink: $mode, table public.$table"
  timed_lakesink "$mode" "$topic" "$group" "$work/lakesink-$mode.toml" "$work/lakesink-$mode.log"
  record "$mode" "${LAKESINK_LABEL:-lakesink}" "$table" "$T0" "$T1" "$CPU" "$HWM" "$PG"
  delete_group "$group"
}

# The upsert lake table of the same topic: rows and checksum as Spark reads them.
run_lake() {
  local mode=$1 topic=$2 group="bench-replica-lake-$1-$(date +%s)"
  local catalog="bench_${stamp}_$1" prefix="bench/lake-upsert/$stamp/$1"
  local table="bench.bench_lake_${topic//./_}"
  { consumer_sections "$group" "$topic"; cat <<T
[lake]
mode = "upsert"
catalog-uri = "postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB"
catalog-name = "$catalog"
warehouse = "s3://$BUCKET/$prefix"
namespace = "bench"
table-name-format = "bench_lake_\${topic}"
${LAKE_CONFIG-commit-interval-ms = 1000}

[lake.store]
endpoint = "$S3"
region = "us-east-1"
access-key-id = "$S3_KEY"
secret-access-key = "$S3_SECRET"
allow-http = true
T
  } >"$work/lake-$mode.toml"
  say "lakesink lake (upsert): $mode, table $catalog.$table under s3://$BUCKET/$prefix/"
  timed_lakesink "$mode" "$topic" "$group" "$work/lake-$mode.toml" "$work/lake-$mode.log"
  local counted
  [ -n "${LAKESINK_SPARK_PYTHON:-}" ] || eval "$("$root/dev/stack" env)"
  counted=$("$LAKESINK_SPARK_PYTHON" "$here/lake_checksum.py" "$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB" \
    "$catalog" "$table" "$S3" "$S3_KEY" "$S3_SECRET" "$BUCKET" 2>"$work/lake-$mode-spark.log") \
    || { tail -n 20 "$work/lake-$mode-spark.log" >&2; counted="missing -"; }
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mode" "lakesink-lake-upsert" "$RECORDS" \
    "$(( T1 - T0 ))" "$CPU" "$HWM" "${counted%% *}" "${counted#* }" "$catalog.$table" "$PG" >>"$results"
  delete_group "$group"
  [ "${COMPACT:-1}" = 0 ] || compact_lake "$mode" "$catalog" "$table"
}

# compact_lake MODE CATALOG TABLE: Spark's scan before and after `lake maintain` compacts.
compact_lake() {
  local spark=("$LAKESINK_SPARK_PYTHON" "$here/lake_checksum.py" "$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB"
    "$2" "$3" "$S3" "$S3_KEY" "$S3_SECRET" "$BUCKET" --timed)
  local before after t0 t1 start end cpu
  before=$("${spark[@]}" 2>>"$work/lake-$1-spark.log") || die "Spark could not read $2.$3 (log $work/lake-$1-spark.log)"
  t0=$(date +%s%3N)
  start=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
  "$LAKESINK_BIN" lake maintain --config "$work/lake-$1.toml" --table "${3#*.}" >"$work/lake-$1-maintain.txt" 2>&1 \
    || die "lake maintain failed: $(cat "$work/lake-$1-maintain.txt")"
  t1=$(date +%s%3N)
  end=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
  cpu=$(( end - start ))
  after=$("${spark[@]}" 2>>"$work/lake-$1-spark.log") || die "Spark could not read the compacted $2.$3"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$before" "$after" "$(( t1 - t0 ))" "$cpu" \
    "$(grep ': compacted' "$work/lake-$1-maintain.txt" | head -n 1)" >>"$work/compaction.tsv"
}

# timed_lakesink MODE TOPIC GROUP CONFIG LOG: runs lakesink until the group's lag is 0; sets T0,
# T1 (epoch ms), CPU (ticks), HWM (peak RSS, KiB) and PG (the PostgreSQL server's ticks).
timed_lakesink() {
  local pid p0
  lag_start "$3" "$2"
  p0=$(pg_ticks); T0=$(date +%s%3N)
  # shellcheck disable=SC2086  # LAKESINK_ENV: NAME=value words, split on purpose
  env ${LAKESINK_ENV:-} RUST_LOG=warn "$LAKESINK_BIN" run --config "$4" 2>"$5" &
  pid=$!; LS_PID=$pid
  wait "$LAG_PID" || { tail -n 20 "$5" >&2; die "lakesink: lag never reached 0"; }
  read -r _ T1 _ <"$work/lag.out"
  CPU=$(cpu_ticks "$pid"); HWM=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  kill -TERM "$pid"; wait "$pid" || die "lakesink did not stop cleanly; log $5"
  LS_PID=
  sleep 1; PG=$(( $(pg_ticks) - p0 ))
}

run_jdbc() {
  local mode=$1 topic=$2 batch=$3 table="bench_dbzjdbc_${1}_b${3}_$stamp"
  local name="bench-replica-jdbc-$mode-b$batch-$(date +%s)"
  psql_q "DROP TABLE IF EXISTS public.\"$table\"" >/dev/null
  jdbc_worker_up
  local pid; pid=$(cat "$RUN/worker.pid")
  local conv="" c
  for c in key value; do
    conv+="  \"$c.converter\": \"io.apicurio.registry.utils.converter.AvroConverter\",
  \"$c.converter.apicurio.registry.url\": \"$REGISTRY/apis/registry/v2\",
  \"$c.converter.apicurio.registry.headers.enabled\": \"false\",
  \"$c.converter.apicurio.registry.as-confluent\": \"true\",
  \"$c.converter.apicurio.registry.use-id\": \"contentId\",
"
  done
  local body; body=$(cat <<E
{"name": "$name", "config": {
  "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
  "tasks.max": "$PARTITIONS",
  "topics": "$topic",
$conv${JDBC_CONFIG:+  $JDBC_CONFIG,
}  "connection.url": "jdbc:postgresql://127.0.0.1:$PG_PORT/$PG_DB",
  "connection.username": "$PG_USER",
  "connection.password": "$PG_PASSWORD",
  "insert.mode": "upsert",
  "delete.enabled": "true",
  "primary.key.mode": "record_key",
  "schema.evolution": "basic",
  "collection.name.format": "$table",
  "batch.size": "$batch",
  "consumer.override.max.poll.records": "$(( batch > 500 ? batch : 500 ))"
}}
E
)
  say "Debezium JDBC sink: $mode, batch.size $batch, table public.$table"
  local t0 c0 t1 c1 hwm p0 p1
  lag_start "connect-$name" "$topic"
  p0=$(pg_ticks); c0=$(cpu_ticks "$pid"); t0=$(date +%s%3N)
  JDBC_NAME=$name
  curl -fsS -X POST -H 'Content-Type: application/json' --data "$body" \
    "http://127.0.0.1:$WORKER_PORT/connectors" >/dev/null || die "creating the connector failed; log $RUN/worker.log"
  # The poller runs in the background so that a FAILED task stops the run at once.
  local status="http://127.0.0.1:$WORKER_PORT/connectors/$name/status" lp=$LAG_PID failed=0
  while kill -0 "$lp" 2>/dev/null; do
    if curl -s "$status" | grep -q '"state":"FAILED"'; then failed=1; kill "$lp" 2>/dev/null || true; break; fi
    sleep 2
  done
  if ! wait "$lp" || [ $failed = 1 ]; then
    curl -s "$status" | cut -c1-1500 >&2; echo >&2
    grep -E 'ERROR|Exception' "$RUN/worker.log" | tail -n 20 >&2
    die "the JDBC sink failed or its group did not reach lag 0 in $TIMEOUT s; log $RUN/worker.log"
  fi
  read -r _ t1 _ <"$work/lag.out"
  c1=$(cpu_ticks "$pid"); hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  curl -s "http://127.0.0.1:$WORKER_PORT/connectors/$name/status" >"$work/jdbc-$mode-b$batch-status.json"
  grep -q '"FAILED"' "$work/jdbc-$mode-b$batch-status.json" && say "warning: a task FAILED: $(cat "$work/jdbc-$mode-b$batch-status.json")"
  curl -s -X DELETE "http://127.0.0.1:$WORKER_PORT/connectors/$name" >/dev/null || true
  cp "$RUN/worker.log" "$work/jdbc-$mode-b$batch-worker.log"
  worker_down
  JDBC_NAME=
  sleep 1; p1=$(pg_ticks)
  record "$mode" "debezium-jdbc b$batch" "$table" "$t0" "$t1" "$(( c1 - c0 ))" "$hwm" "$(( p1 - p0 ))"
  delete_group "connect-$name"
}

cleanup() {
  [ -z "${LS_PID:-}" ] || kill "$LS_PID" 2>/dev/null || true
  [ -z "${LAG_PID:-}" ] || kill "$LAG_PID" 2>/dev/null || true
  [ -z "${JDBC_NAME:-}" ] || curl -s -X DELETE "http://127.0.0.1:$WORKER_PORT/connectors/$JDBC_NAME" >/dev/null 2>&1 || true
  worker_down >/dev/null 2>&1 || true
}

report() {
  python3 - "$results" "$hz" <<'P'
import sys
hz = int(sys.argv[2])
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print(f"{'workload':9} {'sink':20} {'events':>8} {'wall s':>7} {'rows/s':>8} {'CPU s':>6} {'peak RSS':>9} "
      f"{'PG CPU s':>8} {'table rows':>10}  checksum (sum id/quantity/price, paid)")
best = {}
for mode, sink, recs, ms, cpu, hwm, n, sums, table, pg in rows:
    wall = int(ms) / 1000
    rate = int(recs) / wall
    best.setdefault(mode, {})[sink] = (rate, n, sums)
    print(f"{mode:9} {sink:20} {recs:>8} {wall:7.1f} {rate:8.0f} {int(cpu) / hz:6.1f} {int(hwm) / 1024:6.0f} MiB "
          f"{int(pg) / hz:8.1f} {n:>10}  {sums}")
for mode, sinks in best.items():
    ls = sinks.get("lakesink")
    for sink, (rate, n, sums) in sinks.items():
        if ls and sink == "lakesink-lake-upsert":
            same = "same rows and checksum" if (n, sums) == ls[1:] else "DIFFERENT rows or checksum"
            print(f"{mode}: lake upsert table / replica = {rate / ls[0]:.2f}x, {same} (read by Spark)")
        elif ls and sink != "lakesink":
            same = "same rows and checksum" if (n, sums) == ls[1:] else "DIFFERENT rows or checksum"
            print(f"{mode}: lakesink / {sink} = {ls[0] / rate:.1f}x, {same}")
print("rows/s = events / wall seconds; CPU s and peak RSS (VmHWM): the lakesink process, or the whole "
      "Connect worker JVM (started fresh per run). PG CPU s: the PostgreSQL server from start to teardown "
      "(backends, autovacuum, and anyone else using it meanwhile).")
P
}

compaction_report() {
  python3 - "$1" "$hz" <<'P'
import sys
hz = int(sys.argv[2])
print(f"{'workload':9} {'Spark scan s, deletes':>21} {'compacted':>9} {'ratio':>6} {'maintain s':>10} {'CPU s':>6}  same rows?  compaction")
for line in open(sys.argv[1]):
    mode, before, after, ms, cpu, what = line.rstrip("\n").split("\t")
    b, a = before.split(), after.split()
    same = "yes" if b[:2] == a[:2] else f"NO: {b[:2]} {a[:2]}"
    print(f"{mode:9} {float(b[2]):21.2f} {float(a[2]):9.2f} {float(b[2]) / float(a[2]):6.2f} "
          f"{int(ms) / 1000:10.1f} {int(cpu) / hz:6.1f}  {same:9}  {what.split(': ', 1)[-1]}")
print("Spark scan: SELECT count(*), sums FROM the table, median of 3 after a warm-up, local[2]. maintain: "
      "lakesink lake maintain --table (compaction, then expiry at its defaults); its CPU is the children's "
      "of this script while it ran.")
P
}

main() {
  mkdir -p "$work"; : >"$results"
  if [ "${BUILD:-1}" = 1 ]; then
    say "building release binaries"
    (cd "$root" && cargo build -q --release -p lakesink --bin lakesink -p lakesink-tests --example produce) \
      || die "cargo build failed"
  fi
  [ "${JDBC:-1}" = 0 ] || jdbc_fetch
  fetch >/dev/null
  trap cleanup EXIT
  for mode in $MODES; do
    local topic="bench-replica-$mode-$stamp"
    if [ -z "${STAMP:-}" ]; then
      say "producing $RECORDS $mode events to $topic ($PARTITIONS partitions)"
      # The bytes produced, kept beside the topic's name for MB/s (bench/summary.py).
      mkdir -p "$CACHE/bench/topics"
      "$TARGET/release/examples/produce" "$topic" "$PARTITIONS" "$RECORDS" "$mode" | tee /dev/stderr \
        | awk '/^bytes / {print $2}' >"$CACHE/bench/topics/$topic.bytes"
    fi
    [ "${LAKESINK:-1}" = 0 ] || run_lakesink "$mode" "$topic"
    [ "${LAKE:-0}" = 0 ] || run_lake "$mode" "$topic"
    if [ "${JDBC:-1}" != 0 ]; then
      for b in $BATCH_SIZES; do run_jdbc "$mode" "$topic" "$b"; done
    fi
  done
  report | tee "$work/report.txt"
  [ ! -s "$work/compaction.tsv" ] || compaction_report "$work/compaction.tsv" | tee -a "$work/report.txt"
  say "figures and logs kept in $work (topics bench-replica-{$(echo "$MODES" | tr ' ' ,)}-$stamp)"
}

case "${1:-run}" in
  fetch) jdbc_fetch ;;
  run) main ;;
  *) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
