"""What our own exports carry beyond the events, so that reading one back gives the job it was
written from: the same ranks, the same hardware, the same clock domains and vendor figures.

The block is JSON: ``{"schema": SCHEMA, "ranks": {"<rank>": {...}}}`` with, per rank, its
source format, hardware name, the info and vendor summary the analysis reads (hardware
constants from a profile's Metadata, clock domains...), its repair counts and the clock offset
that was applied before writing (the exported times are already aligned). The Perfetto export
writes it as the ``tracediag_meta`` annotation of a slice in its findings process; the Chrome
export as the top-level ``tracediag`` key, with the rank of each process id and the columns the
trace-event format has no place for.
"""

from __future__ import annotations

import orjson

from tracediag.model import schema as S

#: The version of the block; a reader takes only a block of a version it knows.
SCHEMA = 1
#: Perfetto: the flow id of the critical path's arrows (drawn for people, not dependencies),
#: the annotation of each dependency (``<prefix><edge kind>``: the id of the earlier event),
#: the annotation holding the block, and the event annotations only our export writes.
PATH_FLOW = 1
DEPENDENCY_PREFIX = "tracediag_dep_"
META_ANNOTATION = "tracediag_meta"
OWN_ANNOTATIONS = frozenset(
    {META_ANNOTATION, "transpose_flops", "step", *(DEPENDENCY_PREFIX + k for k in S.EDGE_KINDS)}
)
#: ``meta.info`` keys the reader of the export sets itself (not restored from the block).
_READER_KEYS = ("rank_source", "written_by", "clock", "clock_residual_ns")


def rank_block(meta: dict[int, S.RankMeta]) -> dict:
    """The block's ``ranks`` entry: per rank what :func:`restore` puts back."""
    return {
        str(r): {
            "format": m.format,
            "hardware": m.hardware,
            "clock_offset_ns": int(m.clock_offset_ns),
            "info": {k: v for k, v in m.info.items() if k not in _READER_KEYS},
            "summary": m.summary,
            "repairs": m.repairs,
        }
        for r, m in meta.items()
    }


def dumps(block: dict) -> bytes:
    """The block as JSON (numpy scalars and arrays as numbers and lists; anything else as text)."""
    return orjson.dumps(block, option=orjson.OPT_SERIALIZE_NUMPY, default=str)


def ranks_of(block) -> dict[str, dict] | None:
    """The per-rank entries of a parsed block, or None when it is not one of ours we can read."""
    if not isinstance(block, dict) or block.get("schema") != SCHEMA:
        return None
    ranks = block.get("ranks")
    return ranks if isinstance(ranks, dict) else None


def restore(meta: S.RankMeta, entry: dict | None) -> None:
    """Put one rank's exported entry back into the meta its reader made, in place: hardware,
    info (the reader's own keys win), vendor summary and repair counts; the source format and
    the offset applied before writing are kept in ``info`` as ``exported_from`` and
    ``exported_clock_offset_ns``."""
    if not isinstance(entry, dict):
        return
    meta.hardware = str(entry.get("hardware") or meta.hardware)
    info = entry.get("info") if isinstance(entry.get("info"), dict) else {}
    meta.info = {**info, **meta.info}
    meta.info["exported_from"] = str(entry.get("format", ""))
    meta.info["exported_clock_offset_ns"] = int(entry.get("clock_offset_ns") or 0)
    if isinstance(entry.get("summary"), dict):
        meta.summary = {**entry["summary"], **meta.summary}
    for reason, n in (entry.get("repairs") or {}).items():
        if isinstance(n, int):
            meta.count(str(reason), n)
