"""A columnar cache of what readers return, so that reopening a big trace skips parsing.

Two kinds of entry: one per read unit (a trace file, or one rank's profile directory: the
:class:`~tracediag.model.assembly.RankPart` list its reader returned), keyed by a hash of the unit's
bytes, the path as given (readers take ranks from names and record the path) and the reader;
and one per job (the assembled, not yet aligned :class:`~tracediag.model.schema.Trace`), keyed by its
units' keys, since assembling costs more than reading the result back. Every key also covers
the tool version, :data:`CACHE_FORMAT` and the code of the tool's modules.

An entry is a directory of Arrow IPC files (one per DataFrame, zstd-compressed buffers,
memory-mapped on load) and a pickled manifest with the exact pandas dtypes (categories
included) and the objects beside the frames (:class:`~tracediag.model.schema.RankMeta`, inputs).
Entries are written into a temporary directory and renamed into place, so no reader sees half
an entry; an unreadable entry is removed and rewritten. No failure of the cache ever reaches
the user. The cache keeps within ``$TRACEDIAG_CACHE_MAX_GB`` (:mod:`tracediag.loading.cache_limits`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc

from tracediag import __version__
from tracediag.loading import cache_limits
from tracediag.model import schema as S
from tracediag.model.assembly import RankPart

#: Bumped whenever the on-disk layout or the encoding of columns changes.
CACHE_FORMAT = 1
#: SHA-256 rather than BLAKE2b: with the SHA extensions of current x86 and ARM CPUs it hashes
#: 2-3x faster (0.65 vs 0.26 GB/s measured here), and it is as collision-resistant.
HASH_NAME = "sha256"
_CHUNK = 1 << 20
_MANIFEST = "manifest.pkl"
#: zstd buffers: about 20x smaller than raw on events (a cache of multi-GB traces must fit a
#: disk) and still read back at several hundred MB/s.
_WRITE_OPTIONS = ipc.IpcWriteOptions(compression="zstd" if pa.Codec.is_available("zstd") else None)


def cache_root() -> Path:
    """``$TRACEDIAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/tracediag``, else ``~/.cache/tracediag``."""
    explicit = os.environ.get("TRACEDIAG_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "tracediag" if xdg else Path.home() / ".cache" / "tracediag"


def content_hash(path: Path) -> str:
    """Hex digest of a file's bytes, or of every file under a directory (names and bytes).

    Streams in large chunks into one reused buffer; hashlib releases the GIL on such updates, so
    several files hash in parallel threads.
    """
    digest = hashlib.new(HASH_NAME)
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        if f != path:
            # The name is hashed too: renaming rank_1 to rank_2 changes what a reader returns.
            digest.update(f"{f.relative_to(path).as_posix()}\0".encode())
        with open(f, "rb", buffering=0) as stream:
            while n := stream.readinto(buf):
                digest.update(view[:n])
        digest.update(b"\0")
    return digest.hexdigest()


def cache_key(path: Path, reader_format: str, digest: str) -> str:
    """The entry name of ``path`` (as the user gave it) read by ``reader_format``."""
    return combined_key([reader_format, str(path), digest])


def combined_key(fields: list[str]) -> str:
    """An entry name for ``fields`` under this tool's format, version and code."""
    spec = "\0".join([str(CACHE_FORMAT), __version__, code_fingerprint(), *fields])
    return hashlib.sha256(spec.encode()).hexdigest()[:40]


@functools.cache
def code_fingerprint() -> str:
    """Names, sizes and mtimes of the tool's modules: an edited reader (a development install,
    a patched release) must not be served what the previous code parsed."""
    import tracediag
    import tracediag.parsers

    digest = hashlib.sha256()
    for package in (tracediag, tracediag.parsers):
        for f in sorted(Path(package.__file__).parent.rglob("*.py")):
            st = f.stat()
            digest.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def load_parts(key: str, root: Path | None = None) -> list[RankPart] | None:
    """The parts cached under ``key``, or None when absent or unreadable (then it is removed)."""
    return _load(key, RankPart, root)


def store_parts(key: str, parts: list[RankPart], root: Path | None = None) -> bool:
    """Write ``parts`` under ``key`` atomically; False (and nothing written) when it cannot."""
    return _store(key, parts, root)


def load_trace(key: str, root: Path | None = None) -> S.Trace | None:
    """The assembled trace cached under ``key``, or None (see :func:`load_parts`)."""
    got = _load(key, S.Trace, root)
    return got[0] if got and len(got) == 1 else None


def store_trace(key: str, trace: S.Trace, root: Path | None = None) -> bool:
    """Write an assembled (not yet aligned) trace under ``key``; False when it cannot."""
    # The last entry of a read that parsed anything: the cache is pruned here, once per read,
    # rather than after each file's entry (each pruning walks the whole cache directory).
    return _store(key, [trace], root, prune=True)


def _load(key: str, cls: type, root: Path | None) -> list | None:
    entry = (root or cache_root()) / key
    if not entry.is_dir():
        return None
    try:
        with open(entry / _MANIFEST, "rb") as f:
            manifest = pickle.load(f)
        cache_limits.mark_used(entry / _MANIFEST)
        if manifest["format"] != CACHE_FORMAT or manifest["class"] != cls.__name__:
            raise ValueError("not an entry of this kind")
        items = []
        for i, item in enumerate(manifest["items"]):
            frames = {
                name: _read_frame(entry / f"{i}-{name}.arrow", spec)
                for name, spec in item["frames"].items()
            }
            items.append(cls(**item["objects"], **frames))
        return items
    except Exception:  # noqa: BLE001 - any damage (truncation, bad pickle, wrong schema) is a miss
        shutil.rmtree(entry, ignore_errors=True)
        return None


def _store(key: str, items: list, root: Path | None, prune: bool = False) -> bool:
    """Each item is a dataclass: its DataFrame fields go to Arrow files, the rest is pickled."""
    root = root or cache_root()
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        manifest = {
            "format": CACHE_FORMAT,
            "class": type(items[0]).__name__ if items else "",
            "items": [],
        }
        for i, item in enumerate(items):
            values = {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
            manifest["items"].append(
                {
                    "objects": {k: v for k, v in values.items() if not isinstance(v, pd.DataFrame)},
                    "frames": {
                        k: _write_frame(v, tmp / f"{i}-{k}.arrow")
                        for k, v in values.items()
                        if isinstance(v, pd.DataFrame)
                    },
                }
            )
        with open(tmp / _MANIFEST, "wb") as f:
            pickle.dump(manifest, f, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            os.rename(tmp, root / key)
        except OSError:  # another process stored the same entry first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
        if prune:
            cache_limits.prune(root, keep=key, manifest_name=_MANIFEST)
        return True
    except Exception:  # noqa: BLE001 - a full disk or an unencodable column only costs the cache
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return False


# ---- frames <-> Arrow ---------------------------------------------------------------------
# Each column is stored by what restores it exactly: categoricals as their integer codes with
# the CategoricalDtype (categories' own dtype and order) in the manifest; numpy numeric and bool
# columns as is; object columns of str as Arrow strings; pandas extension columns (the ``str``
# dtype) through Arrow with their dtype recorded. Anything else (objects that are not all str)
# is pickled into the manifest: rare, small, and exact.


def _write_frame(df: pd.DataFrame, path: Path) -> dict:
    arrays, columns = [], []
    for _, col in df.items():
        dtype = col.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            kind, arr = "cat", pa.array(col.cat.codes.to_numpy())
        elif isinstance(dtype, np.dtype) and dtype.kind in "biuf":
            kind, arr = "num", pa.array(col.to_numpy())
        elif pd.api.types.is_object_dtype(dtype) and pd.api.types.infer_dtype(
            col, skipna=False
        ) in ("string", "empty"):
            kind, arr = "str", pa.array(col.to_numpy(), type=pa.large_string())
        elif isinstance(dtype, pd.StringDtype):
            kind, arr = "ext", pa.array(col)
        else:
            columns.append(("pickled", col.array))  # keeps extension dtypes (Int64)
            continue
        columns.append((kind, dtype))
        arrays.append(arr)
    # Positional Arrow names: pandas allows duplicate and non-str column labels.
    table = pa.Table.from_arrays(arrays, names=[f"c{j}" for j in range(len(arrays))])
    with ipc.new_file(str(path), table.schema, options=_WRITE_OPTIONS) as writer:
        writer.write_table(table)
    plain = pd.RangeIndex(len(df))
    index = None if df.index.equals(plain) and type(df.index) is pd.RangeIndex else df.index
    return {
        "rows": len(df),
        "labels": df.columns,
        "columns": columns,
        "index": index,
        "attrs": dict(df.attrs),
    }


def _read_frame(path: Path, spec: dict) -> pd.DataFrame:
    with pa.memory_map(str(path), "r") as source:
        table = ipc.open_file(source).read_all()
        if table.num_columns and table.num_rows != spec["rows"]:
            raise ValueError(f"{path.name}: {table.num_rows} rows, manifest says {spec['rows']}")
        stored = iter(table.columns)
        data = []
        for kind, payload in spec["columns"]:
            if kind == "pickled":
                data.append(payload)
                continue
            col = next(stored)
            if kind == "cat":
                # Copies off the memory map: the caller owns (and may write) its arrays.
                codes = col.to_numpy().copy()
                data.append(pd.Categorical.from_codes(codes, dtype=payload, validate=False))
            elif kind == "num":
                data.append(col.to_numpy().astype(payload, copy=True))
            elif kind == "str":
                data.append(col.to_numpy(zero_copy_only=False).astype(object, copy=False))
            else:
                data.append(col.to_pandas().astype(payload).array)
    index = spec["index"] if spec["index"] is not None else pd.RangeIndex(spec["rows"])
    # Series with explicit dtypes: the frame constructor alone would turn object str into str.
    columns = {
        j: pd.Series(values, index=index, dtype=values.dtype, copy=False)
        for j, values in enumerate(data)
    }
    frame = pd.DataFrame(columns, index=index, copy=False)
    frame.columns = spec["labels"]
    frame.attrs = spec["attrs"]
    return frame
