"""Human-readable times, sizes and bandwidths for messages and reports."""

from __future__ import annotations


def fmt_ns(ns: float) -> str:
    """1234567 -> '1.235 ms'; keeps 4 significant digits, never loses the unit."""
    ns = float(ns)
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.4g} s"
    if a >= 1e6:
        return f"{ns / 1e6:.4g} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.4g} µs"
    return f"{ns:.0f} ns"


def fmt_bytes(n: float) -> str:
    """32768 -> '32 KiB'."""
    n = float(n)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n:.0f} B"


def fmt_bw(bytes_per_s: float) -> str:
    """2.5e10 -> '25 GB/s' (decimal, as vendors quote links); 1.0195e12 -> '1020 GB/s', not
    '1.02e+03 GB/s'."""
    gb = bytes_per_s / 1e9
    return f"{gb:.0f} GB/s" if abs(gb) >= 999.5 else f"{gb:.3g} GB/s"
