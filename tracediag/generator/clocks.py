"""Per-rank clocks: what each trace's timestamps are, given the simulation's true time.

Device flavour: every NeuronCore has its own free-running clock, ``device = true + offset``,
with offsets seconds from zero and hundreds of µs to ms apart (seeded, distinct), so a reader
must align ranks. GPU flavour: timestamps are the host clock, shared by the ranks of one host
(``GPUS_PER_HOST``) and a few tens of µs apart between hosts.
"""

from __future__ import annotations

import numpy as np

from tracediag.generator import hardware as hw

DEVICE_EPOCH_NS = 10_261_883_214  # device clocks read ~10 s at the step's true origin
CHROME_ORIGIN_NS = 4_000_000_000  # Kineto ts (µs) are relative to baseTimeNanoseconds
CHROME_BASE_TIME_NS = 1_735_689_600_000_000_000  # 2025-01-01T00:00:00Z, fixed for determinism


def device_offsets(ranks: int, seed: int) -> np.ndarray:
    """Offset (ns) of each rank's device clock: ``device = true + offset``; all distinct."""
    rng = np.random.default_rng([seed, 3])
    spread = rng.permutation(ranks).astype(np.int64) * 450_000  # distinct by construction
    return DEVICE_EPOCH_NS + 300_000 + spread + rng.integers(0, 400_000, ranks)


def host_offsets(ranks: int, seed: int) -> np.ndarray:
    """Offset (ns) of each rank's trace clock in the GPU flavour (0 on the first host)."""
    hosts = np.arange(ranks) // hw.GPUS_PER_HOST
    rng = np.random.default_rng([seed, 4])
    per_host = np.concatenate([[0], rng.integers(5_000, 80_000, int(hosts.max()))])
    return CHROME_ORIGIN_NS + per_host[hosts].astype(np.int64)
