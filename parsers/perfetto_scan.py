"""The packet records of a Perfetto buffer found with numpy (the records
:func:`perfetto_stream.scan_records` finds, without its Python loop per record).

Every byte ``0x0A`` (field 1, wire type 2: a packet's tag) is a candidate record start; the
length varint after it gives where the next record would start. The records are the chain of
candidates from offset 0, found by pointer doubling (``next``, ``next∘next``, ... over the
candidates): a few numpy passes over the candidates, however many records the chain holds.
Where the chain meets anything else (another top-level field, a length header of five bytes or
more, damaged framing) :func:`perfetto_stream.scan_records` reads on from there, so records,
counts and errors stay exactly its own.
"""

from __future__ import annotations

import numpy as np

from tracediag.parsers.perfetto_stream import (
    MAX_RECORD_BYTES,
    FramingError,
    scan_records,
)

_PACKET_TAG = 0x0A
_HEADER_BYTES = 4  # length varints of up to four bytes (2**28 bytes) are read here


def scan(buf: bytes, counts: dict[str, int]) -> tuple[np.ndarray, int]:
    """Complete packet records of ``buf`` as an ``(n, 3)`` int64 array of (record offset,
    payload start, payload end), and the offset where the first incomplete record starts
    (``len(buf)`` when none is cut): the reading of :func:`perfetto_stream.scan_records`."""
    end = len(buf)
    data = np.frombuffer(buf, dtype=np.uint8)
    empty = np.zeros((0, 3), dtype=np.int64)
    if not end or data[0] != _PACKET_TAG:
        return _rest(buf, 0, empty, counts)
    cand = np.flatnonzero(data == _PACKET_TAG)
    # The length varint after each candidate tag (bytes past the end read as "cut").
    length = np.zeros(len(cand), dtype=np.int64)
    header = np.zeros(len(cand), dtype=np.int64)  # bytes of the varint; 0: not ended yet
    cut = np.zeros(len(cand), dtype=bool)
    for k in range(_HEADER_BYTES):  # a loop over the varint's bytes
        at = cand + 1 + k
        inside = at < end
        byte = data[np.minimum(at, end - 1)].astype(np.int64)
        open_ = header == 0
        cut |= open_ & ~inside
        live = open_ & inside
        length += np.where(live, (byte & 0x7F) << (7 * k), 0)
        header[live & (byte < 0x80)] = k + 1
    odd = (header == 0) & ~cut  # five bytes or more: scan_records reads (or refuses) it
    odd |= length > MAX_RECORD_BYTES
    nxt = cand + 1 + header + length
    cut |= ~odd & (nxt > end)
    complete = ~odd & ~cut
    # Each complete candidate's successor among the candidates (sink: none of them).
    m = len(cand)
    sink = m
    succ = np.searchsorted(cand, nxt)
    is_cand = complete & (succ < m)
    is_cand[is_cand] = cand[succ[is_cand]] == nxt[is_cand]
    succ = np.where(is_cand & complete[np.minimum(succ, m - 1)], succ, sink)
    succ = np.append(succ, sink)
    path = _chain(succ, sink, complete)
    if not len(path):
        return _rest(buf, 0, empty, counts)
    records = np.stack([cand[path], cand[path] + 1 + header[path], nxt[path]], axis=1)
    after = int(nxt[path[-1]])  # where the chain stops: the end, a cut record, or other data
    if after >= end:
        return records, end
    at = np.searchsorted(cand, after)
    if at < m and cand[at] == after and cut[at]:
        return records, after
    return _rest(buf, after, records, counts)


def _chain(succ: np.ndarray, sink: int, complete: np.ndarray) -> np.ndarray:
    """The complete candidates on the chain from candidate 0, in order."""
    if not complete[0]:
        return np.zeros(0, dtype=np.int64)
    # Powers of the successor map: jumps[k] goes 2**k records on (sink stays sink).
    jumps = [succ]
    steps = np.where(np.arange(len(succ)) == sink, 0, 1)  # records from each to the sink
    while jumps[-1][0] != sink:
        j = jumps[-1]
        steps = steps + steps[j]
        jumps.append(j[j])
    path = np.zeros(1, dtype=np.int64)
    for j in jumps:  # doubling: the first 2**(k+1) records of the chain from the first 2**k
        if len(path) >= steps[0]:
            break
        path = np.concatenate([path, j[path]])
    return path[: steps[0]]


def _rest(buf: bytes, pos: int, records: np.ndarray, counts: dict[str, int]):
    """``records`` and what :func:`perfetto_stream.scan_records` reads from ``pos`` on."""
    try:
        rest, used = scan_records(buf[pos:] if pos else buf, counts)  # a copy: rare
    except FramingError as exc:
        raise FramingError(pos + exc.offset, exc.problem) from None
    rest = np.array(rest, dtype=np.int64).reshape(-1, 3) + pos
    return np.concatenate([records, rest]), pos + used
