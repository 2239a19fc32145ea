"""Choose the S3 client library by measurement (docs/storage.md): boto3 vs obstore against a local SeaweedFS.

    python -m bench.s3_clients [--n 200]

Times (median ms per call) of a 1 KiB put, get, conditional put (If-None-Match: *) and compare-and-swap
(If-Match), a 20 MB put, and reading one column of a parquet file through pyarrow (obstore's ranged reader in a
pyarrow.PythonFile, as S3Storage.open_input, vs pyarrow's own S3FileSystem).
"""

from __future__ import annotations

import argparse
import statistics
import time

import pyarrow as pa
import pyarrow.parquet as pq

from hudilite.storage.s3 import S3Storage, counting
from tests.s3.server import ACCESS_KEY, REGION, SECRET_KEY, SeaweedServer


def _ms(fn, n: int) -> float:
    times = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    import boto3
    import obstore
    from botocore.config import Config
    from obstore.store import S3Store
    from pyarrow import fs as pafs

    small = b"x" * 1024
    big = bytes(20 * 1024 * 1024)
    table = pa.table({f"c{i}": pa.array(range(500_000), pa.int64()) for i in range(8)})
    with SeaweedServer() as srv:
        boto = boto3.client("s3", endpoint_url=srv.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION,
                            config=Config(s3={"addressing_style": "path"}))
        boto.create_bucket(Bucket="bench")
        store = S3Store("bench", endpoint=srv.endpoint, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
                        region=REGION, virtual_hosted_style_request=False, client_options={"allow_http": True})
        rows = {}
        n = args.n
        rows["put 1 KiB"] = (_ms(lambda i: boto.put_object(Bucket="bench", Key=f"b/{i}", Body=small), n),
                             _ms(lambda i: obstore.put(store, f"o/{i}", small), n))
        rows["get 1 KiB"] = (_ms(lambda i: boto.get_object(Bucket="bench", Key=f"b/{i}")["Body"].read(), n),
                             _ms(lambda i: obstore.get(store, f"o/{i}").bytes(), n))
        rows["put if absent"] = (
            _ms(lambda i: boto.put_object(Bucket="bench", Key=f"bc/{i}", Body=small, IfNoneMatch="*"), n),
            _ms(lambda i: obstore.put(store, f"oc/{i}", small, mode="create"), n))
        etag_b = [boto.head_object(Bucket="bench", Key=f"bc/{i}")["ETag"] for i in range(n)]
        etag_o = [obstore.head(store, f"oc/{i}")["e_tag"] for i in range(n)]
        rows["compare-and-swap"] = (
            _ms(lambda i: boto.put_object(Bucket="bench", Key=f"bc/{i}", Body=b"y", IfMatch=etag_b[i]), n),
            _ms(lambda i: obstore.put(store, f"oc/{i}", b"y", mode={"e_tag": etag_o[i]}), n))
        rows["put 20 MB"] = (_ms(lambda i: boto.put_object(Bucket="bench", Key=f"big/{i}", Body=big), 5),
                             _ms(lambda i: obstore.put(store, f"big/{i}", big), 5))

        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, row_group_size=100_000)
        obstore.put(store, "t.parquet", sink.getvalue().to_pybytes())
        s3fs = pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION,
                                 endpoint_override=srv.endpoint, scheme="http", allow_bucket_creation=False)

        fs = S3Storage(srv.storage_options)

        def via_obstore(_):
            with fs.open_input("s3://bench/t.parquet") as f:
                return pq.read_table(f, columns=["c3"])

        def via_arrow(_):
            with s3fs.open_input_file("bench/t.parquet") as f:
                return pq.read_table(f, columns=["c3"])

        rows["parquet 1 of 8 columns"] = (_ms(via_arrow, 10), _ms(via_obstore, 10))
        with counting() as c:
            via_obstore(0)
        print(f"parquet file {sink.getvalue().size / 1e6:.1f} MB; S3Storage.open_input requests: {c.counts}")
    print(f"{'median ms':<26}{'boto3':>10}{'obstore':>10}   (parquet row: pyarrow S3FileSystem vs S3Storage.open_input)")
    for k, (a, b) in rows.items():
        print(f"{k:<26}{a:>10.2f}{b:>10.2f}")


if __name__ == "__main__":
    main()
