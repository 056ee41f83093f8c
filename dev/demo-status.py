"""dev/demo's read-out of a running lakesink: each sink's state and rows from /status and
/metrics, and the replica's mean latency from source commit to replica row.

usage: demo-status.py http://127.0.0.1:9400
"""

import json
import re
import sys
import urllib.request

base = sys.argv[1]


def get(path: str) -> str:
    with urllib.request.urlopen(base + path, timeout=5) as r:
        return r.read().decode()


status = json.loads(get("/status"))
metrics = get("/metrics")


def total(name: str, **labels: str) -> float:
    found = 0.0
    for series, value in re.findall(rf"^lakesink_{name}(\{{[^}}]*\}})? (\S+)$", metrics, re.M):
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            found += float(value)
    return found


sinks = status.get("sinks", {})
items = sinks.items() if isinstance(sinks, dict) else ((s.get("name"), s) for s in sinks)
for name, s in items:
    rows = total("sink_rows_total", sink=name)
    print(f"sink {name}: {s.get('state')}, {rows:.0f} rows written")
n = total("replica_latency_seconds_count")
if n:
    mean_ms = total("replica_latency_seconds_sum") / n * 1000
    print(f"replica latency (source commit to replica row): mean {mean_ms:.0f} ms over {n:.0f} transactions")
