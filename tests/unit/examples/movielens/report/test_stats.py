import numpy as np
import pytest

from solaris.examples.movielens.report.stats import (
    estimate,
    row_log_loss,
    seed_interval,
    transfer_ratios,
    user_bootstrap,
    user_weights,
)


def test_user_bootstrap_resamples_whole_users_not_rows():
    # User 7 has one row of loss 1; user 9 has three rows of loss 3. Drawing two users with
    # replacement gives only {7,7} -> 1, {9,9} -> 3 or {7,9} -> (1 + 9) / 4 = 2.5; a row
    # bootstrap would also give e.g. 2.0 or 1.5.
    users = np.array([7, 9, 9, 9])
    loss = np.array([1.0, 3.0, 3.0, 3.0])
    draws = user_bootstrap(users, {"x": loss}, lambda m: m["x"], n_boot=400, seed=1)
    values = set(np.round(draws, 10))
    assert values <= {1.0, 2.5, 3.0}
    assert values == {1.0, 2.5, 3.0}
    # {7,9} in either order is drawn half of the time.
    assert abs(np.mean(np.isclose(draws, 2.5)) - 0.5) < 0.1


def test_user_bootstrap_averages_the_statistic_over_seeds_on_the_same_draw():
    users = np.array([1, 2])
    losses = {"x": np.array([[1.0, 1.0], [3.0, 3.0]])}  # seed 0 loss 1, seed 1 loss 3
    draws = user_bootstrap(users, losses, lambda m: m["x"], n_boot=50, seed=0)
    np.testing.assert_allclose(draws, 2.0)


def test_user_weights_draw_as_many_users_as_there_are():
    row_user, w = user_weights(np.array([5, 5, 8, 11]), n_boot=20, seed=0)
    np.testing.assert_array_equal(row_user, [0, 0, 1, 2])
    np.testing.assert_array_equal(w.sum(axis=1), 3)


def test_transfer_ratios_hand_case_and_nan_without_fm_advantage():
    vm, x, fm = np.array([0.6, 0.5]), np.array([0.55, 0.4]), np.array([0.5, 0.5])
    np.testing.assert_allclose(transfer_ratios(vm, x, fm), [0.5, np.nan])


def test_seed_interval_is_the_student_t_interval():
    lo, hi = seed_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / np.sqrt(3)  # t(0.975, df=2) * sd 1 / sqrt(3)
    assert lo == pytest.approx(2 - half)
    assert hi == pytest.approx(2 + half)
    assert seed_interval([4.0]) == (4.0, 4.0)


def test_estimate_bootstrap_interval_is_the_percentile_interval():
    est = estimate([1.0, 3.0], boot=np.arange(101, dtype=float))
    assert est.mean == 2.0
    assert est.boot_ci == (2.5, 97.5)


def test_row_log_loss_hand_case():
    np.testing.assert_allclose(row_log_loss([1, 0], [0.5, 0.25]), [np.log(2), -np.log(0.75)])
