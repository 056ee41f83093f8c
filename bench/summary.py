"""One table of the raw-layer and replica benchmarks' kept figures (issue 23).

    python3 bench/summary.py DIR...

Each DIR is a run's figures: a raw-layer run's (raw.txt, lake.txt, peer.txt, as
bench/raw-layer.sh keeps them) or a replica run's (results.tsv, as bench/replica.sh keeps
it). Runs of one side on one workload are gathered into one row: the median of records/s with
its range, MB/s (when the topic's produced bytes are kept in $CACHE/bench/topics), CPU seconds
per million records, peak RSS, and lakesink's ratio to the best single run of the peer on that
workload (the fastest setting's fastest run, not its typical one). Below the table, each
lakesink side's ratio per run: its run against the fastest peer setting of the same run, so
that a host that drifts between runs (these machines' speed moves by the hour) does not pair
a slow lakesink run with a fast peer run or the other way round.
"""

import os
import re
import statistics
import sys

CACHE = os.environ.get("LAKESINK_CACHE", os.path.expanduser("~/.cache/lakesink"))
HZ = os.sysconf("SC_CLK_TCK")


def topic_bytes(topic):
    try:
        with open(os.path.join(CACHE, "bench", "topics", topic + ".bytes")) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def raw_runs(d):
    """(bench, workload, side, records, records/s, MB/s or None, CPU s/M, RSS MiB) per side."""
    # bench/raw-layer.sh keeps the record shape it produced: narrow (10 columns) or wide (32).
    try:
        shape = open(os.path.join(d, "shape")).read().strip() or "narrow"
    except OSError:
        shape = "narrow"
    shape = {"narrow": "10 columns", "wide": "32 columns"}.get(shape, shape)
    for name, side in (("raw", "lakesink raw layer"), ("lake", "lakesink lake table"), ("peer", "Iceberg sink")):
        p = os.path.join(d, name + ".txt")
        if not os.path.exists(p):
            continue
        t = open(p).read()
        recs = int(re.search(r"^records\s+(\d+)", t, re.M).group(1))
        rate = float(re.search(r"^records/s\s+(\d+)", t, re.M).group(1))
        mbs = re.search(r"^MB/s\s+([\d.]+)", t, re.M)
        cpu = float(re.search(r"CPU seconds\s+([\d.]+)", t).group(1))
        rss = float(re.search(r"peak RSS\s+(\d+)", t).group(1))
        yield ("raw layer", shape, side, recs, rate, mbs and float(mbs.group(1)), cpu / (recs / 1e6), rss)


def replica_runs(d):
    for line in open(os.path.join(d, "results.tsv")):
        mode, sink, recs, ms, cpu, hwm, _rows, _sums, table, _pg = line.rstrip("\n").split("\t")
        recs, wall = int(recs), int(ms) / 1000
        # The topic is named in the table's stamp: bench-replica-MODE-STAMP.
        stamp = table.rsplit("_", 1)[-1]
        size = topic_bytes(f"bench-replica-{mode}-{stamp}")
        side = "lakesink replica" if sink == "lakesink" else sink
        yield ("replica", mode, side, recs, recs / wall, size / wall / 1e6 if size else None,
               int(cpu) / HZ / (recs / 1e6), int(hwm) / 1024)


def is_peer(side):
    return not side.startswith("lakesink")


def main(dirs):
    runs = []
    for i, d in enumerate(dirs):
        found = replica_runs(d) if os.path.exists(os.path.join(d, "results.tsv")) else raw_runs(d)
        runs.extend((i, *r) for r in found)
    if not runs:
        sys.exit("no figures in " + " ".join(dirs))
    groups = {}
    for _, bench, workload, side, *figures in runs:
        groups.setdefault((bench, workload, side), []).append(figures)
    best_peer = {}
    for (bench, workload, side), rs in groups.items():
        if is_peer(side):
            best = max(r[1] for r in rs)
            if best > best_peer.get((bench, workload), (0, ""))[0]:
                best_peer[(bench, workload)] = (best, side)
    head = (f"{'bench':10} {'workload':10} {'side':24} {'runs':>4} {'records/s median (range)':>28} "
            f"{'MB/s':>6} {'CPU s/M':>7} {'peak RSS':>9}  vs the best peer run")
    print(head)
    print("-" * len(head))
    def order(group):
        (bench, workload, side), _ = group
        # lakesink first, then the peer's settings in numeric order (b500 before b2000).
        return (bench, workload, is_peer(side), [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", side)])

    for (bench, workload, side), rs in sorted(groups.items(), key=order):
        rates = [r[1] for r in rs]
        mbs = [r[2] for r in rs if r[2] is not None]
        med = statistics.median(rates)
        span = f"{med:,.0f} ({min(rates):,.0f}-{max(rates):,.0f})" if len(rs) > 1 else f"{med:,.0f}"
        ratio = ""
        peer = best_peer.get((bench, workload))
        if peer and not is_peer(side):
            lo, hi = min(rates) / peer[0], max(rates) / peer[0]
            ratio = f"{lo:.1f}-{hi:.1f}x {peer[1]}'s {peer[0]:,.0f}" if len(rs) > 1 else f"{lo:.1f}x {peer[1]}'s {peer[0]:,.0f}"
        elif peer and side == peer[1]:
            ratio = "(the best peer run)"
        print(f"{bench:10} {workload:10} {side:24} {len(rs):>4} {span:>28} "
              f"{(f'{statistics.median(mbs):.1f}' if mbs else '-'):>6} "
              f"{statistics.median(r[3] for r in rs):7.1f} {statistics.median(r[4] for r in rs):6.0f} MiB  {ratio}")
    for line in paired(runs):
        print(line)
    print("records/s: records over wall seconds, each side from its start to its consumer group's lag 0;"
          " MB/s: keys and values as produced; CPU s/M: the process's (or the whole Connect worker's)"
          " CPU seconds per million records; peak RSS: VmHWM; medians over the runs.")


def paired(runs):
    """Per lakesink side, its ratio in each run to the fastest peer setting of that run."""
    best, ours = {}, {}
    for run, bench, workload, side, _recs, rate, *_ in runs:
        key = (bench, workload)
        if is_peer(side):
            best[(run, key)] = max(best.get((run, key), 0), rate)
        else:
            ours.setdefault((key, side), []).append((run, rate))
    for (key, side), rs in sorted(ours.items()):
        # A run without the peer (RUN_PEER=0, JDBC=0) shows as "-", so none goes missing.
        ratios = [rate / best[(run, key)] if best.get((run, key)) else None for run, rate in rs]
        known = [r for r in ratios if r is not None]
        if known:
            each = ", ".join("-" if r is None else f"{r:.1f}x" for r in ratios)
            yield (f"{key[0]}, {key[1]}, {side}: {each} the same run's fastest peer setting"
                   f" (median {statistics.median(known):.1f}x)")


if __name__ == "__main__":
    main(sys.argv[1:])
