"""Avro container files written by the project are readable by Apache's
reference implementation (the ``avro`` package), not only by fastavro."""
from __future__ import annotations

import json
import uuid

import avro.datafile as avro_datafile     # Apache's reference implementation ([test] extra)
import avro.io as avro_io
import pytest

from schemas import catalog
from schemas.container import read_records, write_records


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_apache_avro_reads_our_container_files(tmp_path, codec):
    schema = catalog.load("samsa.events.SearchEvent")
    records = [{"header": {"time_ms": 1_700_000_000_000 + i, "host": "h", "service": "search",
                           "event_id": uuid.UUID(int=i).bytes},
                "member_id": None if i % 3 else i, "query": f"query {i}",
                "vertical": ["ALL", "JOBS", "PEOPLE"][i % 3], "result_count": i * 7,
                "page": i % 2} for i in range(500)]
    path = str(tmp_path / "searches.avro")
    assert write_records(path, schema, records, codec=codec,
                         metadata={"samsa.topic": "searches"}) == 500
    with open(path, "rb") as f:
        reader = avro_datafile.DataFileReader(f, avro_io.DatumReader())
        read = list(reader)
        assert reader.get_meta("samsa.topic") == b"searches"
        assert json.loads(reader.get_meta("avro.schema"))["name"] == "samsa.events.SearchEvent"
        reader.close()
    assert read == records
    assert list(read_records(path)) == records
