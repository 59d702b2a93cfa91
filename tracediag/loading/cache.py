"""A columnar cache of what readers return, so that reopening a big trace skips parsing.

Two kinds of entry: one per read unit (a trace file, or one rank's profile directory: the
:class:`~tracediag.model.assembly.RankPart` list its reader returned), keyed by a hash of the unit's
bytes, the path as given (readers take ranks from names and record the path) and the reader;
and one per job (the assembled, not yet aligned :class:`~tracediag.model.schema.Trace`), keyed by its
units' keys, since assembling costs more than reading the result back. Every key also covers
the tool version, :data:`CACHE_FORMAT` and the code of the tool's modules.

An entry is a directory of data only: Arrow IPC files (one per DataFrame, zstd-compressed
buffers, memory-mapped on load; :mod:`tracediag.loading.cache_frames`) and a JSON manifest
(``manifest.json``: format version, class, each frame's column specs and the fields beside the
frames under an explicit schema; :mod:`tracediag.loading.cache_manifest`). Nothing read from the
cache is unpickled, evaluated or imported: a cache directory may be shared, or restored from
another job's artifacts. An entry is used only when its directory and files belong to the
current user and no one else may write them (else it is ignored, with a note through the
loader's progress channel), and only once every table and field has been checked against what
this version writes; an unreadable or malformed entry is a miss, removed and rewritten.

Entries are written into a private temporary directory and renamed into place, so no reader sees
half an entry. No failure of the cache ever reaches the user. The cache directory is created
0700, and keeps within ``$TRACEDIAG_CACHE_MAX_GB`` (:mod:`tracediag.loading.cache_limits`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import orjson

from tracediag import __version__
from tracediag.loading import cache_limits
from tracediag.loading.cache_checks import check_item
from tracediag.loading.cache_frames import read_frame, write_frame
from tracediag.loading.cache_manifest import OBJECTS, ManifestError, decode_typed, encode_typed
from tracediag.model import schema as S
from tracediag.model.assembly import RankPart

#: Bumped whenever the on-disk layout or the encoding of columns changes (2: JSON manifest,
#: checked on load; 1 was a pickled manifest, never read again).
CACHE_FORMAT = 2
#: SHA-256 rather than BLAKE2b: with the SHA extensions of current x86 and ARM CPUs it hashes
#: 2-3x faster (0.65 vs 0.26 GB/s measured here), and it is as collision-resistant.
HASH_NAME = "sha256"
_CHUNK = 1 << 20
MANIFEST = "manifest.json"
#: The manifests of earlier formats: an entry holding one is removed, never read.
LEGACY_MANIFESTS = ("manifest.pkl",)
#: A manifest holds specs, metadata and categories (names of events: kilobytes to megabytes);
#: anything far larger is not one of ours.
_MAX_MANIFEST_BYTES = 1 << 30
_CLASSES = {"RankPart": RankPart, "Trace": S.Trace}
#: Where notes about ignored entries go: the loader's progress channel (the CLI's stderr lines).
Note = Callable[[str], None]


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


def load_parts(
    key: str, root: Path | None = None, note: Note | None = None
) -> list[RankPart] | None:
    """The parts cached under ``key``, or None when absent or unusable (see :func:`load_trace`)."""
    return _load(key, RankPart, root, note)


def store_parts(key: str, parts: list[RankPart], root: Path | None = None) -> bool:
    """Write ``parts`` under ``key`` atomically; False (and nothing written) when it cannot."""
    return _store(key, parts, root)


def load_trace(key: str, root: Path | None = None, note: Note | None = None) -> S.Trace | None:
    """The assembled trace cached under ``key``, or None: absent; malformed (then removed);
    or not private to this user (then left alone, and ``note`` hears why)."""
    got = _load(key, S.Trace, root, note)
    return got[0] if got and len(got) == 1 else None


def store_trace(key: str, trace: S.Trace, root: Path | None = None) -> bool:
    """Write an assembled (not yet aligned) trace under ``key``; False when it cannot."""
    # The last entry of a read that parsed anything: the cache is pruned here, once per read,
    # rather than after each file's entry (each pruning walks the whole cache directory).
    return _store(key, [trace], root, prune=True)


# ---- reading an entry -----------------------------------------------------------------------


class UnsafeEntry(Exception):
    """An entry another user owns or may write: not to be trusted. ``ours``: the current user
    owns it (then it is removed, to be rewritten private); else it is left alone."""

    def __init__(self, message: str, ours: bool) -> None:
        super().__init__(message)
        self.ours = ours


def _load(key: str, cls: type, root: Path | None, note: Note | None) -> list | None:
    entry = (root or cache_root()) / key
    try:
        dir_fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None  # absent (the usual miss), or not a directory
    try:
        _check_private(dir_fd, "the entry directory")
        if MANIFEST not in os.listdir(dir_fd):
            raise ManifestError("no manifest (an entry of an earlier format)")
        manifest = orjson.loads(_read_private(dir_fd, MANIFEST))
        items = _decode_entry(manifest, cls, dir_fd)
        cache_limits.mark_used(entry / MANIFEST)
        return items
    except UnsafeEntry as exc:
        if note is not None:
            note(f"cache: ignoring {entry}: {exc}")
        if exc.ours:
            shutil.rmtree(entry, ignore_errors=True)
        return None
    except Exception:  # noqa: BLE001 - any damage (truncation, bad JSON, wrong schema) is a miss
        shutil.rmtree(entry, ignore_errors=True)
        return None
    finally:
        os.close(dir_fd)


def _check_private(fd: int, what: str) -> os.stat_result:
    """The status of ``fd``; UnsafeEntry unless the current user owns it and no one else may
    write it."""
    st = os.fstat(fd)
    uid = os.geteuid()
    if st.st_uid != uid:
        raise UnsafeEntry(f"{what} belongs to user {st.st_uid}, not to you ({uid})", ours=False)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.filemode(st.st_mode)
        raise UnsafeEntry(f"other users may write {what} ({mode})", ours=True)
    return st


def _open_private(dir_fd: int, name: str) -> int:
    """A descriptor of the regular file ``name`` of the entry, checked private (no symlinks)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(_check_private(fd, name).st_mode):
            raise ManifestError(f"{name} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_private(dir_fd: int, name: str) -> bytes:
    fd = _open_private(dir_fd, name)
    try:
        size = os.fstat(fd).st_size
        if size > _MAX_MANIFEST_BYTES:
            raise ManifestError(f"{name} of {size} bytes")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def _decode_entry(manifest: object, cls: type, dir_fd: int) -> list:
    """The items of a decoded manifest, their frames read and every one checked."""
    if type(manifest) is not dict or set(manifest) != {"format", "class", "items"}:
        raise ManifestError("not a manifest of this version")
    if manifest["format"] != CACHE_FORMAT or manifest["class"] != cls.__name__:
        raise ManifestError("not an entry of this kind")
    if type(manifest["items"]) is not list:
        raise ManifestError("items that are not a list")
    schema = OBJECTS[cls.__name__]
    frames = _frame_fields(cls)
    items = []
    for i, item in enumerate(manifest["items"]):
        if type(item) is not dict or set(item) != {"objects", "frames"}:
            raise ManifestError("an item without its objects and frames")
        objects, specs = item["objects"], item["frames"]
        if type(objects) is not dict or set(objects) != set(schema):
            raise ManifestError("objects of other fields than this version writes")
        if type(specs) is not dict or set(specs) != frames:
            raise ManifestError("frames of other fields than this version writes")
        values = {name: decode_typed(sub, objects[name]) for name, sub in schema.items()}
        for name in sorted(frames):
            fd = _open_private(dir_fd, f"{i}-{name}.arrow")
            try:
                values[name] = read_frame(fd, specs[name])
            finally:
                os.close(fd)
        built = cls(**values)
        check_item(built)
        items.append(built)
    return items


@functools.cache
def _frame_fields(cls: type) -> frozenset[str]:
    """The DataFrame fields of a cached class (every field its manifest schema does not hold)."""
    return frozenset(f.name for f in dataclasses.fields(cls)) - set(OBJECTS[cls.__name__])


# ---- writing an entry -----------------------------------------------------------------------


def _store(key: str, items: list, root: Path | None, prune: bool = False) -> bool:
    """Each item is a dataclass: its DataFrame fields go to Arrow files, the rest to the JSON
    manifest under :data:`~tracediag.loading.cache_manifest.OBJECTS`' schema."""
    root = root or cache_root()
    tmp = None
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        cls = type(items[0]) if items else RankPart
        if cls not in _CLASSES.values() or any(type(item) is not cls for item in items):
            raise TypeError("only RankPart lists and traces are cached")
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))  # 0700
        schema = OBJECTS[cls.__name__]
        manifest = {"format": CACHE_FORMAT, "class": cls.__name__, "items": []}
        for i, item in enumerate(items):
            # What a load would refuse is not written: it would be a miss at every reopen.
            check_item(item)
            manifest["items"].append(
                {
                    "objects": {
                        k: encode_typed(sub, getattr(item, k)) for k, sub in schema.items()
                    },
                    "frames": {
                        k: write_frame(getattr(item, k), str(tmp / f"{i}-{k}.arrow"))
                        for k in sorted(_frame_fields(cls))
                    },
                }
            )
        fd = os.open(tmp / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(manifest))
        try:
            os.rename(tmp, root / key)
        except OSError:  # another process stored the same entry first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
        if prune:
            cache_limits.prune(root, keep=key, manifest_name=MANIFEST, legacy=LEGACY_MANIFESTS)
        return True
    except Exception:  # noqa: BLE001 - a full disk or an uncacheable column only costs the cache
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return False
