"""How far a model's confidence can be trusted, measured against human answers.

Pure functions over arrays: `probs` is (items, answers), each row a distribution; `labels` holds the
index of the human answer per item. Top-label ECE uses equal-mass bins (each bin the same number of
items), so sparse confidence ranges do not make noisy bins.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

# scipy and scikit-learn are imported where they are used: together they take seconds to import, and the
# studio imports this module on its way to serving its first page.

DEFAULT_BINS = 15
EPS = 1e-12
Z95 = 1.959963984540054  # two-sided 95%: scipy.stats.norm.ppf(0.975) (a test checks it)


class Bin(NamedTuple):  # named tuples: a curve over 100k items makes 100k of them
    confidence: float  # mean top-label confidence in the bin
    accuracy: float  # share of the bin whose top label is the human answer
    count: int


def _arrays(probs: Sequence[Sequence[float]], labels: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probs, dtype=float)
    y = np.asarray(labels, dtype=int)
    if p.ndim != 2 or len(p) != len(y) or len(y) == 0:
        raise ValueError("give one distribution (a row) and one human answer per item, at least one item")
    return p, y


def reliability_bins(probs, labels, bins: int = DEFAULT_BINS) -> list[Bin]:
    """Items sorted by top-label confidence and cut into `bins` groups of (nearly) equal size."""
    p, y = _arrays(probs, labels)
    confidence = p.max(axis=1)
    correct = p.argmax(axis=1) == y
    order = np.argsort(confidence, kind="stable")
    return [
        Bin(float(confidence[idx].mean()), float(correct[idx].mean()), len(idx))
        for idx in np.array_split(order, min(bins, len(order)))
        if len(idx)
    ]


def ece(probs, labels, bins: int = DEFAULT_BINS) -> float:
    """Top-label expected calibration error: the count-weighted mean |accuracy - confidence| over bins."""
    found = reliability_bins(probs, labels, bins)
    total = sum(b.count for b in found)
    return sum(b.count / total * abs(b.accuracy - b.confidence) for b in found)


def brier(probs, labels) -> float:
    """Multi-class Brier score: the mean over items of the squared distance to the one-hot human answer."""
    p, y = _arrays(probs, labels)
    onehot = np.zeros_like(p)
    onehot[np.arange(len(y)), y] = 1.0
    return float(((p - onehot) ** 2).sum(axis=1).mean())


def nll(probs, labels) -> float:
    """Negative log-likelihood of the human answers (natural log, mean per item)."""
    p, y = _arrays(probs, labels)
    from sklearn.metrics import log_loss

    return float(log_loss(y, np.clip(p, EPS, 1.0), labels=list(range(p.shape[1]))))


def accuracy(probs, labels) -> float:
    p, y = _arrays(probs, labels)
    return float((p.argmax(axis=1) == y).mean())


def kappa(a, b, labels, weights: str | None = None) -> float:
    """Cohen's kappa between two lists of answers; NaN where it is undefined (one answer on both sides),
    without sklearn's warning on every such pair: the caller says what NaN means for it."""
    import warnings

    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.simplefilter("ignore", RuntimeWarning)  # 0/0 inside kappa, for the same case
        return float(cohen_kappa_score(a, b, weights=weights, labels=labels))


def score_errors(probs, labels) -> tuple[float, float]:
    """For ordered levels: mean absolute error and quadratic-weighted kappa of the top level."""
    from sklearn.metrics import mean_absolute_error

    p, y = _arrays(probs, labels)
    predicted = p.argmax(axis=1)
    kappa_ = kappa(y, predicted, list(range(p.shape[1])), weights="quadratic")
    return float(mean_absolute_error(y, predicted)), float(np.nan_to_num(kappa_, nan=1.0))


class AcceptPoint(NamedTuple):
    threshold: float  # accept every suggestion whose confidence is at least this
    coverage: float  # share of items accepted
    accuracy: float  # accuracy among the accepted
    accepted: int = 0  # the items behind the point: how far its accuracy can be trusted
    low: float = 0.0  # 95% Wilson interval of the accuracy
    high: float = 1.0


def wilson_interval(correct, total, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """The Wilson score interval of a share (arrays or numbers): unlike the normal one it stays inside
    0..1 and stays wide when few items are behind it (2 of 2 right is 34%..100%, not 100%)."""
    k = np.asarray(correct, dtype=float)
    n = np.maximum(np.asarray(total, dtype=float), 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def auto_accept_curve(probs, labels) -> list[AcceptPoint]:
    """For each distinct confidence, what accepting everything at or above it would cover and get right,
    with the count behind it and its 95% interval. One sort and running sums, so a hundred thousand
    items cost milliseconds."""
    p, y = _arrays(probs, labels)
    confidence = p.max(axis=1)
    order = np.argsort(-confidence, kind="stable")
    sorted_conf = confidence[order]
    hits = np.cumsum(p.argmax(axis=1)[order] == y[order])
    # the last position of each distinct confidence: everything at or above it is accepted
    last = np.flatnonzero(np.append(sorted_conf[1:] != sorted_conf[:-1], True))
    taken = last + 1
    low, high = wilson_interval(hits[last], taken)
    return list(
        map(
            AcceptPoint,
            sorted_conf[last].tolist(),
            (taken / len(y)).tolist(),
            (hits[last] / taken).tolist(),
            taken.tolist(),
            low.tolist(),
            high.tolist(),
        )
    )


def threshold_for(curve: Sequence[AcceptPoint], target_accuracy: float) -> AcceptPoint | None:
    """The point covering the most items whose accuracy still meets the target, or None. The point's own
    accuracy only: `recommend` is the one to act on."""
    meeting = [pt for pt in curve if pt.accuracy >= target_accuracy]
    return max(meeting, key=lambda pt: (pt.coverage, -pt.threshold)) if meeting else None


class Recommendation(NamedTuple):
    point: AcceptPoint | None  # the widest threshold whose accuracy interval lies at or above the target
    closest: AcceptPoint | None  # otherwise the point that more answers would confirm soonest
    more_needed: int | None  # answered items to add at that point's confidence, at its accuracy


def recommend(curve: Sequence[AcceptPoint], target_accuracy: float) -> Recommendation:
    """A threshold only where the 95% interval's lower bound meets the target, so two lucky items never
    make one. Else the point whose accuracy is above the target and needs the fewest more answers to
    show it; (None, None, None) when no point's accuracy is above the target."""
    sure = [pt for pt in curve if pt.low >= target_accuracy]
    if sure:
        return Recommendation(max(sure, key=lambda pt: (pt.coverage, -pt.threshold)), None, None)
    needs = [(answers_needed(pt.accuracy, target_accuracy), pt) for pt in curve]
    hopeful = [(needed - pt.accepted, pt) for needed, pt in needs if pt.accepted < needed < MAX_ANSWERS]
    if not hopeful:
        return Recommendation(None, None, None)
    more, pt = min(hopeful, key=lambda m: (m[0], -m[1].coverage))
    return Recommendation(None, pt, more)


MAX_ANSWERS = 10**9


def answers_needed(accuracy: float, target_accuracy: float) -> int:
    """The fewest items at this accuracy whose 95% Wilson lower bound meets the target (MAX_ANSWERS when
    none would: an accuracy at or below the target, or a target of 100%). The bound grows with the
    count, so a doubling search then a bisection find it."""
    if accuracy <= target_accuracy or target_accuracy >= 1:
        return MAX_ANSWERS

    def meets(n: int) -> bool:
        return float(wilson_interval(accuracy * n, n)[0]) >= target_accuracy

    high = 1
    while not meets(high):
        if high >= MAX_ANSWERS:
            return MAX_ANSWERS
        high *= 2
    low = high // 2  # does not meet (or is 0)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if meets(middle) else (middle, high)
    return high


def scale(probs, temperature: float) -> np.ndarray:
    """Distributions re-tempered: softmax(log p / T)."""
    logp = np.log(np.clip(np.asarray(probs, dtype=float), EPS, 1.0)) / temperature
    logp -= logp.max(axis=1, keepdims=True)
    e = np.exp(logp)
    return e / e.sum(axis=1, keepdims=True)


def fit_temperature(probs, labels) -> float:
    """The temperature that minimises the NLL of the human answers (searched over 0.05..20)."""
    p, y = _arrays(probs, labels)
    logp = np.log(np.clip(p, EPS, 1.0))
    rows = np.arange(len(y))

    def loss(log_t: float) -> float:  # the NLL of scale(p, T), in closed form
        z = logp / np.exp(log_t)
        top = z.max(axis=1)
        return float((top + np.log(np.exp(z - top[:, None]).sum(axis=1)) - z[rows, y]).mean())

    from scipy.optimize import minimize_scalar

    found = minimize_scalar(loss, bounds=(np.log(0.05), np.log(20.0)), method="bounded", options={"xatol": 1e-4})
    return float(np.exp(found.x))


def cross_validated_temperature(probs, labels, folds: int = 5, seed: int = 0) -> tuple[np.ndarray, list[float]]:
    """Calibrated distributions where each item's temperature was fitted on the other folds only, so no
    item is scored by a fit that saw it; and the fold temperatures."""
    from sklearn.model_selection import KFold

    p, y = _arrays(probs, labels)
    folds = max(2, min(folds, len(y)))
    out = np.empty_like(p)
    temperatures = []
    for train, held in KFold(folds, shuffle=True, random_state=seed).split(p):
        t = fit_temperature(p[train], y[train])
        temperatures.append(t)
        out[held] = scale(p[held], t)
    return out, temperatures
