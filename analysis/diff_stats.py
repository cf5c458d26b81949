"""The statistics behind the diff's verdict (docs/diff.md, "The verdict").

Each trace's step times are taken as samples of its run's step time. The change is the ratio of
the two runs' geometric mean step times, and its confidence interval is Welch's t interval on
the log step times (Welch 1947, with the Welch–Satterthwaite degrees of freedom):

    d = mean(ln NEW) − mean(ln BASE),  se² = var(ln BASE)/n_b + var(ln NEW)/n_n,
    d ± t(1 − α/2, ν) · se,             ν = se⁴ / (v_b²/(n_b − 1) + v_n²/(n_n − 1))

On the log scale swapping BASE and NEW only flips the sign (×2.94 and ×1/2.94 are the same
evidence), each side's spread is counted at its own scale, and the interval narrows as
1/√steps. Student's t quantile is computed here (the regularised incomplete beta function by its
continued fraction, inverted by bisection): numpy and math only.

Pure functions on per-step series; nothing here looks at events.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

CONFIDENCE = 0.95  # the step-time interval
METHOD = "welch-t on log step times"
MAX_SETTLE = 1_000_000  # past this many steps, "how many steps would settle it" is not given


# -- Student's t ------------------------------------------------------------------------------


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with `df` (> 0, need not be whole) degrees of freedom."""
    if math.isinf(df):
        return 0.5 * (1.0 + math.erf(t / math.sqrt(2.0)))
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def _t_pdf(t: float, df: float) -> float:
    if math.isinf(df):
        return math.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)
    log_c = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1.0) / 2.0 * math.log1p(t * t / df))


@lru_cache(maxsize=64)
def _normal_quantile(p: float) -> float:
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, math.inf) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return 0.5 * (lo + hi)


def t_quantile(p: float, df: float) -> float:
    """The t with P(T ≤ t) = p (0.5 ≤ p < 1): Newton's method on `t_cdf` from the
    Cornish–Fisher start, kept inside a bracket that bisection narrows when a step leaves it."""
    z = _normal_quantile(p)
    if math.isinf(df):
        return z
    guess = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)
    lo, hi = 0.0, max(guess, 1.0)
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            return math.inf
    t = min(max(guess, lo), hi)
    for _ in range(100):
        err = t_cdf(t, df) - p
        if err < 0:
            lo = t
        else:
            hi = t
        density = _t_pdf(t, df)
        nxt = t - err / density if density > 0 else 0.5 * (lo + hi)
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
        if abs(nxt - t) < 1e-12 * max(1.0, t):
            return nxt
        t = nxt
    return t


# -- the interval -----------------------------------------------------------------------------


def pct(log_ratio: float) -> float:
    """A log ratio as a change in %: ln(1.5) -> +50, ln(0.5) -> −50."""
    return 100.0 * math.expm1(log_ratio)


def log_threshold(threshold_pct: float) -> float:
    """The threshold on the log scale: +5 % is ln 1.05, and −4.76 % (1/1.05) its mirror."""
    return math.log1p(threshold_pct / 100.0)


@dataclass(frozen=True)
class Interval:
    """Welch's t interval of mean(ln NEW) − mean(ln BASE); bounds in log units."""

    estimate: float
    low: float
    high: float
    confidence: float
    n_base: int
    n_new: int
    sd_base: float  # sample standard deviation of ln(step time)
    sd_new: float
    df: float  # Welch–Satterthwaite; inf when both sides have no spread

    @property
    def change_pct(self) -> float:
        return pct(self.estimate)

    @property
    def low_pct(self) -> float:
        return pct(self.low)

    @property
    def high_pct(self) -> float:
        return pct(self.high)

    def significant(self) -> int:
        """+1: the interval lies above 0 (NEW slower), −1: below, 0: it holds 0."""
        return 1 if self.low > 0 else -1 if self.high < 0 else 0


def welch_log(
    base: list[int] | np.ndarray, new: list[int] | np.ndarray, confidence: float = CONFIDENCE
) -> Interval | None:
    """The interval of the change in geometric mean (log units), or None when a side has fewer
    than two samples or a sample that is not positive (no logarithm)."""
    b = np.asarray(base, dtype=np.float64)
    n = np.asarray(new, dtype=np.float64)
    if len(b) < 2 or len(n) < 2 or not (np.all(b > 0) and np.all(n > 0)):
        return None
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(n))):
        return None
    lb, ln = np.log(b), np.log(n)
    vb, vn = float(np.var(lb, ddof=1)), float(np.var(ln, ddof=1))
    wb, wn = vb / len(lb), vn / len(ln)
    se2 = wb + wn
    estimate = float(ln.mean() - lb.mean())
    if se2 <= 0.0:
        df = math.inf
        half = 0.0
    else:
        df = se2 * se2 / (wb * wb / (len(lb) - 1) + wn * wn / (len(ln) - 1))
        half = t_quantile(1.0 - (1.0 - confidence) / 2.0, df) * math.sqrt(se2)
    return Interval(
        estimate,
        estimate - half,
        estimate + half,
        confidence,
        len(lb),
        len(ln),
        math.sqrt(vb),
        math.sqrt(vn),
        df,
    )


def steps_to_settle(interval: Interval, tau: float) -> int | None:
    """About how many steps per side, at the same spread, would make the interval lie on one
    side of the threshold ±tau: beyond it when the estimate is beyond it, inside ±tau when the
    estimate is inside. None: there is no spread (nothing to settle), the estimate sits on the
    threshold, or it would take more than MAX_SETTLE steps."""
    spread = interval.sd_base**2 + interval.sd_new**2  # se² × n with n steps on each side
    gap = abs(abs(interval.estimate) - tau)
    if spread <= 0.0 or gap <= 0.0:
        return None
    level = 1.0 - (1.0 - interval.confidence) / 2.0

    def settles(steps: int) -> bool:  # the t quantile at the degrees of freedom of n a side
        return t_quantile(level, 2.0 * steps - 2.0) ** 2 * spread <= steps * gap * gap

    # The smallest n that settles it: the t quantile falls and n grows, so `settles` turns true
    # once and stays true (a fixed-point iteration instead could swing between two counts and
    # stop on the smaller, which settled nothing: "about 2 steps each" with 2 steps each).
    low = max(2, math.ceil(t_quantile(level, math.inf) ** 2 * spread / (gap * gap))) - 1
    high = low + 1
    while not settles(high):
        low, high = high, high * 2
        if high > MAX_SETTLE:
            return None if not settles(MAX_SETTLE) else _first(settles, low, MAX_SETTLE)
    n = _first(settles, low, high)
    return None if n > MAX_SETTLE else n


def _first(settles: Callable[[int], bool], low: int, high: int) -> int:
    """The smallest n in (low, high] with settles(n), given settles(high) and a monotone test."""
    while high - low > 1:
        middle = (low + high) // 2
        if settles(middle):
            high = middle
        else:
            low = middle
    return high


def implied_step_log_ratio(
    part_log_ratio: float, part_base: float, part_new: float, step_base: float, step_new: float
) -> float:
    """The step time's log ratio implied by one part of the step (an operator) changing by
    `part_log_ratio` while the rest of the step stays as it was.

    With G the geometric mean of the part's mean per-step time in both traces and R that of the
    rest of the step (mean step time − the part), the step's ratio is (R + G·√ρ) / (R + G/√ρ)
    for the part's ratio ρ: increasing in ρ, ρ itself when the part is the whole step, and
    exactly inverted when BASE and NEW are swapped."""
    g = math.sqrt(max(part_base, 0.0) * max(part_new, 0.0))
    rest = math.sqrt(max(step_base - part_base, 0.0) * max(step_new - part_new, 0.0))
    if g <= 0.0:
        return 0.0
    root = math.exp(part_log_ratio / 2.0)
    return math.log((rest + g * root) / (rest + g / root))
