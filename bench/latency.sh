#!/usr/bin/env bash
# End-to-end latency (issue 6): source commit to replica row, at a steady rate of changes.
#
# pgbench drives RATE single-row transactions per second (default 1000) for SECONDS (default
# 60) into bench_latency.events on the stack's source PostgreSQL: an upsert over a key space
# of 100,000 ids, so inserts and then updates. Each row carries changed_at = clock_timestamp()
# from its statement. Debezium (the stack's Connect, pgoutput) publishes it, lakesink (release
# build, raw layer + replica) applies it, and in the replica a trigger stamps applied_at =
# clock_timestamp() as the row is written. Latency per row = applied_at - changed_at, both
# read on one machine's clock; p50/p95/p99/max are printed over the steady window (the first
# WARMUP seconds, default 10, are left out). lakesink's own replica_latency_seconds histogram
# (source.ts_ms to replica commit) is scraped as a cross-check.
#
# lakesink's own share is printed apart: from the record's Kafka timestamp (Connect's producer
# stamps it as Debezium hands the record over) to the replica commit of its row
# (pg_xact_commit_timestamp; dev/stack turns track_commit_timestamp on, else the trigger's
# applied_at stands in). [[columns]] metadata adds kafka_ts and taken_at (when lakesink handed
# the decoded record to its sinks) to each replica row, so the share is split in two: consuming
# and decoding (kafka_ts to taken_at) and the replica's batching and transaction (taken_at to
# commit). Kafka timestamps are whole milliseconds.
#
#   bench/latency.sh                  RATE=1000 SECONDS_=60 WARMUP=10 POLL_MS=100 BUILD=1
#
# POLL_MS is the Debezium connector's poll.interval.ms (its default, 500, adds up to half a
# second before lakesink sees a change). Needs the stack (dev/stack up).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"
say() { printf '[latency] %s\n' "$*" >&2; }
die() { printf '[latency] error: %s\n' "$*" >&2; exit 1; }

eval "$(dev/stack env)"
RATE=${RATE:-1000}
DURATION=${SECONDS_:-60}
WARMUP=${WARMUP:-10}
POLL_MS=${POLL_MS:-100}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${LAKESINK_CACHE:-$HOME/.cache/lakesink}/target}
PGBENCH=$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | tail -n 1)
[ -x "$PGBENCH" ] || die "pgbench not found (Debian package postgresql-15)"
stamp=$(date +%s)
work=${LAKESINK_CACHE:-$HOME/.cache/lakesink}/bench/latency-$stamp
mkdir -p "$work"
prefix=lat$stamp
http=127.0.0.1:94$((RANDOM % 90 + 10))

if [ "${BUILD:-1}" = 1 ]; then
  say "building lakesink (release)"
  cargo build -q --release -p lakesink
fi
lakesink=$CARGO_TARGET_DIR/release/lakesink

say "source table bench_latency.events"
psql -qX "$LAKESINK_SOURCE_PG_URL" -v ON_ERROR_STOP=1 <<'SQL'
CREATE SCHEMA IF NOT EXISTS bench_latency;
DROP TABLE IF EXISTS bench_latency.events;
CREATE TABLE bench_latency.events (
  id bigint PRIMARY KEY, v bigint NOT NULL, payload text NOT NULL, changed_at timestamptz NOT NULL);
SQL

say "replica table bench_latency.events, with applied_at stamped by a trigger"
psql -qX "$LAKESINK_REPLICA_PG_URL" -v ON_ERROR_STOP=1 <<'SQL'
CREATE SCHEMA IF NOT EXISTS bench_latency;
DROP TABLE IF EXISTS bench_latency.events;
CREATE TABLE bench_latency.events (
  id bigint PRIMARY KEY, v bigint NOT NULL, payload text NOT NULL, changed_at timestamptz NOT NULL,
  kafka_ts timestamptz, taken_at timestamptz, applied_at timestamptz);
CREATE OR REPLACE FUNCTION bench_latency.stamp() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN NEW.applied_at := clock_timestamp(); RETURN NEW; END $$;
CREATE TRIGGER stamp BEFORE INSERT OR UPDATE ON bench_latency.events
  FOR EACH ROW EXECUTE FUNCTION bench_latency.stamp();
SQL

pg_host=${LAKESINK_SOURCE_PG_URL#*@}; pg_host=${pg_host%%/*}
connector=$prefix
cleanup() {
  [ -n "${lpid:-}" ] && kill "$lpid" 2>/dev/null && wait "$lpid" 2>/dev/null
  curl -fsS -o /dev/null -X DELETE "$LAKESINK_CONNECT_URL/connectors/$connector" 2>/dev/null || true
  psql -qAtX "$LAKESINK_SOURCE_PG_URL" -c "SELECT pg_drop_replication_slot('$connector') FROM pg_replication_slots WHERE slot_name = '$connector' AND NOT active" >/dev/null 2>&1 || true
}
trap cleanup EXIT

say "registering Debezium connector $connector (poll.interval.ms=$POLL_MS)"
curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/json' "$LAKESINK_CONNECT_URL/connectors/$connector/config" -d @- <<JSON
{
  "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
  "plugin.name": "pgoutput",
  "database.hostname": "${pg_host%%:*}", "database.port": "${pg_host##*:}",
  "database.user": "lakesink", "database.password": "lakesink", "database.dbname": "source",
  "topic.prefix": "$prefix", "table.include.list": "bench_latency.events",
  "slot.name": "$connector", "publication.name": "$connector", "publication.autocreate.mode": "filtered",
  "poll.interval.ms": "$POLL_MS",
  "key.converter": "io.apicurio.registry.utils.converter.AvroConverter",
  "key.converter.apicurio.registry.url": "$LAKESINK_REGISTRY_URL/apis/registry/v2",
  "key.converter.apicurio.registry.auto-register": "true",
  "value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
  "value.converter.apicurio.registry.url": "$LAKESINK_REGISTRY_URL/apis/registry/v2",
  "value.converter.apicurio.registry.auto-register": "true"
}
JSON
for _ in $(seq 1 60); do
  state=$(curl -fsS "$LAKESINK_CONNECT_URL/connectors/$connector/status" 2>/dev/null \
    | python3 -c 'import json,sys; t=json.load(sys.stdin)["tasks"]; print(t[0]["state"] if t else "")' 2>/dev/null || true)
  [ "$state" = RUNNING ] && break
  sleep 1
done
[ "$state" = RUNNING ] || die "connector $connector is ${state:-not running}"

cat >"$work/lakesink.toml" <<TOML
[kafka]
brokers = "$LAKESINK_KAFKA_BROKERS"
group-id = "$prefix"
topics-regex = "^$prefix\\\\..*"

[registry]
url = "$LAKESINK_REGISTRY_URL"

[service]
http-listen = "$http"

[raw]
url = "s3://$LAKESINK_S3_BUCKET/$prefix"
rotate-interval-ms = 10000

[raw.store]
endpoint = "$LAKESINK_S3_ENDPOINT"
region = "$LAKESINK_S3_REGION"
access-key-id = "$LAKESINK_S3_ACCESS_KEY_ID"
secret-access-key = "$LAKESINK_S3_SECRET_ACCESS_KEY"
allow-http = true

[replica]
url = "$LAKESINK_REPLICA_PG_URL"
table-name-format = "\${source.schema}.\${source.table}"

[[columns]]
metadata = { kafka-ts = "kafka_ts", updated-at = "taken_at" }
TOML
say "starting lakesink (log: $work/lakesink.log)"
"$lakesink" run --config "$work/lakesink.toml" 2>"$work/lakesink.log" &
lpid=$!
sleep 3

cat >"$work/change.sql" <<'SQL'
\set id random(1, 100000)
INSERT INTO bench_latency.events (id, v, payload, changed_at) VALUES (:id, 1, md5(:id::text), clock_timestamp())
  ON CONFLICT (id) DO UPDATE SET v = bench_latency.events.v + 1, changed_at = clock_timestamp();
SQL
say "pgbench: $RATE changes/s for ${DURATION}s"
PGPASSWORD=lakesink "$PGBENCH" -n -h 127.0.0.1 -p "${pg_host##*:}" -U lakesink -c 4 -j 2 \
  -R "$RATE" -T "$DURATION" -f "$work/change.sql" source >"$work/pgbench.log" 2>&1 \
  || die "pgbench failed: $work/pgbench.log"
grep -E "^(number of transactions actually processed|tps|latency average)" "$work/pgbench.log" | sed 's/^/[latency] pgbench: /' >&2

say "waiting for the replica to catch up"
want=$(psql -qAtX "$LAKESINK_SOURCE_PG_URL" -c "SELECT count(*), max(changed_at) FROM bench_latency.events")
for _ in $(seq 1 120); do
  got=$(psql -qAtX "$LAKESINK_REPLICA_PG_URL" -c "SELECT count(*), max(changed_at) FROM bench_latency.events")
  [ "$got" = "$want" ] && break
  sleep 1
done
[ "$got" = "$want" ] || die "the replica did not catch up: source $want, replica $got"

commit=applied_at
if [ "$(psql -qAtX "$LAKESINK_REPLICA_PG_URL" -c 'SHOW track_commit_timestamp')" = on ]; then
  commit="coalesce(pg_xact_commit_timestamp(xmin), applied_at)"
else
  say "track_commit_timestamp is off in the replica (dev/stack turns it on): the row's write time stands in for its commit"
fi
psql -qX "$LAKESINK_REPLICA_PG_URL" <<SQL
\\pset footer off
WITH rows AS (
  SELECT $commit AS committed, changed_at, kafka_ts, taken_at FROM bench_latency.events
  WHERE changed_at >= (SELECT min(changed_at) FROM bench_latency.events) + interval '$WARMUP seconds'),
spans AS (
  SELECT 'source commit to replica commit' AS span, 1 AS o,
         extract(epoch FROM committed - changed_at) * 1000 AS ms FROM rows
  UNION ALL SELECT '  source commit to Kafka timestamp (Debezium, Connect)', 2,
         extract(epoch FROM kafka_ts - changed_at) * 1000 FROM rows
  UNION ALL SELECT '  Kafka timestamp to replica commit (lakesink)', 3,
         extract(epoch FROM committed - kafka_ts) * 1000 FROM rows
  UNION ALL SELECT '    Kafka timestamp to hand-over (consume, decode)', 4,
         extract(epoch FROM taken_at - kafka_ts) * 1000 FROM rows
  UNION ALL SELECT '    hand-over to replica commit (batch, transaction)', 5,
         extract(epoch FROM committed - taken_at) * 1000 FROM rows)
SELECT span, count(*) AS rows,
       round((percentile_cont(0.50) WITHIN GROUP (ORDER BY ms))::numeric, 1) AS p50_ms,
       round((percentile_cont(0.95) WITHIN GROUP (ORDER BY ms))::numeric, 1) AS p95_ms,
       round((percentile_cont(0.99) WITHIN GROUP (ORDER BY ms))::numeric, 1) AS p99_ms,
       round(max(ms)::numeric, 1) AS max_ms
FROM spans GROUP BY span, o ORDER BY o;
SQL
say "lakesink's histogram (source.ts_ms to replica commit), /metrics on $http:"
curl -fsS "http://$http/metrics" | grep -E '^lakesink_replica_latency_seconds_(bucket|count|sum)' \
  | python3 -c '
import sys
b = []; total = 0
for line in sys.stdin:
    name, v = line.rsplit(" ", 1)
    if "_bucket" in name:
        le = name.split("le=\"")[1].split("\"")[0]
        b.append((float("inf") if le == "+Inf" else float(le), float(v)))
    elif name.endswith("_count"):
        total = float(v)
for q in (0.5, 0.99):
    le = next(le for le, c in b if c >= q * total)
    print(f"[latency] histogram: p{int(q*100)} <= {le * 1000:.0f} ms ({int(total)} rows)", file=sys.stderr)
'
kill -TERM "$lpid"; wait "$lpid" || true; lpid=
say "done; files in $work"
