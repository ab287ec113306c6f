"""Calibration metrics against values worked out by hand, and temperature scaling recovering a known
temperature."""

import math

import numpy as np
import pytest

from diffjev import calibration as cal

# Four items, two answers. Top-label confidences 0.9, 0.8, 0.6, 0.7; the first and last are right.
PROBS = [[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]]
LABELS = [0, 0, 1, 1]


def test_ece_on_equal_mass_bins():
    # two bins of two items, sorted by confidence: (0.6, 0.7) -> acc 0.5, conf 0.65; (0.8, 0.9) -> acc 0.5, conf 0.85
    bins = cal.reliability_bins(PROBS, LABELS, bins=2)
    assert [(b.confidence, b.accuracy, b.count) for b in bins] == [
        pytest.approx((0.65, 0.5, 2)),
        pytest.approx((0.85, 0.5, 2)),
    ]
    assert cal.ece(PROBS, LABELS, bins=2) == pytest.approx(0.5 * 0.15 + 0.5 * 0.35)
    # one item per bin: |1-0.6|... sorted 0.6 (wrong), 0.7 (right), 0.8 (wrong), 0.9 (right)
    assert cal.ece(PROBS, LABELS, bins=15) == pytest.approx((0.6 + 0.3 + 0.8 + 0.1) / 4)


def test_brier_nll_accuracy():
    # squared distances to one-hot: (0.01+0.01), (0.64+0.64), (0.36+0.36), (0.09+0.09)
    assert cal.brier(PROBS, LABELS) == pytest.approx((0.02 + 1.28 + 0.72 + 0.18) / 4)
    assert cal.nll(PROBS, LABELS) == pytest.approx(-(math.log(0.9) + math.log(0.2) + math.log(0.4) + math.log(0.7)) / 4)
    assert cal.accuracy(PROBS, LABELS) == 0.5


def test_score_errors_mae_and_quadratic_kappa():
    probs = [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.8, 0.1, 0.1]]
    labels = [0, 1, 2, 2]  # the last is off by two levels
    mae, kappa = cal.score_errors(probs, labels)
    assert mae == pytest.approx(0.5)
    # by hand, weights (i - j)^2: observed sum(w * O) = 4 (one item 2 levels off); expected
    # sum(w * r_i * c_j) / N with true totals (1, 1, 2) and predicted totals (2, 1, 1) = 26 / 4 = 6.5
    assert kappa == pytest.approx(1 - 4 / 6.5)


def test_auto_accept_curve_point_by_point_and_the_threshold_for_a_target():
    curve = cal.auto_accept_curve(PROBS, LABELS)
    assert [(pt.threshold, pt.coverage, pt.accuracy) for pt in curve] == [
        pytest.approx((0.9, 0.25, 1.0)),
        pytest.approx((0.8, 0.5, 0.5)),
        pytest.approx((0.7, 0.75, 2 / 3)),
        pytest.approx((0.6, 1.0, 0.5)),
    ]
    assert cal.threshold_for(curve, 0.6).threshold == pytest.approx(0.7)
    assert cal.threshold_for(curve, 0.99).threshold == pytest.approx(0.9)
    assert cal.threshold_for([cal.AcceptPoint(0.5, 1.0, 0.4)], 0.9) is None


def test_temperature_scaling_recovers_a_known_temperature():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2.0, size=(4000, 4))
    true = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = np.array([rng.choice(4, p=row) for row in true])
    overconfident = cal.scale(true, 0.5)  # the model's probabilities, sharpened by temperature 1/2
    assert cal.fit_temperature(overconfident, labels) == pytest.approx(2.0, rel=0.08)
    calibrated, temperatures = cal.cross_validated_temperature(overconfident, labels, folds=5)
    assert all(t == pytest.approx(2.0, rel=0.1) for t in temperatures)
    assert cal.ece(calibrated, labels) < cal.ece(overconfident, labels) / 2
    assert cal.nll(calibrated, labels) < cal.nll(overconfident, labels)


def test_the_wilson_interval_and_the_recommendation_need_enough_items():
    low, high = cal.wilson_interval(2, 2)
    assert (float(low), float(high)) == (pytest.approx(0.3424, abs=1e-4), 1.0)
    curve = cal.auto_accept_curve(PROBS, LABELS)
    assert [pt.accepted for pt in curve] == [1, 2, 3, 4]
    # threshold_for takes 0.7 for 0.6 (2 of 3 right), yet that is 21%..94%; 1 of 1 right at 0.9 is
    # closest to showing 60%: 6 items all right would (6 / (6 + 1.96²) >= 0.6)
    found = cal.recommend(curve, 0.6)
    assert found.point is None and found.closest.threshold == pytest.approx(0.9)
    assert found.more_needed == cal.answers_needed(1.0, 0.6) - 1 == 5
    assert cal.recommend(curve, 1.0) == (None, None, None)  # no sample shows 100%
    sure = [cal.AcceptPoint(0.9, 0.5, 1.0, 73, *map(float, cal.wilson_interval(73, 73)))]
    assert cal.recommend(sure, 0.95).point == sure[0] and cal.answers_needed(1.0, 0.95) == 73


def test_the_95_percent_z_is_the_normal_quantile():
    from scipy.stats import norm

    assert cal.Z95 == pytest.approx(float(norm.ppf(0.975)), abs=1e-12)
