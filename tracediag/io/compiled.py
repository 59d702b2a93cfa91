"""Hot loops compiled by numba, guarded: machine code where numba works, None where it does not.

The callers keep an interpreted or numpy path giving the same results, and choose the compiled
one only where it pays: numba's first use in a process costs 0.5-1 s (its import, then loading
its registries and the machine code, even from the disk cache), which only big inputs win back.
numba is imported here, on first use, never at import time, so commands that never need a
compiled loop never import it.
"""

from __future__ import annotations

from collections.abc import Callable


def compiled(
    func: Callable | Callable[[], Callable], *sample, lazy: bool = False
) -> Callable | None:
    """``func`` compiled by numba (``njit``; the machine code cached on disk, so only the first
    run ever compiles; where no cache directory is writable, compiled in memory each process),
    or None where numba is missing, broken or cannot compile it.

    With ``lazy``, ``func`` is a function returning the one to compile: a module that imports
    numba itself (for its ``register_jitable`` helpers) is then imported only here, inside the
    guard. ``sample`` are
    arguments of one small call, made now, so that a failure to compile or to write the cache
    shows here, once, and not in the middle of the caller's work."""
    try:
        import numba

        if lazy:
            func = func()
    except Exception:  # missing, or broken by its dependencies (a numpy it does not support)
        return None
    for cache in (True, False):
        try:
            kernel = numba.njit(cache=cache, nogil=True)(func)
            kernel(*sample)
            return kernel
        except Exception:
            continue
    return None
