"""The record format of the write journal (``actors.write_journal``), and reading a segment back.

A record is an 8-byte header (payload length, checksum) and an Arrow IPC stream. The checksum is a
CRC-32 of the length's bytes and the payload, offset by a constant, so no run of zero bytes (what a
machine crash can leave past the last written byte) is a record, and a false match of random bytes has
a chance of 2**-32.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import pyarrow as pa

_HEADER = struct.Struct("<II")  # payload length, checksum
_LENGTH = struct.Struct("<I")


def encode(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    payload: bytes = sink.getvalue().to_pybytes()
    return _HEADER.pack(len(payload), _checksum(len(payload), payload)) + payload


def _checksum(length: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(_LENGTH.pack(length))) ^ 0x5A5A5A5A


def _whole_at(data: bytes, at: int) -> int | None:
    """The payload length of a record whose header and checksum are whole at ``at``, else None."""
    if at + _HEADER.size > len(data):
        return None
    length, crc = _HEADER.unpack_from(data, at)
    end = at + _HEADER.size + length
    if end > len(data) or _checksum(length, data[at + _HEADER.size : end]) != crc:
        return None
    return int(length)


def _cut_short(data: bytes, at: int) -> bool:
    """What an append cut short looks like from ``at`` to the end: less than a header, a length past the
    end of the file, or zeros (a machine crash's unwritten tail). A record of its full length whose
    checksum fails is damage (a bit flipped on the disk), not a cut."""
    if at + _HEADER.size > len(data) or not data[at:].strip(b"\0"):
        return True
    length = _HEADER.unpack_from(data, at)[0]
    return bool(at + _HEADER.size + length > len(data))


def _next_whole(data: bytes, start: int) -> int | None:
    """The first offset from ``start`` where a whole record begins (a forward scan), else None."""
    if not data[start:].strip(b"\0"):
        return None
    for at in range(start, len(data) - _HEADER.size + 1):
        if _whole_at(data, at) is not None:
            return at
    return None


@dataclass
class Segment:
    """What a segment file holds: its whole records, and the byte ranges that are not one."""

    tables: list[pa.Table] = field(default_factory=list)
    bad: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of bytes no whole record covers
    torn: bool = False  # it ends in an append cut short (the newest segment only): never acknowledged

    @property
    def damaged(self) -> bool:
        return bool(self.bad)


def read_segment(data: bytes, newest: bool) -> Segment:
    """Every whole record of ``data`` in order, past any damage (found by a forward scan for the next
    whole record). Bytes no whole record covers are *torn* only at the end of the newest segment, with
    no whole record after them, when they look cut short (``_cut_short``: a crash mid-append); anything
    else is *damaged* (a flipped bit, a lost sector, a record whose checksum holds but whose Arrow does
    not decode): an acknowledged write may have been there."""
    segment = Segment()
    at = 0
    while at < len(data):
        length = _whole_at(data, at)
        if length is not None:
            payload = data[at + _HEADER.size : at + _HEADER.size + length]
            try:
                segment.tables.append(pa.ipc.open_stream(payload).read_all())
            except pa.ArrowException:
                segment.bad.append((at, at + _HEADER.size + length))
            at += _HEADER.size + length
            continue
        resume = _next_whole(data, at + 1)
        if resume is None:
            if newest and _cut_short(data, at):
                segment.torn = True
            else:
                segment.bad.append((at, len(data)))
            break
        segment.bad.append((at, resume))
        at = resume
    return segment
