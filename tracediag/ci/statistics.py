"""Small statistical tests the comparisons need (no SciPy dependency): Welch's t-test from
summary statistics, Benjamini-Hochberg q-values, Pearson correlation, and a test for one
change point in a series."""

from __future__ import annotations

import math

import numpy as np


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if not math.isfinite(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def welch(
    mean_a: float, std_a: float, n_a: int, mean_b: float, std_b: float, n_b: int
) -> float | None:
    """Two-sided p-value of Welch's t-test from summary statistics; None with fewer than two
    samples on a side. Two constant samples: 0 when the means differ, 1 when they are equal."""
    if n_a < 2 or n_b < 2:
        return None
    va, vb = std_a * std_a / n_a, std_b * std_b / n_b
    se2 = va + vb
    if se2 == 0.0:
        return 1.0 if mean_a == mean_b else 0.0
    t = (mean_b - mean_a) / math.sqrt(se2)
    df = se2 * se2 / ((va * va / (n_a - 1) if va else 0.0) + (vb * vb / (n_b - 1) if vb else 0.0))
    return t_two_sided_p(t, df)


def bh_qvalues(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values (false discovery rate) of a vector of p-values; NaN stays."""
    p = np.asarray(p, dtype=np.float64)
    q = np.full_like(p, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if not len(ok):
        return q
    order = ok[np.argsort(p[ok])]
    m = len(order)
    ranked = p[order] * m / np.arange(1, m + 1)
    q[order] = np.minimum(1.0, np.minimum.accumulate(ranked[::-1])[::-1])
    return q


def pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson's correlation coefficient; None with fewer than 3 points or a constant side."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 3 or x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def _split_statistics(x: np.ndarray, min_size: int) -> np.ndarray:
    """For each series (row) and each split k (min_size..n-min_size), the absolute Welch t of
    x[:k] against x[k:], from prefix sums (vectorised over splits and series)."""
    n = x.shape[-1]
    k = np.arange(min_size, n - min_size + 1)
    c1 = np.cumsum(x, axis=-1)
    c2 = np.cumsum(x * x, axis=-1)
    s1, s2 = c1[..., k - 1], c2[..., k - 1]
    t1, t2 = c1[..., -1:], c2[..., -1:]
    m_a, m_b = s1 / k, (t1 - s1) / (n - k)
    var_a = np.maximum(s2 - k * m_a * m_a, 0.0) / np.maximum(k - 1, 1)
    var_b = np.maximum((t2 - s2) - (n - k) * m_b * m_b, 0.0) / np.maximum(n - k - 1, 1)
    se = np.sqrt(var_a / k + var_b / (n - k))
    scale = np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-300)
    se = np.maximum(se, 1e-12 * scale)  # two constant segments: a huge but finite statistic
    return np.abs(m_b - m_a) / se


#: Simulated series behind a change point's p-value: the smallest p it gives is 1 / (this + 1).
SIMULATIONS = 999


def smallest_p_value(n: int, min_size: int = 3, simulations: int = SIMULATIONS) -> float:
    """The smallest p-value :func:`change_point` can give a series of ``n`` points: 1 when it
    is too short to split, else the resolution of the simulation."""
    return 1.0 if n < 2 * min_size else 1.0 / (simulations + 1)


def change_point(
    values, *, min_size: int = 3, simulations: int = SIMULATIONS, seed: int = 0
) -> dict | None:
    """The most likely single change point of a series and its significance.

    The statistic is the largest Welch t over every split into a before and an after of at
    least ``min_size`` points. Its p-value is the share of simulated series of independent
    Gaussian noise of the same length whose largest t is as large (which accounts for having
    tried every split). The t is unchanged by the noise's mean and scale, so the simulation
    needs neither. Unlike a permutation test, whose p cannot go below 2 / C(8, 4) = 0.029 with
    8 points, this reaches 1 / (``simulations`` + 1) with as few as 2 * ``min_size``. Returns
    ``{index, p_value, before_mean, after_mean, statistic}`` with ``index`` the first point
    after the change, or None for a series too short to split.
    """
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    if n < 2 * min_size:
        return None
    stats = _split_statistics(x, min_size)
    best = int(np.argmax(stats))
    observed = float(stats[best])
    null = np.random.default_rng(seed).standard_normal((simulations, n))
    maxima = _split_statistics(null, min_size).max(axis=1)
    p_value = (1 + int(np.sum(maxima >= observed * (1 - 1e-9)))) / (simulations + 1)
    k = best + min_size
    return {
        "index": k,
        "p_value": p_value,
        "before_mean": float(x[:k].mean()),
        "after_mean": float(x[k:].mean()),
        "statistic": observed,
    }
