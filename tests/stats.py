"""Goodness-of-fit helpers shared by the speculative-decoding tests."""

from __future__ import annotations

import numpy as np


def chi2_critical(df: int, z: float = 3.090) -> float:
    """Upper 0.001 quantile of chi-square(df), Wilson-Hilferty (good to ~1% for df >= 3)."""
    c = 2.0 / (9.0 * df)
    return float(df * (1.0 - c + z * np.sqrt(c)) ** 3)


def chi2(counts: np.ndarray, expected: np.ndarray) -> tuple[float, int]:
    """Pearson chi-square with cells of expected count < 5 pooled into one."""
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    return float(((obs - exp) ** 2 / exp).sum()), len(exp) - 1
