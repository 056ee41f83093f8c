#!/usr/bin/env bash
# The peer benchmark: a real Kafka Connect sink writing Parquet to the stack's S3, measured the way
# lakesink is. The peer is Apache Iceberg's Kafka Connect sink (the Confluent and Aiven S3 sinks and
# Confluent's AvroConverter are not on Maven Central), with the Apicurio 2.6 AvroConverter reading
# the Confluent framing, a JDBC catalog in the replica PostgreSQL (database peer_iceberg) and
# S3FileIO on SeaweedFS. It runs in its OWN standalone Connect worker on :8084; the project's
# worker on :8083 is not touched.
#
#   TOPIC=t PARTITIONS=4 EXPECTED_RECORDS=100000 [PREFIX=peer/t] bench/peer-s3-sink.sh [run]
#   bench/peer-s3-sink.sh fetch        only download (cached in ~/.cache/lakesink/peer)
#
# Optional env: PREFIX (default peer/iceberg/$TOPIC; objects go to s3://lakesink/$PREFIX/, which
# is emptied first), COMMIT_INTERVAL_MS (Iceberg commit interval, default 10000; Iceberg has no
# flush.size, records are committed, and the group's offsets advance, once per interval),
# TIMEOUT_SECONDS (default 3600), PEER_KEEP_WORKER=1 (leave the worker running),
# PEER_MAX_POLL_RECORDS (the sink consumer's max.poll.records, default 10000 against Connect's
# 500; its fetch sizes are lakesink's: fetch.max.bytes 100 MiB, max.partition.fetch.bytes 10 MiB).
# Needs the stack up (dev/stack up): Kafka, Apicurio, SeaweedFS, the replica PostgreSQL.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${LAKESINK_CACHE:-$HOME/.cache/lakesink}
PEER=$CACHE/peer
KAFKA_VERSION=4.1.1
ICEBERG_VERSION=1.12.0
KAFKA_LIBS=$CACHE/kafka-$KAFKA_VERSION/libs
PLUGINS=$PEER/iceberg-$ICEBERG_VERSION-plugins
TOOLS=$PEER/kafka-tools-$KAFKA_VERSION
RUN=$PEER/run
MVN=(mvn -B -q -s "$here/../dev/infra/settings.xml")
JAVA_BIN=${JAVA_HOME:+$JAVA_HOME/bin/}java
JAVAC_BIN=${JAVA_HOME:+$JAVA_HOME/bin/}javac

BROKERS=127.0.0.1:9092
REGISTRY=http://127.0.0.1:8080
S3=http://127.0.0.1:8333
BUCKET=lakesink
S3_KEY=lakesink
S3_SECRET=lakesink-secret
PG_PORT=5434
PG_USER=lakesink
PG_PASSWORD=lakesink
CATALOG_DB=peer_iceberg
WORKER_PORT=8084

say() { printf '[peer] %s\n' "$*" >&2; }
die() { printf '[peer] error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- fetch

fetch() {
  [ -f "$KAFKA_LIBS/.done" ] || die "no Kafka jars in $KAFKA_LIBS: run dev/stack install first"
  mkdir -p "$PEER"
  if [ ! -f "$PLUGINS/.done" ]; then
    say "resolving Iceberg $ICEBERG_VERSION Kafka Connect sink and the Apicurio converter from Maven Central"
    rm -rf "$PLUGINS"; mkdir -p "$PLUGINS/iceberg-kafka-connect"
    "${MVN[@]}" -f "$here/peer/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DexcludeGroupIds=org.apache.kafka -DoutputDirectory="$PLUGINS/iceberg-kafka-connect" \
      >"$PEER/mvn-iceberg.log" 2>&1 || die "resolving the peer failed, see $PEER/mvn-iceberg.log"
    touch "$PLUGINS/.done"
  fi
  if [ ! -f "$TOOLS/.done" ]; then
    say "fetching kafka-tools $KAFKA_VERSION (ConsumerGroupCommand) from Maven Central"
    rm -rf "$TOOLS"; mkdir -p "$TOOLS"
    "${MVN[@]}" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
      -Dartifact="org.apache.kafka:kafka-tools:$KAFKA_VERSION" -DoutputDirectory="$TOOLS" \
      >"$PEER/mvn-tools.log" 2>&1 || die "fetching kafka-tools failed, see $PEER/mvn-tools.log"
    touch "$TOOLS/.done"
  fi
  local sum; sum=$(sha1sum "$here/peer/Lag.java" | cut -c1-12)
  if [ ! -f "$TOOLS/classes/$sum" ]; then
    rm -rf "$TOOLS/classes"; mkdir -p "$TOOLS/classes"
    "$JAVAC_BIN" -nowarn -d "$TOOLS/classes" -cp "$KAFKA_LIBS/*" "$here/peer/Lag.java" || die "javac Lag.java failed"
    touch "$TOOLS/classes/$sum"
  fi
}

# ---------------------------------------------------------------- S3 (SigV4 through curl)

s3curl() { curl -sS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$S3_KEY:$S3_SECRET" "$@"; }

# s3_list PREFIX: "size key" per object under s3://$BUCKET/PREFIX/ (ListObjectsV2; the query is
# built sorted and fully encoded, as curl's SigV4 signs it as given).
s3_list() {
  local prefix=$1 token="" query tokfile; tokfile=$(mktemp)
  while :; do
    query=$(python3 -c 'import sys, urllib.parse as u
q = {"list-type": "2", "prefix": sys.argv[1] + "/"}
if sys.argv[2]: q["continuation-token"] = sys.argv[2]
print("&".join(k + "=" + u.quote(v, safe="-_.~") for k, v in sorted(q.items())))' "$prefix" "$token")
    # The page on stdin: a thousand keys are too long for an argument.
    s3curl "$S3/$BUCKET?$query" | python3 -c 'import sys, xml.etree.ElementTree as ET
page = sys.stdin.read()
root = ET.fromstring(page)
if root.tag.endswith("Error"): sys.exit("[peer] error: S3 list failed: " + page[:400])
pre = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
for c in root.findall(pre + "Contents"):
    print(c.find(pre + "Size").text, c.find(pre + "Key").text)
t, tr = root.find(pre + "NextContinuationToken"), root.find(pre + "IsTruncated")
open(sys.argv[1], "w").write(t.text if t is not None and tr is not None and tr.text == "true" else "")' "$tokfile" \
      || { rm -f "$tokfile"; return 1; }
    token=$(cat "$tokfile")
    [ -n "$token" ] || break
  done
  rm -f "$tokfile"
}

# s3_delete_listed FILE: deletes the objects s3_list listed into FILE; prints how many.
s3_delete_listed() {
  local key n=0
  while read -r key; do
    s3curl -f -X DELETE "$S3/$BUCKET/$key" >/dev/null || die "cannot delete s3://$BUCKET/$key"
    n=$((n + 1))
  done < <(python3 -c 'import sys, urllib.parse as u
for l in open(sys.argv[1]).read().splitlines():
    if l.strip(): print(u.quote(l.split(" ", 1)[1]))' "$1")
  echo "$n"
}

s3_empty_prefix() {
  local prefix=$1 list n
  list=$(mktemp)
  s3_list "$prefix" >"$list" || { rm -f "$list"; die "cannot list s3://$BUCKET/$prefix/"; }
  n=$(s3_delete_listed "$list")
  rm -f "$list"
  [ "$n" -eq 0 ] || say "deleted $n old objects under s3://$BUCKET/$prefix/"
}

# s3_drop_listed FILE: deletes the objects s3_list listed into FILE, once the run has counted
# them; KEEP_OBJECTS=1 keeps them. Each run writes 0.2-1 GB (2.4 GB for a 50M backlog), and the
# S3 server's disk is the machine's: kept runs filled it within a session.
s3_drop_listed() {
  local n
  [ "${KEEP_OBJECTS:-0}" != 1 ] || return 0
  n=$(s3_delete_listed "$1")
  say "deleted the $n objects counted (KEEP_OBJECTS=1 keeps them)"
}

# ---------------------------------------------------------------- worker

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

worker_pid() { [ -f "$RUN/worker.pid" ] && kill -0 "$(cat "$RUN/worker.pid")" 2>/dev/null && cat "$RUN/worker.pid"; }

worker_up() {
  mkdir -p "$RUN"
  if worker_pid >/dev/null; then say "peer worker already running (pid $(cat "$RUN/worker.pid"))"; return 0; fi
  port_open $WORKER_PORT && die "port $WORKER_PORT is taken by another process"
  # offset.flush.interval.ms bounds the sink consumer's poll when idle, and so how late an idle
  # Iceberg task answers the coordinator's START_COMMIT (it reads the control topic in put()).
  cat >"$RUN/worker.properties" <<E
bootstrap.servers=$BROKERS
offset.storage.file.filename=$RUN/standalone.offsets
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:$WORKER_PORT
rest.advertised.host.name=127.0.0.1
plugin.path=$PLUGINS
key.converter=org.apache.kafka.connect.converters.ByteArrayConverter
value.converter=org.apache.kafka.connect.converters.ByteArrayConverter
E
  say "starting the peer Connect worker (standalone) on 127.0.0.1:$WORKER_PORT, log $RUN/worker.log"
  # Kafka's own kafka-run-class.sh defaults (G1, 20 ms pauses) with a 2 GiB heap.
  setsid "$JAVA_BIN" -Xms256m -Xmx2g -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="file:$here/peer/log4j2.properties" \
    -cp "$KAFKA_LIBS/*" org.apache.kafka.connect.cli.ConnectStandalone "$RUN/worker.properties" \
    >"$RUN/worker.log" 2>&1 </dev/null &
  echo $! >"$RUN/worker.pid"
  local deadline=$((SECONDS + 180))
  until curl -fsS "http://127.0.0.1:$WORKER_PORT/connector-plugins" 2>/dev/null | grep -q IcebergSinkConnector; do
    worker_pid >/dev/null || { tail -n 30 "$RUN/worker.log" >&2; die "the peer worker exited; log $RUN/worker.log"; }
    [ $SECONDS -lt $deadline ] || { tail -n 30 "$RUN/worker.log" >&2; die "the peer worker is not ready after 180 s"; }
    sleep 1
  done
}

worker_down() {
  local pid; pid=$(worker_pid) || { rm -f "$RUN/worker.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$RUN/worker.pid"
  say "peer worker stopped"
}

# ---------------------------------------------------------------- run

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() {
  : "${TOPIC:?set TOPIC}" "${PARTITIONS:?set PARTITIONS}" "${EXPECTED_RECORDS:?set EXPECTED_RECORDS}"
  local prefix=${PREFIX:-peer/iceberg/$TOPIC}; prefix=${prefix#/}; prefix=${prefix%/}
  local interval=${COMMIT_INTERVAL_MS:-10000} timeout=${TIMEOUT_SECONDS:-3600}
  local table; table=$(printf '%s' "$TOPIC" | tr -c 'A-Za-z0-9_' '_')
  local name; name="peer-iceberg-$table-$(date +%s)"
  # lakesink's codec names, in Iceberg's write.parquet.compression-codec.
  local peer_codec=${CODEC:-snappy}
  case $peer_codec in snappy|zstd|gzip) ;; none) peer_codec=uncompressed ;; *) die "CODEC is snappy, zstd, gzip or none, not $peer_codec" ;; esac
  fetch

  # Catalog: its own database in the replica PostgreSQL; a table left by an earlier run is dropped.
  export PGPASSWORD=$PG_PASSWORD PGOPTIONS="-c client_min_messages=warning"
  local psql=(psql -qAtX -h 127.0.0.1 -p $PG_PORT -U $PG_USER)
  "${psql[@]}" -d replica -c "SELECT 1 FROM pg_database WHERE datname='$CATALOG_DB'" | grep -q 1 \
    || "${psql[@]}" -d replica -c "CREATE DATABASE $CATALOG_DB" >/dev/null
  # The catalog's tables (JdbcCatalog's V1 layout) are made here: the tasks, each with its own
  # catalog, race to create and migrate them otherwise ("column iceberg_type already exists").
  "${psql[@]}" -d $CATALOG_DB >/dev/null <<'SQL' || die "creating the JDBC catalog tables failed"
CREATE TABLE IF NOT EXISTS iceberg_tables (catalog_name VARCHAR(255) NOT NULL,
  table_namespace VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL,
  metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000), iceberg_type VARCHAR(5),
  PRIMARY KEY (catalog_name, table_namespace, table_name));
CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL,
  namespace VARCHAR(255) NOT NULL, property_key VARCHAR(255), property_value VARCHAR(1000),
  PRIMARY KEY (catalog_name, namespace, property_key));
SQL
  # So is the namespace, as JdbcCatalog.createNamespace makes it: the tasks race to create it
  # otherwise, and the losers fail (duplicate key on iceberg_namespace_properties).
  "${psql[@]}" -d $CATALOG_DB -c "INSERT INTO iceberg_namespace_properties VALUES ('peer', 'peer', 'exists', 'true') ON CONFLICT DO NOTHING" \
    >/dev/null || die "creating the peer namespace failed"
  "${psql[@]}" -d $CATALOG_DB -c "DELETE FROM iceberg_tables WHERE catalog_name='peer' AND table_namespace='peer' AND table_name='$table'" \
    >/dev/null 2>&1 || true
  s3_empty_prefix "$prefix"

  [ "${PEER_KEEP_WORKER:-0}" = 1 ] || trap teardown EXIT
  worker_up
  local pid; pid=$(cat "$RUN/worker.pid")
  NAME=$name

  local cp="$KAFKA_LIBS/*:$TOOLS/*:$TOOLS/classes"
  local body; body=$(cat <<E
{"name": "$name", "config": {
  "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
  "tasks.max": "$PARTITIONS",
  "topics": "$TOPIC",
  "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
  "value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
  "value.converter.apicurio.registry.url": "$REGISTRY/apis/registry/v2",
  "value.converter.apicurio.registry.headers.enabled": "false",
  "value.converter.apicurio.registry.as-confluent": "true",
  "value.converter.apicurio.registry.use-id": "contentId",
  "consumer.override.max.poll.records": "${PEER_MAX_POLL_RECORDS:-10000}",
  "consumer.override.fetch.max.bytes": "104857600",
  "consumer.override.max.partition.fetch.bytes": "10485760",
  "iceberg.tables": "peer.$table",
  "iceberg.tables.auto-create-enabled": "true",
  "iceberg.tables.auto-create-props.write.format.default": "parquet",
  "iceberg.tables.auto-create-props.write.parquet.compression-codec": "$peer_codec",
  "iceberg.control.topic": "peer-iceberg-control",
  "iceberg.control.group-id-prefix": "$name-control",
  "iceberg.control.commit.interval-ms": "$interval",
  "iceberg.catalog": "peer",
  "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
  "iceberg.catalog.uri": "jdbc:postgresql://127.0.0.1:$PG_PORT/$CATALOG_DB",
  "iceberg.catalog.jdbc.user": "$PG_USER",
  "iceberg.catalog.jdbc.password": "$PG_PASSWORD",
  "iceberg.catalog.jdbc.schema-version": "V1",
  "iceberg.catalog.warehouse": "s3://$BUCKET/$prefix",
  "iceberg.catalog.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
  "iceberg.catalog.s3.endpoint": "$S3",
  "iceberg.catalog.s3.path-style-access": "true",
  "iceberg.catalog.s3.access-key-id": "$S3_KEY",
  "iceberg.catalog.s3.secret-access-key": "$S3_SECRET",
  "iceberg.catalog.client.region": "us-east-1"
}}
E
)
  local t0 c0 hz; hz=$(getconf CLK_TCK)
  c0=$(cpu_ticks "$pid"); t0=$(date +%s%3N)
  curl -fsS -X POST -H 'Content-Type: application/json' --data "$body" \
    "http://127.0.0.1:$WORKER_PORT/connectors" >/dev/null || die "creating the connector failed; log $RUN/worker.log"
  say "connector $name created; waiting for consumer group connect-$name to reach lag 0 on $TOPIC"

  local out
  out=$("$JAVA_BIN" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$cp" Lag "$BROKERS" "connect-$name" "$TOPIC" \
    "$EXPECTED_RECORDS" "$timeout") || {
    curl -s "http://127.0.0.1:$WORKER_PORT/connectors/$name/status" >&2; echo >&2
    grep -E 'ERROR|Exception' "$RUN/worker.log" | tail -n 20 >&2
    die "the group did not reach lag 0 in $timeout s; log $RUN/worker.log"
  }
  local c1 t1 done_records; c1=$(cpu_ticks "$pid")
  read -r _ t1 done_records <<<"$out"
  local hwm; hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")

  local state; state=$(curl -s "http://127.0.0.1:$WORKER_PORT/connectors/$name/status")
  "$JAVA_BIN" -Xmx128m -cp "$cp" org.apache.kafka.tools.consumer.group.ConsumerGroupCommand \
    --bootstrap-server "$BROKERS" --describe --group "connect-$name" 2>/dev/null | sed 's/^/[group] /' >&2 || true

  s3_list "$prefix" >"$RUN/objects.txt" || die "cannot list s3://$BUCKET/$prefix/"
  python3 - "$done_records" "$t0" "$t1" "$c0" "$c1" "$hz" "$hwm" "$prefix" "$state" "$RUN/objects.txt" <<P
import sys, json
recs, t0, t1, c0, c1, hz, hwm = (int(x) for x in sys.argv[1:8])
prefix, state = sys.argv[8], json.loads(sys.argv[9])
objs = [l.split(" ", 1) for l in open(sys.argv[10]).read().splitlines() if l.strip()]
data = [(int(s), k) for s, k in objs if k.endswith(".parquet")]
wall = (t1 - t0) / 1000
tasks = ",".join(t["state"] for t in state.get("tasks", []))
print(f"peer                 Iceberg $ICEBERG_VERSION Kafka Connect sink (Parquet, $peer_codec), Connect $KAFKA_VERSION standalone")
print(f"peer settings        tasks.max $PARTITIONS, max.poll.records ${PEER_MAX_POLL_RECORDS:-10000}, fetch.max.bytes 100 MiB, max.partition.fetch.bytes 10 MiB, 2 GiB G1 heap")
print(f"connector state      {state.get('connector', {}).get('state')} tasks {tasks}")
print(f"records              {recs}")
print(f"wall seconds         {wall:.1f} (connector creation to consumer lag 0; commit interval $interval ms)")
print(f"records/s            {recs / wall:.0f}")
topic_bytes = int("${TOPIC_BYTES:-0}")
if topic_bytes:
    print(f"MB/s                 {topic_bytes * recs / $EXPECTED_RECORDS / wall / 1e6:.1f} (keys and values as produced)")
print(f"worker CPU seconds   {(c1 - c0) / hz:.1f} ({(c1 - c0) / hz / (recs / 1e6):.1f} per million records)")
print(f"worker peak RSS      {hwm / 1024:.0f} MiB (VmHWM)")
print(f"objects              {len(objs)} ({sum(int(s) for s, _ in objs) / 1048576:.1f} MiB) under s3://$BUCKET/{prefix}/")
print(f"parquet data files   {len(data)} ({sum(s for s, _ in data) / 1048576:.1f} MiB)")
P
  s3_drop_listed "$RUN/objects.txt"
}

teardown() {
  if [ -n "${NAME:-}" ]; then
    curl -s -X DELETE "http://127.0.0.1:$WORKER_PORT/connectors/$NAME" >/dev/null || true
  fi
  worker_down
  if [ -n "${NAME:-}" ]; then
    # The connector's groups: connect-NAME (measured), connect-NAME-coord and NAME-control-* (Iceberg's).
    local cgc=("$JAVA_BIN" -Xmx128m -cp "$KAFKA_LIBS/*:$TOOLS/*" org.apache.kafka.tools.consumer.group.ConsumerGroupCommand
      --bootstrap-server "$BROKERS") g args=()
    for g in $("${cgc[@]}" --list 2>/dev/null | grep -E "^(connect-)?$NAME(-|\$)"); do args+=(--group "$g"); done
    [ ${#args[@]} -eq 0 ] || "${cgc[@]}" --delete "${args[@]}" >/dev/null 2>&1 || true
  fi
}

# Sourced by bench/raw-layer.sh for its helpers (s3_list, cpu_ticks, the Lag poller).
if [ "${BASH_SOURCE[0]}" != "$0" ]; then return 0; fi

case "${1:-run}" in
  fetch) fetch ;;
  run) run ;;
  stop) worker_down ;;
  *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
