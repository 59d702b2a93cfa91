"""Pixel helpers for the headless-Chromium screenshot tests: colour masks and row bands."""

from __future__ import annotations

import numpy as np


def rgb(hex_color: str) -> np.ndarray:
    """``#RRGGBB`` as an int16 triple (signed, so differences do not wrap)."""
    return np.array([int(hex_color[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)


def mask(img: np.ndarray, hex_color: str, tol: int) -> np.ndarray:
    """Pixels of ``img`` within ``tol`` of the colour in every channel."""
    return (np.abs(img - rgb(hex_color)) <= tol).all(axis=2)


def bands(pixels: np.ndarray) -> list[tuple[int, int]]:
    """The runs of screen rows where ``pixels`` has any: [(first y, last y)]."""
    ys = np.flatnonzero(pixels.any(axis=1))
    if not len(ys):
        return []
    cut = np.flatnonzero(np.diff(ys) > 1)
    return list(zip(ys[np.r_[0, cut + 1]], ys[np.r_[cut, len(ys) - 1]], strict=True))


def write_slow_step_job(folder) -> dict:
    """The clean-room Kineto writer's 4-rank, 6-step job whose rank 2 host sleeps 8 ms before
    backward in step index 3 only; returns the writer's truth."""
    from tests.cleanroom.kineto_writer import write_job

    return write_job(
        folder,
        ranks=4,
        steps=6,
        warmup=False,
        host_delay_rank=2,
        host_delay_ns=8_000_000,
        host_delay_steps=[3],
    )
