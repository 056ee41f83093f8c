#!/usr/bin/env bash
# Issue 23's summary: the raw-layer bench (lakesink's raw layer and lake table, and Iceberg's
# Kafka Connect sink) and the replica bench (lakesink and the Debezium JDBC sink at each
# batch.size of the sweep, with its reduction buffer), RUNS times each on the same topics,
# then one table of all of them (bench/summary.py): records/s (median and range), MB/s, CPU
# seconds per million records, peak RSS, and lakesink's ratio to the best peer run; under it,
# lakesink's ratio in each run to the fastest peer setting of the same run.
#
#   bench/summary.sh                      RUNS=3; each bench's own settings (RECORDS, ...) apply
#   RAW=0 bench/summary.sh                the replica bench only (REPLICA=0: the raw layer only)
#   bench/summary.sh print DIR...         the table from runs kept earlier ($CACHE/bench/...)
#
# The sweep: JDBC_BATCH_SIZES (default "500 2000 5000 10000") and JDBC_CONFIG (default the
# reduction buffer on). Needs the stack (dev/stack up). About 15 minutes a run on a 2-core
# machine with the defaults: the peers take most of it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { printf '[summary] %s\n' "$*" >&2; }
die() { printf '[summary] error: %s\n' "$*" >&2; exit 1; }

if [ "${1:-run}" = print ]; then
  shift
  exec python3 "$here/summary.py" "$@"
fi

RUNS=${RUNS:-3}
export JDBC_BATCH_SIZES=${JDBC_BATCH_SIZES:-500 2000 5000 10000}
export JDBC_CONFIG=${JDBC_CONFIG:-'"use.reduction.buffer": "true"'}
dirs=()
# kept LOG: the figures directory a bench run names on its last line.
kept() {
  local dir
  dir=$(grep -oE '(figures|figures and logs) kept in [^ ]+' "$1" | tail -n 1 | awk '{print $NF}')
  [ -d "$dir" ] || die "no figures directory in $1"
  echo "$dir"
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# repeat SCRIPT FIND REUSE PREFIX: SCRIPT RUNS times. The first run produces its topics, whose
# stamp (the digits ending what FIND matches in its log) the others reuse, as REUSE=PREFIXstamp.
repeat() {
  local script=$1 find=$2 reuse=$3 prefix=$4 stamp= run
  for run in $(seq "$RUNS"); do
    say "$script, run $run of $RUNS"
    if [ -z "$stamp" ]; then
      "$here/$script" 2>&1 | tee "$log" || die "$script failed"
      stamp=$(grep -oE "$find" "$log" | tail -n 1 | grep -oE '[0-9]+$' || true)
      [ -n "$stamp" ] || die "$script named no topic"
    else
      env "$reuse=$prefix$stamp" BUILD=0 "$here/$script" 2>&1 | tee "$log" || die "$script failed"
    fi
    dirs+=("$(kept "$log")")
  done
}
[ "${RAW:-1}" = 0 ] || repeat raw-layer.sh 'to bench-raw-[0-9]+' BENCH_TOPIC bench-raw-
[ "${REPLICA:-1}" = 0 ] || repeat replica.sh 'bench-replica-\{[a-z,]+\}-[0-9]+' STAMP ""
echo
python3 "$here/summary.py" "${dirs[@]}"
