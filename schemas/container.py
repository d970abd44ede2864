"""Avro object container files (the format Hadoop tools read): whole files
of records, written and read (the tests use it; the loader writes its own
containers: hadoop_loader/frames.py, and pull.py's error output).

Written with fastavro (deflate by default), readable by any Avro
implementation; the tests read them back with Apache's reference ``avro``
package.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import fastavro


def write_records(path: str, schema: Any, records: Iterable[dict], *, codec: str = "deflate",
                  metadata: dict[str, str] | None = None) -> int:
    """Write ``records`` (of the self-contained ``schema``) to a new container
    file; the number written."""
    count = 0

    def counted() -> Iterator[dict]:
        nonlocal count
        for record in records:
            count += 1
            yield record

    with open(path, "wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema), counted(), codec=codec,
                        metadata=metadata)
    return count


def read_records(path: str, reader_schema: Any = None) -> Iterator[dict]:
    """The records of a container file, resolved to ``reader_schema`` if given."""
    with open(path, "rb") as f:
        yield from fastavro.reader(f, reader_schema=reader_schema)
