"""Reads a lake table as its users would and compares it with the raw layer, printing JSON for
consumer/tests/lakesink/lake.rs.

    read_iceberg.py REQUEST_JSON

The request names the catalog (`catalog_type`, `sql` or `rest`; `catalog_uri`, a SQLAlchemy URL
for `sql` or the REST server's URL; `catalog_name`), the
table (`table`, `namespace.name`), the S3 endpoint and credentials (`s3`), and the raw layer's
files (`bucket`, `raw_keys`). The table is read with pyiceberg (its SQL catalog and pyarrow
file I/O) and queried with DuckDB over pyiceberg's scan; the raw files with pyarrow. Out:

    offsets         [partition, offset] of every row pyiceberg reads
    duckdb_offsets  the same, from DuckDB
    summary         the current snapshot's summary
    schema          the table's schema as pyiceberg prints it
    compared        rows compared with the raw layer, on every column of the table
    compared_columns  those columns
    mismatches      the first differences: (partition, offset, column, lake, raw)
    spec            the partition spec as pyiceberg prints it
    bounded_columns columns some data file has bounds for in its manifest entry
    bound_mismatches  bounds a file's own values fall outside of: (file, column, lower,
                    upper, values' range)
    files           data files of the current snapshot
    partition_mismatches  rows whose partition value, computed by pyiceberg's transforms from
                    the row's source values, is not their file's: (file, field, row, file)
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_parquet import render  # noqa: E402


def compare(rows, raw, cols):
    """Each lake row (a dict with `__partition`, `__offset` and `cols`, values as pyarrow gives
    them) against the raw layer's row at its (partition, offset): the rows compared and the
    first 20 differences, (partition, offset, column, lake, raw). A column a raw file lacks (an
    older schema version) is null."""
    mismatches = []
    compared = 0
    for row in rows:
        at = (row["__partition"], row["__offset"])
        want = raw.get(at)
        if want is None:
            mismatches.append([at[0], at[1], "*", "in the lake", "not in the raw layer"])
            continue
        compared += 1
        for c in cols:
            a, b = render(row[c]), render(want.get(c))
            if a != b and len(mismatches) < 20:
                mismatches.append([at[0], at[1], c, a, b])
    return compared, mismatches


def main():
    req = json.loads(sys.argv[1])
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.catalog.sql import SqlCatalog
    import pyarrow.fs
    import pyarrow.parquet as pq

    s3 = req["s3"]
    kind = RestCatalog if req.get("catalog_type") == "rest" else SqlCatalog
    catalog = kind(
        req["catalog_name"],
        uri=req["catalog_uri"],
        **{
            "s3.endpoint": s3["endpoint"],
            "s3.access-key-id": s3["key"],
            "s3.secret-access-key": s3["secret"],
            "s3.region": s3["region"],
        },
    )
    table = catalog.load_table(req["table"])
    lake = table.scan().to_arrow()
    out = {
        "schema": str(table.schema()),
        "summary": dict(table.current_snapshot().summary.additional_properties)
        if table.current_snapshot()
        else {},
    }
    parts = lake.column("__partition").to_pylist()
    offs = lake.column("__offset").to_pylist()
    out["offsets"] = sorted([p, o] for p, o in zip(parts, offs))
    con = table.scan().to_duckdb(table_name="lake")
    out["duckdb_offsets"] = [list(r) for r in con.execute(
        "SELECT __partition, __offset FROM lake ORDER BY 1, 2").fetchall()]

    fs = pyarrow.fs.S3FileSystem(
        endpoint_override=s3["endpoint"].split("://", 1)[1],
        scheme=s3["endpoint"].split("://", 1)[0],
        access_key=s3["key"],
        secret_key=s3["secret"],
        region=s3["region"],
    )
    raw = {}
    for key in req["raw_keys"]:
        t = pq.read_table(f"{req['bucket']}/{key}", filesystem=fs)
        for row in t.to_pylist():
            raw[(row["__partition"], row["__offset"])] = row
    cols = [c for c in lake.column_names if c not in ("__partition", "__offset")]
    compared, mismatches = compare(lake.to_pylist(), raw, cols)
    out["compared"] = compared
    out["compared_columns"] = cols
    out["spec"] = str(table.spec())
    out["files"], out["partition_mismatches"] = check_partitions(table, fs)
    out["bounded_columns"], out["bound_mismatches"] = check_bounds(table, fs)
    out["raw_rows"] = len(raw)
    out["mismatches"] = mismatches
    print(json.dumps(out))


def check_partitions(table, fs):
    """Each data file's rows against its partition value in the manifest."""
    import pyarrow.parquet as pq

    schema = table.schema()
    spec = table.spec()
    files = table.inspect.files().to_pylist()
    mismatches = []
    for f in files:
        if not spec.fields:
            break
        path = f["file_path"].split("://", 1)[1]
        rows = pq.read_table(path, filesystem=fs).to_pylist()
        for field in spec.fields:
            source = schema.find_field(field.source_id)
            name = schema.find_column_name(field.source_id)
            transform = field.transform.transform(source.field_type)
            want = f["partition"][field.name]
            for row in rows:
                value = row
                for part in name.split("."):
                    value = None if value is None else value.get(part)
                value = to_iceberg(value)
                got = None if value is None else transform(value)
                if got != want and len(mismatches) < 20:
                    mismatches.append([path, field.name, repr(got), repr(want)])
    return len(files), mismatches


def check_bounds(table, fs):
    """Each data file's lower and upper bounds, decoded from the manifest by pyiceberg, against
    the file's own values: every non-null, non-NaN value within them."""
    import math
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.conversions import from_bytes

    schema = table.schema()
    bounded = set()
    mismatches = []
    for f in table.inspect.files().to_pylist():
        path = f["file_path"].split("://", 1)[1]
        t = pq.read_table(path, filesystem=fs)
        while any(pa.types.is_struct(c.type) for c in t.schema):
            t = t.flatten()
        lower = dict(f["lower_bounds"] or [])
        upper = dict(f["upper_bounds"] or [])
        for field_id in sorted(set(lower) | set(upper)):
            field = schema.find_field(field_id)
            name = schema.find_column_name(field_id)
            lo = from_bytes(field.field_type, lower[field_id]) if field_id in lower else None
            hi = from_bytes(field.field_type, upper[field_id]) if field_id in upper else None
            bounded.add(name)
            values = [
                to_iceberg(v)
                for v in (t.column(name).to_pylist() if name in t.column_names else [])
                if v is not None and not (isinstance(v, float) and math.isnan(v))
            ]
            if not values:
                mismatches.append([path, name, repr(lo), repr(hi), "bounds but no values"])
            elif (lo is not None and lo > min(values)) or (hi is not None and hi < max(values)):
                mismatches.append([path, name, repr(lo), repr(hi), repr((min(values), max(values)))])
    return sorted(bounded), mismatches[:20]


def to_iceberg(value):
    """A pyarrow value as pyiceberg's transforms and bound decoding give it (micros for times
    and timestamps, days for dates)."""
    import datetime

    if isinstance(value, datetime.datetime):
        epoch = datetime.datetime(1970, 1, 1, tzinfo=value.tzinfo)
        delta = value - epoch
        return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, datetime.date):
        return (value - datetime.date(1970, 1, 1)).days
    if isinstance(value, datetime.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    return value


if __name__ == "__main__":
    main()
