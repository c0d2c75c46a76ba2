"""Whether two sets of samples differ: the tests ``compare`` uses, as benchstat does.

* :func:`mann_whitney` -- the two-sided Mann-Whitney U test (Wilcoxon rank-sum): no
  assumption about the distribution, robust to an outlier run. Exact (the U
  distribution counted) when both sides are small and untied; else the normal
  approximation with the tie correction and a continuity correction.
* :func:`min_p` -- the smallest p-value the test can give for two sample sizes: with
  3 against 3 it is 0.1, so no difference can be significant at 0.05. benchstat warns
  below 4 samples a side for this reason; so does ``compare``.
* :func:`holm` -- Holm's step-down correction of a family of p-values (every cell of a
  comparison's table), so that testing many metrics does not make noise look real.
* :func:`lag1` and :func:`trend` -- a series' lag-1 autocorrelation and its rank
  correlation with time (Spearman's rho): blocks of one run are samples only when
  neither is large (they are then neither serially dependent nor drifting).

Pure functions on numbers; numpy only.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

EXACT_MAX = 400     # n_a * n_b up to which U's distribution is counted exactly


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their mean rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=float)
    xs = x[order]
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


@lru_cache(maxsize=256)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings give each U = 0 .. m n (no ties)."""
    # f[i][j][u]: orderings of i a's and j b's with statistic u, built by the last
    # element: an a after j b's adds j to U
    prev = [[1] + [0] * (m * n) for _ in range(n + 1)]   # i = 0: U = 0 only
    for i in range(1, m + 1):
        cur = [[0] * (m * n + 1) for _ in range(n + 1)]
        for j in range(n + 1):
            for u in range(m * n + 1):
                c = prev[j][u - j] if u - j >= 0 else 0       # last is an a
                if j:
                    c += cur[j - 1][u]                        # last is a b
                cur[j][u] = c
        prev = cur
    return tuple(prev[n])


def mann_whitney(a, b) -> float:
    """Two-sided p-value that samples ``a`` and ``b`` come from one distribution (1.0
    when either side is empty or every value is equal)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    m, n = len(a), len(b)
    if not m or not n:
        return 1.0
    both = np.concatenate([a, b])
    if np.all(both == both[0]):
        return 1.0
    r = _ranks(both)
    u = float(r[:m].sum() - m * (m + 1) / 2)
    tied = len(np.unique(both)) < len(both)
    if not tied and m * n <= EXACT_MAX:
        counts = _u_counts(m, n)
        total = math.comb(m + n, m)
        lo = min(u, m * n - u)
        tail = sum(counts[: int(lo) + 1])
        return min(1.0, 2 * tail / total)
    mu = m * n / 2
    _, t = np.unique(both, return_counts=True)
    var = m * n / 12 * ((m + n + 1) - float((t ** 3 - t).sum()) / ((m + n) * (m + n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - mu) - 0.5) / math.sqrt(var)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))


def min_p(m: int, n: int) -> float:
    """The smallest two-sided p-value :func:`mann_whitney` gives m against n samples."""
    if not m or not n:
        return 1.0
    return min(1.0, 2 / math.comb(m + n, m))


def holm(pvalues) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given."""
    p = list(pvalues)
    order = sorted(range(len(p)), key=lambda i: p[i])
    out = [1.0] * len(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def lag1(x) -> float:
    """Lag-1 autocorrelation of a series (NaN below 3 values or with no variance)."""
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) < 3:
        return math.nan
    d = x - x.mean()
    den = float((d * d).sum())
    return float((d[1:] * d[:-1]).sum() / den) if den > 0 else math.nan


def trend(x) -> float:
    """Spearman's rank correlation of a series with its order (NaN below 3 values)."""
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) < 3 or np.all(x == x[0]):
        return math.nan
    rx, rt = _ranks(x), np.arange(1, len(x) + 1, dtype=float)
    rx, rt = rx - rx.mean(), rt - rt.mean()
    return float((rx * rt).sum() / math.sqrt((rx * rx).sum() * (rt * rt).sum()))
