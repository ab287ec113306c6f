"""Queue strategies as pure functions over stored suggestions: which items a human should see first.

- least confidence: 1 - top probability. The plainest "how unsure".
- margin: the gap between the top two answers; small means torn between two.
- entropy: spread over every answer; high means unsure among many. On a yes/no question the three
  rank items identically; they differ from three answers up.
- stderr: how much the top probability moved across noise draws; high means the read itself is unstable.
- disagreement: two runs (or the model and a human) answering differently.
- diverse: the uncertain items, spread across clusters of the item texts (TF-IDF, k-means), so one
  near-duplicate template cannot fill the queue.
"""

from __future__ import annotations

import math
import warnings
from typing import Mapping, Sequence

Distribution = Mapping[str, float]


def least_confidence(p: Distribution) -> float:
    return 1.0 - max(p.values())


def margin(p: Distribution) -> float:
    top = sorted(p.values(), reverse=True)
    return top[0] - (top[1] if len(top) > 1 else 0.0)


def entropy(p: Distribution) -> float:
    return -sum(v * math.log(v) for v in p.values() if v > 0)


def uncertainty_order(distributions: Sequence[Distribution], strategy: str) -> list[int]:
    """Indices, most uncertain first; ties keep their input order."""
    keys = {
        "least_confidence": lambda i: -least_confidence(distributions[i]),
        "margin": lambda i: margin(distributions[i]),
        "entropy": lambda i: -entropy(distributions[i]),
    }
    if strategy not in keys:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(keys)}")
    return sorted(range(len(distributions)), key=keys[strategy])


def stderr_order(stderrs: Sequence[float | None]) -> list[int]:
    """Most unstable across noise draws first; items read once (no stderr) last."""
    return sorted(range(len(stderrs)), key=lambda i: (stderrs[i] is None, -(stderrs[i] or 0.0)))


def disagreements(first: Sequence[str | None], second: Sequence[str | None]) -> list[int]:
    """Indices where two answer lists (two runs, or a run and a human) both answer and differ."""
    return [i for i, (a, b) in enumerate(zip(first, second)) if a is not None and b is not None and a != b]


def cluster_texts(texts: Sequence[str], clusters: int, seed: int = 0) -> list[int]:
    """A cluster id per text: k-means over TF-IDF vectors."""
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.feature_extraction.text import TfidfVectorizer

    clusters = max(1, min(clusters, len(set(texts))))
    if clusters == 1:
        return [0] * len(texts)
    vectors = TfidfVectorizer().fit_transform(texts)
    with warnings.catch_warnings():  # near-duplicates share a vector: fewer distinct points than clusters is the point
        warnings.simplefilter("ignore", ConvergenceWarning)
        return [int(c) for c in KMeans(clusters, n_init=4, random_state=seed).fit_predict(vectors)]


def diverse_order(priority: Sequence[int], cluster_of: Sequence[int]) -> list[int]:
    """Re-order `priority` (most wanted first) round-robin over clusters: no cluster gives a second item
    before every cluster present has given one, and within a cluster the priority order holds."""
    queues: dict[int, list[int]] = {}
    for index in priority:
        queues.setdefault(cluster_of[index], []).append(index)
    order: list[int] = []
    while queues:
        for cluster in list(queues):
            order.append(queues[cluster].pop(0))
            if not queues[cluster]:
                del queues[cluster]
    return order
