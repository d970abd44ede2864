"""The control socket's codec (infra/local/network/control.py), in memory:
a line comes out whole however the bytes are cut, and a reader never holds
more than its cap."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infra.local.network.control import LineReader, LineTooLongError, decode, encode


def feed_all(reader: LineReader, chunks: list[bytes]) -> list[bytes | None]:
    return [reader.feed(chunk) for chunk in chunks]


@pytest.mark.parametrize("chunks, results", [
    ([b'{"op": "status"}\n'], [b'{"op": "status"}']),
    ([b'{"op": ', b'"status"}', b"\n"], [None, None, b'{"op": "status"}']),
    ([b"ab", b"c\nnext line\n"], [None, b"abc"]),        # one line per connection
    ([b'{"op": "status"}', b""], [None, b'{"op": "status"}']),   # closed without newline
    ([b""], [b""]),                                       # closed before a byte
    ([b"\n"], [b""]),
])
def test_a_line_comes_out_once_whole(chunks, results):
    assert feed_all(LineReader(100), chunks) == results


def test_a_line_of_the_cap_is_read_and_one_byte_more_is_refused_before_it_is_held():
    assert LineReader(5).feed(b"12345\n") == b"12345"
    assert feed_all(LineReader(5), [b"123", b"45", b"\n"]) == [None, None, b"12345"]
    reader = LineReader(5)
    assert reader.feed(b"1234") is None
    with pytest.raises(LineTooLongError, match="at most 5 bytes"):
        reader.feed(b"56")
    assert reader.buffered == 4
    with pytest.raises(LineTooLongError):
        LineReader(5).feed(b"123456\n")


@given(st.binary(max_size=300).filter(lambda b: b"\n" not in b),
       st.lists(st.integers(0, 300), max_size=10))
def test_however_the_bytes_are_cut_the_line_is_the_same(line, cuts):
    data = line + b"\n"
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in zip(points, points[1:])]
    results = feed_all(LineReader(300), chunks)
    assert results[-1] == line and set(results[:-1]) <= {None}


def test_a_message_is_a_json_object_on_one_line():
    message = {"op": "shape", "from": "dc-a", "to": "analysis", "note": "two\nlines"}
    line = encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(LineReader(1000).feed(line)) == message
    for bad in (b"[1, 2]", b"{not json", b"\xff\xfe", b""):
        with pytest.raises(ValueError):
            decode(bad)
