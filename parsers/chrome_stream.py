"""Read a Chrome trace's events as columns, a piece at a time, sharing pieces with a helper.

The document is never held whole: an uncompressed file is cut into spans by reading only a
window at each cut (:class:`chrome_chunks.Spans`), and whoever decodes a run reads its bytes
itself; a compressed file or given bytes are streamed (:class:`chrome_chunks.Pieces`). Every
run of events is decoded to columns (:func:`chrome_columns.decode_run`). Decoding is most
of a big trace's reading time and pieces are independent, so when the loader allows two or more
processes (:func:`tracediag.io.worker_pool.helper_processes`, from ``--jobs``) a pool of that many
decodes them: runs go to it while each helper has fewer than three in hand (this process,
which streams the file and joins the results, decodes a run itself only when they are all
busy), and the results are appended in document order. A run that does not decode because it
ends inside a string or nested value (a cut inside one) is joined with the next one and
decoded again here. Anything the piecewise path cannot take (a run wrong in itself, a layout
:mod:`chrome_chunks` cannot place) is read whole (:func:`chrome_columns.read_whole`), which
also words the errors; every such second decoding is counted in :data:`FALLBACKS`, by reason,
for the benchmarks to show.
"""

from __future__ import annotations

import io
import zlib
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tracediag.io import files as fileio
from tracediag.io import worker_pool
from tracediag.io.release_memory import release_free_memory
from tracediag.parsers import chrome_chunks
from tracediag.parsers.chrome_columns import (
    ColumnBuilder,
    EventColumns,
    Refused,
    Unfit,
    decode_run,
    read_whole,
)
from tracediag.parsers.chrome_decode import HUGE_INTS

_PIECE_BYTES = 4 << 20
_Run = bytes | tuple[int, int]  # a run's text, or its span of the file (chrome_chunks)
# Helpers start once this many runs were seen, and only when two runs at least are left for
# them: a file of one or two runs has nothing to decode in parallel, and a pool costs it ~0.08
# CPU s (the fork, the helper's faults on shared pages, the result's pickling). An
# uncompressed file's size tells at once: one of three runs' bytes or more starts them before
# its first run, which this process then needs not decode alone (25 MiB, 6 runs: reading
# 0.35-0.37 -> 0.30-0.31 s on 2 cores).
_POOL_AFTER_RUNS = 1
# Runs a helper holds at most (queued or decoding): enough that it never waits for this
# process, which also streams the file and joins the results.
_IN_HAND_PER_HELPER = 3
# Runs waiting for their result before this process waits for the oldest.
_MAX_WAITING = 6
#: Documents of this process read whole after the piecewise path gave up, by reason (the
#: exception's name): each cost a second decoding. The benchmarks print it.
FALLBACKS: Counter[str] = Counter()


@dataclass
class _Slot:
    """A run handed out, with the separator after it and its result (a future while a helper
    decodes it)."""

    run: bytes | tuple[int, int]  # the run's text, or its span of the file (chrome_chunks)
    separator: bytes
    result: Future | ColumnBuilder | Refused


def read_columns(
    path: Path, data: bytes | None = None, piece_bytes: int | None = None
) -> EventColumns:
    """The events of the Chrome trace at ``path`` (or of its content ``data``) as columns,
    decoded ``piece_bytes`` (default 4 MiB) at a time.

    Raises :class:`TraceInputError` as :func:`chrome_decode.decode` does for unusable documents.
    """
    helpers = worker_pool.helper_processes()
    piece_bytes = piece_bytes or _PIECE_BYTES
    try:
        if data is None and not fileio.is_gzip(path):  # runs read where they are decoded
            spans = chrome_chunks.Spans(path, piece_bytes)
            pool_after = 0 if path.stat().st_size >= 3 * piece_bytes else _POOL_AFTER_RUNS
            return _read_in_pieces(path, spans, helpers, pool_after)
        with _open(path, data) as stream:
            return _read_in_pieces(path, chrome_chunks.Pieces(stream, piece_bytes), helpers)
    except (Unfit, chrome_chunks.NotPlain, OSError, EOFError, zlib.error) as exc:
        FALLBACKS[type(exc).__name__] += 1  # the whole-document path reads again and says
        # what is wrong, if anything
    return read_whole(path, fileio.read_bytes(path) if data is None else data)


def _open(path: Path, data: bytes | None) -> BinaryIO:
    return io.BytesIO(data) if data is not None else fileio.open_content(path)


def decode_piece(path: Path, run: bytes | tuple[int, int]) -> ColumnBuilder | Refused:
    """:func:`decode_run` of a run given as its text or as its span of the file."""
    return decode_run(path, _text(path, run))


def _text(path: Path, run: bytes | tuple[int, int]) -> bytes:
    return chrome_chunks.read_span(path, run) if isinstance(run, tuple) else run


def _joined(path: Path, first: _Slot, second: _Slot) -> bytes | tuple[int, int]:
    """One run of two consecutive ones (spans of the file stay a span)."""
    if isinstance(first.run, tuple) and isinstance(second.run, tuple):
        return first.run[0], second.run[1]
    return chrome_chunks.join_runs(_text(path, first.run), first.separator, _text(path, second.run))


def _read_in_pieces(
    path: Path,
    pieces: chrome_chunks.Pieces | chrome_chunks.Spans,
    helpers: int,
    pool_after: int = _POOL_AFTER_RUNS,
) -> EventColumns:
    builder = ColumnBuilder()
    waiting: deque[_Slot] = deque()
    pool: ProcessPoolExecutor | None = None
    try:
        for i, (run, separator, more) in enumerate(_with_more(pieces)):
            if helpers > 1 and pool is None and i >= pool_after and more:
                pool = ProcessPoolExecutor(helpers, mp_context=worker_pool.start_context())
            result = None
            if pool is not None and _in_hand(waiting) < _IN_HAND_PER_HELPER * helpers:
                try:
                    result = pool.submit(decode_piece, path, run)
                except BrokenProcessPool:  # a helper died: the rest is decoded here
                    pool.shutdown(wait=False)
                    pool, helpers = None, 0
            if result is None:
                result = decode_piece(path, run)
            waiting.append(_Slot(run, separator, result))
            _append_ready(waiting, builder, path, final=False)
        _append_ready(waiting, builder, path, final=True)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    outside = {HUGE_INTS: pieces.huge_ints} if pieces.huge_ints else {}
    columns = builder.finish(
        pieces.metadata, outside, drop_terminator=pieces.ends_with_empty_object
    )
    del builder
    release_free_memory()  # the pieces' arrays, copied into the joined columns
    return columns


def _with_more(pieces: Iterable[tuple[_Run, bytes]]) -> Iterator[tuple[_Run, bytes, bool]]:
    """Each run and its separator, and whether another run follows it (one run read ahead)."""
    ahead = None
    for piece in pieces:
        if ahead is not None:
            yield (*ahead, True)
        ahead = piece
    if ahead is not None:
        yield (*ahead, False)


def _in_hand(waiting: deque[_Slot]) -> int:
    return sum(isinstance(s.result, Future) and not s.result.done() for s in waiting)


def _append_ready(waiting: deque[_Slot], builder: ColumnBuilder, path: Path, final: bool) -> None:
    """Append the oldest runs' columns while they are ready (all of them when ``final``)."""
    while waiting:
        head = waiting[0]
        if isinstance(head.result, Future):
            if not (final or head.result.done() or len(waiting) > _MAX_WAITING):
                return
            try:
                head.result = head.result.result()
            except BrokenProcessPool:  # the helper died (memory?): decode the run here
                head.result = decode_piece(path, head.run)
        if isinstance(head.result, Refused):
            if not head.result.truncated:  # wrong in itself: no join can mend it
                raise Unfit
            # A cut inside a string or nested array: join the next run.
            if len(waiting) < 2:
                if final:
                    raise Unfit
                return
            waiting.popleft()
            after = waiting.popleft()
            joined = _joined(path, head, after)
            waiting.appendleft(_Slot(joined, after.separator, decode_piece(path, joined)))
            continue
        builder.extend(head.result)
        waiting.popleft()
