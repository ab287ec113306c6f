"""Queue strategies on crafted distributions, and the diversity mix on near-duplicate texts."""

import pytest

from diffjev import active

TORN = {"billing": 0.5, "technical": 0.5, "account": 0.0}  # margin 0, entropy ln 2
SPREAD = {"billing": 0.4, "technical": 0.3, "account": 0.3}  # margin 0.1, entropy 1.089
SURE = {"billing": 0.9, "technical": 0.05, "account": 0.05}


def test_margin_and_entropy_disagree_on_a_three_way_question():
    items = [SURE, SPREAD, TORN]
    assert active.margin(TORN) == 0.0 and active.margin(SPREAD) == pytest.approx(0.1)
    assert active.entropy(SPREAD) == pytest.approx(1.0889, abs=1e-4) and active.entropy(TORN) == pytest.approx(
        0.6931, abs=1e-4
    )
    assert active.uncertainty_order(items, "margin") == [2, 1, 0]  # torn between two first
    assert active.uncertainty_order(items, "entropy") == [1, 2, 0]  # spread over three first
    assert active.uncertainty_order(items, "least_confidence") == [1, 2, 0]


def test_on_yes_no_the_three_measures_rank_alike():
    items = [{"yes": p, "no": 1 - p} for p in (0.95, 0.55, 0.7, 0.2, 0.5)]
    orders = {s: active.uncertainty_order(items, s) for s in ("least_confidence", "margin", "entropy")}
    assert orders["least_confidence"] == orders["margin"] == orders["entropy"] == [4, 1, 2, 3, 0]


def test_stderr_and_disagreement():
    assert active.stderr_order([0.01, None, 0.2, 0.05]) == [2, 3, 0, 1]
    assert active.disagreements(["a", "b", None, "c"], ["a", "c", "b", "d"]) == [1, 3]


def test_diverse_mix_gives_every_cluster_one_before_any_gives_two():
    templates = [
        "Refund for invoice {} please, I was charged twice",
        "The dashboard is down again since {} this morning",
        "How do I add {} more seats to our team plan",
    ]
    texts = [t.format(n) for t in templates for n in range(5)]  # 15 texts, 3 near-duplicate families
    clusters = active.cluster_texts(texts, clusters=3)
    families = [i // 5 for i in range(15)]
    # the clustering finds the three families
    assert len(set(clusters)) == 3
    assert all(len({clusters[i] for i in range(15) if families[i] == f}) == 1 for f in range(3))
    priority = list(range(15))  # the first family is the most uncertain: pure uncertainty would take it all
    order = active.diverse_order(priority, clusters)
    assert sorted(order) == priority
    seen = set()
    for index in order:
        if len(seen) < 3:
            assert clusters[index] not in seen, "a cluster gave a second item before every cluster gave one"
        seen.add(clusters[index])
    # within a cluster, the priority order holds
    for c in set(clusters):
        mine = [i for i in order if clusters[i] == c]
        assert mine == sorted(mine)
    assert [clusters[i] for i in order[:3]] == [clusters[0], clusters[5], clusters[10]]
    with pytest.raises(ValueError):
        active.uncertainty_order([SURE], "random")
    # items 0 and 1 share cluster 0, item 2 is alone in cluster 1; priority 2, 0, 1
    assert active.diverse_order([2, 0, 1], [0, 0, 1]) == [2, 0, 1]
    assert active.diverse_order([0, 1, 2], [0, 0, 1]) == [0, 2, 1]
