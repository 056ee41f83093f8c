"""Reads Parquet files as a user of the raw layer would, with pyarrow (and DuckDB), and prints
what it sees as JSON for tests/tests/raw_readback.rs to compare with the source database.

    read_parquet.py FILE...            pyarrow: per file, every field's Arrow type and metadata
                                       (nested fields as `after.id`) and the rows
    read_parquet.py --duckdb SQL FILE  DuckDB: the rows of SQL, with `{file}` the file's path
    read_parquet.py --physical FILE... pyarrow: the rows of every file, dates, times, timestamps
                                       and durations as their stored integers (exact where
                                       Python's datetime stops: BC, past 9999, infinities)

Values are rendered in PostgreSQL's text forms, so they compare with `column::text`: numbers
and decimals as text, booleans `true`/`false`, bytes `\\x<hex>`, times and timestamps without
trailing zero fractions and with `+00` for UTC, durations as integer microseconds; lists become
JSON arrays and structs JSON objects of rendered values.
"""

import datetime
import decimal
import json
import sys


def fraction(text):
    """Drops trailing zeros of a fractional second, as PostgreSQL prints it."""
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def render(v):
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        return r[:-2] if r.endswith(".0") else r
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return "\\x" + bytes(v).hex()
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            utc = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
            return fraction(utc.isoformat(sep=" ")) + "+00"
        return fraction(v.isoformat(sep=" "))
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, datetime.time):
        return fraction(v.isoformat())
    if isinstance(v, datetime.timedelta):
        return str((v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds)
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        return {k: render(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [render(x) for x in v]
    raise TypeError(f"no rendering for {type(v).__name__}: {v!r}")


def fields(prefix, fs, out):
    import pyarrow as pa

    for f in fs:
        name = prefix + f.name
        out[name] = {
            "type": str(f.type),
            "nullable": f.nullable,
            "metadata": {k.decode(): v.decode() for k, v in (f.metadata or {}).items()},
        }
        if pa.types.is_struct(f.type):
            fields(name + ".", [f.type.field(i) for i in range(f.type.num_fields)], out)


def read_pyarrow(paths):
    import pyarrow.parquet as pq

    out = []
    for path in paths:
        table = pq.read_table(path)
        schema = {}
        fields("", table.schema, schema)
        out.append({"path": path, "fields": schema, "rows": [render(r) for r in table.to_pylist()]})
    return out


def read_physical(paths):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = []
    for path in paths:
        table = pq.read_table(path)
        columns = {}
        for name in table.column_names:
            col = table.column(name).combine_chunks()
            if pa.types.is_temporal(col.type):
                col = col.view(pa.int32() if col.type.bit_width == 32 else pa.int64())
            columns[name] = [render(v) for v in col.to_pylist()]
        out.extend(dict(zip(columns, row)) for row in zip(*columns.values()))
    return out


def read_duckdb(sql, path):
    import duckdb

    con = duckdb.connect()
    cur = con.execute(sql.replace("{file}", path.replace("'", "''")))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, (render(v) for v in row))) for row in cur.fetchall()]


def main(argv):
    if argv[:1] == ["--duckdb"]:
        result = read_duckdb(argv[1], argv[2])
    elif argv[:1] == ["--physical"]:
        result = read_physical(argv[1:])
    else:
        result = read_pyarrow(argv)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
