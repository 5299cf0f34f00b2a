import math

import numpy as np
import pytest

from solaris.evaluation.metrics import (
    auc,
    coverage,
    log_loss,
    normalized_entropy,
    summarize,
    transfer_ratio,
)


def test_log_loss_hand_case():
    expected = -(math.log(0.8) + math.log(0.6)) / 2
    assert log_loss([1, 0], [0.8, 0.4]) == pytest.approx(expected, rel=1e-12)


def test_log_loss_accepts_bool_labels_and_arrays():
    y = np.array([True, False])
    p = np.array([0.8, 0.4], dtype=np.float32)
    assert log_loss(y, p) == pytest.approx(-(math.log(0.8) + math.log(0.6)) / 2, rel=1e-6)


def test_log_loss_clips_certain_mistakes():
    assert log_loss([1, 0], [0.0, 1.0], eps=1e-7) == pytest.approx(-math.log(1e-7))
    assert log_loss([1, 0], [1.0, 0.0]) == pytest.approx(-math.log(1 - 1e-7))


@pytest.mark.parametrize("eps", [0.0, -1e-3, 0.5, 1.0])
def test_log_loss_rejects_bad_eps(eps):
    with pytest.raises(ValueError, match="eps"):
        log_loss([1, 0], [0.5, 0.5], eps=eps)


def test_normalized_entropy_of_base_rate_predictor_is_one():
    y = np.array([1, 0, 0, 0, 1, 0, 0, 0])  # base rate 0.25
    assert normalized_entropy(y, np.full(y.size, 0.25)) == pytest.approx(1.0, rel=1e-12)


def test_normalized_entropy_hand_case():
    y, p = [1, 0], [0.8, 0.4]
    expected = (-(math.log(0.8) + math.log(0.6)) / 2) / math.log(2)  # base rate 0.5
    assert normalized_entropy(y, p) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("y", [[0, 0, 0], [1, 1]])
def test_normalized_entropy_rejects_constant_labels(y):
    with pytest.raises(ValueError, match="all labels are equal"):
        normalized_entropy(y, [0.5] * len(y))


def test_auc_perfect_ranking():
    assert auc([0, 0, 1, 1], [0.1, 0.2, 0.7, 0.9]) == 1.0
    assert auc([1, 1, 0, 0], [0.1, 0.2, 0.7, 0.9]) == 0.0


def test_auc_with_ties_hand_case():
    # positive/negative pairs: (0.5, 0.1)=1, (0.5, 0.5)=1/2, (0.9, 0.1)=1, (0.9, 0.5)=1 -> 3.5/4
    assert auc([0, 0, 1, 1], [0.1, 0.5, 0.5, 0.9]) == pytest.approx(0.875)


def test_auc_rejects_single_class():
    with pytest.raises(ValueError, match="one class"):
        auc([1, 1, 1], [0.2, 0.5, 0.9])


def test_transfer_ratio_hand_case():
    assert transfer_ratio(0.64, 0.61, 0.58) == pytest.approx(0.5)
    assert transfer_ratio(0.64, 0.64, 0.58) == 0.0
    assert transfer_ratio(0.64, 0.58, 0.58) == pytest.approx(1.0)


def test_transfer_ratio_rejects_no_fm_advantage():
    with pytest.raises(ValueError, match="no FM advantage"):
        transfer_ratio(0.6, 0.59, 0.6)


def test_transfer_ratio_rejects_non_finite():
    with pytest.raises(ValueError, match="finite"):
        transfer_ratio(float("nan"), 0.5, 0.4)


def test_coverage():
    assert coverage(np.array([True, False, True, True])) == 0.75
    assert coverage(np.array([[True, False], [False, False]])) == 0.25
    assert coverage([0, 1]) == 0.5


def test_coverage_rejects_empty_and_non_boolean():
    with pytest.raises(ValueError, match="empty"):
        coverage(np.array([], dtype=bool))
    with pytest.raises(ValueError, match="boolean"):
        coverage(np.array([0.5, 1.0]))


def test_summarize():
    mean, std = summarize([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert std == pytest.approx(math.sqrt(5 / 3))  # sum of squares 5, ddof=1
    assert summarize([0.7]) == (0.7, 0.0)
    assert summarize(v for v in (1.0, 3.0)) == (2.0, pytest.approx(math.sqrt(2)))


def test_summarize_rejects_empty_and_non_finite():
    with pytest.raises(ValueError, match="empty"):
        summarize([])
    with pytest.raises(ValueError, match="finite"):
        summarize([1.0, float("inf")])


@pytest.mark.parametrize("metric", [log_loss, normalized_entropy, auc])
class TestInputValidation:
    def test_length_mismatch(self, metric):
        with pytest.raises(ValueError, match="length mismatch"):
            metric([0, 1, 1], [0.5, 0.5])

    def test_empty(self, metric):
        with pytest.raises(ValueError, match="empty"):
            metric([], [])

    def test_labels_not_binary(self, metric):
        with pytest.raises(ValueError, match=r"\{0, 1\}"):
            metric([0, 2, 1], [0.5, 0.5, 0.5])

    @pytest.mark.parametrize("bad", [1.5, -0.1, float("nan")])
    def test_probabilities_outside_unit_interval(self, metric, bad):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            metric([0, 1, 1], [0.5, bad, 0.5])

    def test_not_one_dimensional(self, metric):
        with pytest.raises(ValueError, match="1-D"):
            metric([[0, 1]], [[0.5, 0.5]])
