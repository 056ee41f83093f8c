"""Reads a lake table with Apache Spark and Apache Iceberg's Spark runtime and compares it with
the raw layer, printing JSON for consumer/tests/lakesink/lake.rs.

    read_iceberg_spark.py REQUEST_JSON

The request is read_iceberg.py's: the catalog (`catalog_type`, `sql` or `rest`; `catalog_uri`, a
SQLAlchemy URL `postgresql+psycopg2://user:password@host:port/db` for `sql`, which becomes
Iceberg's JDBC catalog over the same database, or the REST server's URL; `catalog_name`), the
table (`table`, `namespace.name`), the S3 endpoint and credentials (`s3`), and the raw layer's
files (`bucket`, `raw_keys`). The jars Spark loads (Iceberg's Spark runtime, its AWS bundle, the
PostgreSQL driver) are the `*.jar` files in $LAKESINK_SPARK_JARS, where `dev/stack install`
puts them. Spark runs in the JVM pyspark starts (`local[2]`, on 127.0.0.1, no UI, session time
zone UTC), its log on stderr; stdout carries only the JSON:

    offsets           [partition, offset] of every row Spark reads, sorted
    count             the rows Spark reads
    schema            the table's schema as Spark prints it (simpleString)
    snapshot_summary  the current snapshot's summary, from the `snapshots` metadata table
    compared          rows compared with the raw layer, on every column of the table
    compared_columns  those columns
    mismatches        the first differences: (partition, offset, column, spark, raw)
    seconds           how long the read took, Spark's start included

With `snapshots` (a list of snapshot ids) in the request, the raw layer is not read: the answer
is each snapshot's rows (`rows`, by snapshot id, every column rendered as read_parquet.py
renders it, sorted) and summary (`summaries`), read by time travel (`VERSION AS OF`), so
Spark's reader applies each snapshot's delete files.

With `source` (`{"url": "postgres://…", "table": "schema.name"}`), the raw layer is not read
either: the table is compared with the source table, read by Spark over JDBC, both ways with
EXCEPT ALL on the columns the two share (each cast to text, so a type either side maps its own
way compares as the same text). The answer: `count`, `source_count`, `compared_columns`,
`lake_minus_source` and `source_minus_lake` (how many rows, and the first few), and the current
`snapshot_summary`.
"""

import datetime
import glob
import json
import os
import shutil
import sys
import tempfile
import time
from urllib.parse import unquote, urlsplit

# Spark hands TIMESTAMP (with time zone) values to Python as naive datetimes in this process's
# local zone; UTC makes that zone explicit (they are made aware again below, by the schema).
os.environ["TZ"] = "UTC"
time.tzset()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_iceberg import compare  # noqa: E402
from read_parquet import render  # noqa: E402


def jdbc(url):
    """A SQLAlchemy PostgreSQL URL as a JDBC URL, a user and a password."""
    u = urlsplit(url)
    if not u.scheme.startswith("postgres"):
        raise SystemExit(f"read_iceberg_spark.py: not a PostgreSQL catalog URL: {url}")
    port = f":{u.port}" if u.port else ""
    return (
        f"jdbc:postgresql://{u.hostname}{port}{u.path}",
        unquote(u.username or ""),
        unquote(u.password or ""),
    )


def catalog_options(req):
    """The Spark catalog's options: Iceberg's SparkCatalog over the JDBC or REST catalog."""
    s3 = req["s3"]
    opts = {
        "": "org.apache.iceberg.spark.SparkCatalog",
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "s3.endpoint": s3["endpoint"],
        "s3.path-style-access": "true",
        "s3.access-key-id": s3["key"],
        "s3.secret-access-key": s3["secret"],
        "client.region": s3["region"],
    }
    if req.get("catalog_type") == "rest":
        opts.update({"type": "rest", "uri": req["catalog_uri"]})
    else:
        uri, user, password = jdbc(req["catalog_uri"])
        opts.update({
            "type": "jdbc",
            "uri": uri,
            "jdbc.user": user,
            "jdbc.password": password,
            # Required by JdbcCatalog, used only for new tables: this reader creates none.
            "warehouse": f"s3://{req['bucket']}/{req['catalog_name']}",
            # lakesink made the catalog's tables, iceberg_tables and
            # iceberg_namespace_properties: Java is to create none. jdbc.schema-version stays
            # unset: Java finds iceberg_type in iceberg_tables and works as V1 (its views-aware
            # schema, rows typed 'TABLE' as lakesink writes them), while `V1` would have it add
            # that column to a catalog made without it.
            "jdbc.init-catalog-tables": "false",
        })
    return opts


def session(req):
    from pyspark.sql import SparkSession

    jars_dir = os.environ.get("LAKESINK_SPARK_JARS")
    jars = sorted(glob.glob(os.path.join(jars_dir, "*.jar"))) if jars_dir else []
    if not jars:
        raise SystemExit(
            f"read_iceberg_spark.py: no jars in LAKESINK_SPARK_JARS={jars_dir!r} (run `dev/stack install`)")
    scratch = tempfile.mkdtemp(prefix="lakesink-spark-")
    # Every address Spark binds or advertises is the loopback one; its scratch files are ours.
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["SPARK_LOCAL_DIRS"] = scratch
    b = (
        SparkSession.builder.master("local[2]")
        .appName("lakesink-read-iceberg")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", os.path.join(scratch, "warehouse"))
        # A short-lived JVM on two cores: C1 alone and the serial collector halve a read
        # (about 14 s from 27 s here).
        .config(
            "spark.driver.extraJavaOptions",
            "-Duser.timezone=UTC -XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        )
        .config("spark.jars", ",".join(jars))
    )
    # The JDBC catalog keys its rows by the catalog's name, which is the Spark catalog's.
    name = req["catalog_name"]
    for k, v in catalog_options(req).items():
        b = b.config(f"spark.sql.catalog.{name}" + (f".{k}" if k else ""), v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark, name, scratch


def quoted(*parts):
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def entries(pairs):
    """A map's (key, value) pairs in one order: Spark hands maps to Python as dicts whose order
    is not the file's."""
    return sorted(pairs, key=lambda kv: json.dumps(render(kv[0]), sort_keys=True))


def to_python(value, dtype):
    """A value of Spark's Row as pyarrow hands the raw layer's: structs as dicts, TIMESTAMP as
    an aware UTC datetime, TIMESTAMP_NTZ naive, binary as bytes, maps as (key, value) pairs."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(dtype, T.StructType):
        return {f.name: to_python(value[f.name], f.dataType) for f in dtype.fields}
    if isinstance(dtype, T.ArrayType):
        return [to_python(v, dtype.elementType) for v in value]
    if isinstance(dtype, T.MapType):
        return entries(
            (to_python(k, dtype.keyType), to_python(v, dtype.valueType)) for k, v in value.items())
    if isinstance(dtype, T.TimestampNTZType):
        return value
    if isinstance(dtype, T.TimestampType):
        # Naive, local (UTC above): astimezone reads it as local time, so the instant is kept.
        return value.astimezone(datetime.timezone.utc)
    if isinstance(dtype, T.BinaryType):
        return bytes(value)
    return value


def from_arrow(value, dtype):
    """A raw layer value from pyarrow's to_pylist, its maps' pairs in `entries` order."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_struct(dtype):
        return {f.name: from_arrow(value[f.name], f.type) for f in dtype}
    if pa.types.is_map(dtype):
        return entries((from_arrow(k, dtype.key_type), from_arrow(v, dtype.item_type)) for k, v in value)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype):
        return [from_arrow(v, dtype.value_type) for v in value]
    return value


def read_raw(req):
    """The raw layer's rows by (partition, offset), as read_iceberg.py reads them."""
    import pyarrow.fs
    import pyarrow.parquet as pq

    s3 = req["s3"]
    scheme, host = s3["endpoint"].split("://", 1)
    fs = pyarrow.fs.S3FileSystem(
        endpoint_override=host, scheme=scheme, access_key=s3["key"], secret_key=s3["secret"],
        region=s3["region"])
    raw = {}
    for key in req["raw_keys"]:
        t = pq.read_table(f"{req['bucket']}/{key}", filesystem=fs)
        types = {f.name: f.type for f in t.schema}
        for row in t.to_pylist():
            raw[(row["__partition"], row["__offset"])] = {c: from_arrow(v, types[c]) for c, v in row.items()}
    return raw


def at_snapshots(spark, parts, ids):
    """Every row of the table as of each snapshot in `ids` (time travel), rendered and sorted,
    with each snapshot's summary and operation: the `snapshots` request's answer."""
    ident = quoted(*parts)
    out = {"rows": {}, "summaries": {}}
    for sid in ids:
        df = spark.sql(f"SELECT * FROM {ident} VERSION AS OF {int(sid)}")
        types = {f.name: f.dataType for f in df.schema.fields}
        rows = [
            {c: render(to_python(r[c], types[c])) for c in df.columns} for r in df.collect()]
        out["rows"][str(sid)] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))
        summary = spark.sql(
            f"SELECT operation, summary FROM {quoted(*parts, 'snapshots')}"
            f" WHERE snapshot_id = {int(sid)}").collect()
        out["summaries"][str(sid)] = (
            {**summary[0]["summary"], "operation": summary[0]["operation"]} if summary else None)
    return out


def against_source(spark, ident, source):
    """The table beside the source table: EXCEPT ALL both ways, on their shared columns."""
    uri, user, password = jdbc(source["url"])
    src = (
        spark.read.format("jdbc")
        .option("url", uri)
        .option("user", user)
        .option("password", password)
        .option("driver", "org.postgresql.Driver")
        .option("dbtable", source["table"])
        .load())
    lake = spark.sql(f"SELECT * FROM {ident}")
    cols = [c for c in src.columns if c in lake.columns]
    if len(cols) != len(src.columns):
        missing = [c for c in src.columns if c not in lake.columns]
        raise SystemExit(f"read_iceberg_spark.py: the lake table lacks the source's {missing}")

    def text(df):
        return df.select([df[f"`{c}`"].cast("string").alias(c) for c in cols])

    lake_t, src_t = text(lake), text(src)
    out = {"compared_columns": cols, "count": lake.count(), "source_count": src.count()}
    for name, a, b in (("lake_minus_source", lake_t, src_t), ("source_minus_lake", src_t, lake_t)):
        diff = a.exceptAll(b)
        out[name] = {"count": diff.count(), "first": [r.asDict() for r in diff.limit(5).collect()]}
    return out


def main():
    req = json.loads(sys.argv[1])
    started = time.monotonic()
    # stdout is the JSON alone: anything the JVM (which inherits fd 1) prints goes to stderr.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    spark, catalog, scratch = session(req)
    try:
        parts = [catalog, *req["table"].split(".")]
        ident = quoted(*parts)
        if "source" in req:
            out = against_source(spark, ident, req["source"])
            current = spark.sql(
                f"SELECT s.summary FROM {quoted(*parts, 'snapshots')} s"
                f" JOIN {quoted(*parts, 'refs')} r ON s.snapshot_id = r.snapshot_id"
                " WHERE r.name = 'main'").collect()
            out["snapshot_summary"] = dict(current[0]["summary"]) if current else {}
            out["seconds"] = round(time.monotonic() - started, 1)
            with os.fdopen(out_fd, "w") as f:
                f.write(json.dumps(out, default=str) + "\n")
            return
        if "snapshots" in req:
            out = at_snapshots(spark, parts, req["snapshots"])
            out["seconds"] = round(time.monotonic() - started, 1)
            with os.fdopen(out_fd, "w") as f:
                f.write(json.dumps(out) + "\n")
            return
        df = spark.sql(f"SELECT * FROM {ident}")
        cols = [c for c in df.columns if c not in ("__partition", "__offset")]
        types = {f.name: f.dataType for f in df.schema.fields}
        rows = df.collect()
        out = {
            "schema": spark.table(ident).schema.simpleString(),
            "count": len(rows),
            "offsets": sorted([r["__partition"], r["__offset"]] for r in rows),
        }
        # The current snapshot: the one the main branch points at.
        current = spark.sql(
            f"SELECT s.summary FROM {quoted(*parts, 'snapshots')} s"
            f" JOIN {quoted(*parts, 'refs')} r ON s.snapshot_id = r.snapshot_id"
            " WHERE r.name = 'main'").collect()
        out["snapshot_summary"] = dict(current[0]["summary"]) if current else {}
        raw = read_raw(req)
        lake = ({c: to_python(r[c], types[c]) for c in r.__fields__} for r in rows)
        out["compared"], mismatches = compare(lake, raw, cols)
        out["compared_columns"] = cols
        out["mismatches"] = mismatches
        out["seconds"] = round(time.monotonic() - started, 1)
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    with os.fdopen(out_fd, "w") as f:
        f.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
