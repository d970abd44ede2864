"""A real S3 server for the loader's S3 output: Ceph's RADOS gateway on a
one-node Ceph (infra/local/ceph_s3.py), started in tmp_path, and Parquet
through pyarrow's S3 file system on it: bucket, write, list, read back,
copy, a multipart upload, delete; and boto3's view of the same objects.
Debian's ceph packages are installed by make setup
(scripts/ensure-system-packages.sh); where they are missing the server's
start fails and names them."""
from __future__ import annotations

import importlib.util
import os

import pytest

from infra.local.ceph_s3 import CephS3


@pytest.fixture
def ceph_s3(tmp_path, monkeypatch):
    # Ceph 16's gateway refuses aws-chunked uploads with trailing checksums,
    # which pyarrow's AWS SDK sends unless told otherwise (read per client)
    for name, value in CephS3.client_env().items():
        monkeypatch.setenv(name, value)
    with CephS3().start(tmp_path / "ceph") as s3:
        yield s3


def test_parquet_round_trip_on_ceph_s3(ceph_s3):
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs = pafs.S3FileSystem(**ceph_s3.pyarrow_options())
    fs.create_dir("samsa-warehouse")
    assert fs.get_file_info("samsa-warehouse").type == pafs.FileType.Directory

    table = pa.table({"offset": pa.array(range(5000), pa.int64()),
                      "page": [f"/page/{i % 37}" for i in range(5000)]})
    pq.write_table(table, "samsa-warehouse/page_views/hour=0/part-0.parquet", filesystem=fs)
    listed = fs.get_file_info(pafs.FileSelector("samsa-warehouse/page_views", recursive=True))
    files = {i.path: i.size for i in listed if i.type == pafs.FileType.File}
    assert list(files) == ["samsa-warehouse/page_views/hour=0/part-0.parquet"]
    assert files["samsa-warehouse/page_views/hour=0/part-0.parquet"] > 0
    assert pq.read_table("samsa-warehouse/page_views/hour=0/part-0.parquet",
                         filesystem=fs).equals(table)
    assert pq.read_table("samsa-warehouse/page_views", filesystem=fs).num_rows == 5000

    # CopyObject, and a move (a copy and a delete on S3)
    fs.copy_file("samsa-warehouse/page_views/hour=0/part-0.parquet",
                 "samsa-warehouse/copy/part-0.parquet")
    assert pq.read_table("samsa-warehouse/copy/part-0.parquet", filesystem=fs).equals(table)
    fs.move("samsa-warehouse/copy/part-0.parquet", "samsa-warehouse/moved/part-0.parquet")
    assert fs.get_file_info("samsa-warehouse/copy/part-0.parquet").type == pafs.FileType.NotFound

    # more than 5 MB: a multipart upload
    blob = os.urandom(12 << 20)
    with fs.open_output_stream("samsa-warehouse/big.bin") as f:
        f.write(blob)
    assert fs.get_file_info("samsa-warehouse/big.bin").size == len(blob)
    with fs.open_input_file("samsa-warehouse/big.bin") as f:
        assert f.read() == blob

    if importlib.util.find_spec("boto3"):
        import boto3
        client = boto3.client("s3", **ceph_s3.boto3_options())
        keys = [o["Key"] for o in client.list_objects_v2(Bucket="samsa-warehouse")["Contents"]]
        assert {"big.bin", "moved/part-0.parquet",
                "page_views/hour=0/part-0.parquet"} <= set(keys)
        # a multipart object's ETag ends "-<parts>" (pyarrow's parts: 10 MB)
        etag = client.head_object(Bucket="samsa-warehouse", Key="big.bin")["ETag"]
        assert etag.strip('"').rpartition("-")[2] == "2"

    fs.delete_file("samsa-warehouse/big.bin")
    assert fs.get_file_info("samsa-warehouse/big.bin").type == pafs.FileType.NotFound
    fs.delete_dir("samsa-warehouse")
    assert fs.get_file_info("samsa-warehouse").type == pafs.FileType.NotFound
