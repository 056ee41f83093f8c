"""Rows and checksum of an upsert lake table as Apache Spark reads it (equality deletes
applied), in bench/replica.sh's form: "ROWS SUM_ID/SUM_QUANTITY/SUM_PRICE/PAID".

    lake_checksum.py USER:PASSWORD@HOST:PORT/DB CATALOG NAMESPACE.TABLE S3_ENDPOINT KEY SECRET BUCKET [--timed]

--timed adds the query's seconds, the median of three runs after a first that warms the JVM
and Spark's caches: "ROWS CHECKSUM SECONDS".

The SQL catalog is in the PostgreSQL database given; Spark's jars are $LAKESINK_SPARK_JARS (as
for tests/python/read_iceberg_spark.py, whose session this uses).
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from read_iceberg_spark import quoted, session  # noqa: E402


def main():
    db, catalog, table, endpoint, key, secret, bucket = sys.argv[1:8]
    timed = "--timed" in sys.argv[8:]
    req = {
        "catalog_type": "sql",
        "catalog_uri": f"postgresql://{db}",
        "catalog_name": catalog,
        "bucket": bucket,
        "s3": {"endpoint": endpoint, "key": key, "secret": secret, "region": "us-east-1"},
    }
    out_fd = os.dup(1)
    os.dup2(2, 1)
    spark, name, _ = session(req)
    try:
        ident = quoted(name, *table.split("."))
        query = (
            f"SELECT count(*) AS n, sum(id) AS i, sum(quantity) AS q, sum(price) AS p,"
            f" count_if(status = 'paid') AS paid FROM {ident}")
        r = spark.sql(query).collect()[0]
        line = f"{r['n']} {r['i'] or 0}/{r['q'] or 0}/{r['p'] or 0}/{r['paid']}"
        if timed:
            runs = []
            for _ in range(3):
                started = time.monotonic()
                spark.sql(query).collect()
                runs.append(time.monotonic() - started)
            line += f" {sorted(runs)[1]:.2f}"
        with os.fdopen(out_fd, "w") as f:
            f.write(line + "\n")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
