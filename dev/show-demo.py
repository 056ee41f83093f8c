"""The demo's raw layer read back as an analyst would: pyarrow fetches the Parquet files
from the S3 server and DuckDB queries them. Prints, per table, the change events by
operation, and the newest three customers as the change log says they are now (the last
event per key, deletes left out), for dev/demo to set beside the source and the replica."""

import sys

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

endpoint, bucket, prefix, key, secret, region = sys.argv[1:7]
fs = pafs.S3FileSystem(
    endpoint_override=endpoint,
    access_key=key,
    secret_key=secret,
    region=region,
    scheme=endpoint.split("://")[0],
)


def table(topic: str) -> pa.Table:
    files = [
        f.path
        for f in fs.get_file_info(pafs.FileSelector(f"{bucket}/{prefix}/topics/{topic}", recursive=True))
        if f.path.endswith(".parquet")
    ]
    if not files:
        sys.exit(f"no Parquet files for {topic} under s3://{bucket}/{prefix}/topics/")
    # Each schema version of a table is a file of its own: one table of them all.
    return pa.concat_tables(
        [pq.read_table(f, filesystem=fs) for f in files], promote_options="default"
    )


customers = table("demo.inventory.customers")
orders = table("demo.inventory.orders")
for name, t in (("customers", customers), ("orders", orders)):
    ops = duckdb.sql(f"SELECT __op, count(*) FROM {name} GROUP BY 1 ORDER BY 1").fetchall()
    said = ", ".join(f"{n} {op}" for op, n in ops)
    print(f"raw layer (DuckDB): inventory.{name}: {t.num_rows} change events: {said}")
print("raw layer (DuckDB), the newest customers as the change log has them now:")
rows = duckdb.sql(
    """
    SELECT after.id, after.name, after.balance FROM customers
    QUALIFY row_number() OVER (PARTITION BY coalesce(after.id, before.id)
                               ORDER BY __offset DESC) = 1 AND __op <> 'd'
    ORDER BY after.id DESC LIMIT 3
    """
).fetchall()
for r in rows:
    print("  " + " | ".join(str(v) for v in r))
