import numpy as np
import pytest

from solaris.examples.movielens.report.stats import (
    WindowLosses,
    estimate,
    joint_bootstrap,
    row_log_loss,
    transfer_ratios,
    user_weights,
)


def _draws(windows, n_boot=400, seed=1):
    return joint_bootstrap(windows, lambda m: m["x"], n_boot=n_boot, seed=seed)


def test_joint_bootstrap_resamples_whole_users_not_rows():
    # User 7 has one row of loss 1; user 9 has three rows of loss 3. Drawing two users with
    # replacement gives only {7,7} -> 1, {9,9} -> 3 or {7,9} -> (1 + 9) / 4 = 2.5; a row
    # bootstrap would also give e.g. 2.0 or 1.5.
    users = np.array([7, 9, 9, 9])
    loss = np.array([[1.0, 3.0, 3.0, 3.0]])  # one run
    draws, _ = _draws([WindowLosses(users, {"x": loss})])
    values = set(np.round(draws, 10))
    assert values == {1.0, 2.5, 3.0}
    # {7,9} in either order is drawn half of the time.
    assert abs(np.mean(np.isclose(draws, 2.5)) - 0.5) < 0.1


def test_joint_bootstrap_resamples_the_seeds_of_a_window_too():
    # Two runs of one window that differ everywhere: seed 0 loss 1, seed 1 loss 3. An
    # interval over users alone would average them on every draw (always 2); drawing the
    # runs with replacement also gives {0,0} -> 1 and {1,1} -> 3.
    users = np.array([1, 2])
    losses = np.array([[1.0, 1.0], [3.0, 3.0]])
    draws, _ = _draws([WindowLosses(users, {"x": losses})])
    assert set(np.round(draws, 10)) == {1.0, 2.0, 3.0}
    assert abs(np.mean(draws == 2.0) - 0.5) < 0.1


def test_joint_bootstrap_averages_the_windows_as_fixed_strata():
    # Window A is always 1, window B always 5: every draw is their mean, whatever is drawn.
    a = WindowLosses(np.array([1, 2]), {"x": np.ones((2, 2))})
    b = WindowLosses(np.array([3, 4, 5]), {"x": np.full((1, 3), 5.0)})
    draws, per_window = _draws([a, b], n_boot=50)
    np.testing.assert_allclose(draws, 3.0)
    np.testing.assert_allclose(per_window, [[1.0] * 50, [5.0] * 50])


def test_joint_bootstrap_feeds_every_name_the_same_draw():
    # x and y are the same losses under two names: a paired difference is exactly 0.
    users = np.array([1, 2, 2, 3])
    loss = np.array([[0.1, 0.9, 0.4, 0.7], [0.3, 0.2, 0.8, 0.5]])
    draws, _ = joint_bootstrap(
        [WindowLosses(users, {"x": loss, "y": loss.copy()})],
        lambda m: m["x"] - m["y"],
        n_boot=100,
    )
    np.testing.assert_allclose(draws, 0.0)


def test_user_weights_draw_as_many_users_as_there_are():
    row_user, w = user_weights(np.array([5, 5, 8, 11]), n_boot=20, seed=0)
    np.testing.assert_array_equal(row_user, [0, 0, 1, 2])
    np.testing.assert_array_equal(w.sum(axis=1), 3)


def test_transfer_ratios_hand_case_and_nan_without_fm_advantage():
    vm, x, fm = np.array([0.6, 0.5]), np.array([0.55, 0.4]), np.array([0.5, 0.5])
    np.testing.assert_allclose(transfer_ratios(vm, x, fm), [0.5, np.nan])


def test_estimate_is_the_mean_of_window_means_with_the_percentile_interval():
    est = estimate([[1.0, 3.0], [6.0]], boot=np.arange(101, dtype=float))
    assert est.mean == pytest.approx((2.0 + 6.0) / 2)  # windows weigh alike
    assert est.window_means == (2.0, 6.0)
    assert est.n_runs == 3
    assert est.std == pytest.approx(np.std([1.0, 3.0, 6.0], ddof=1))
    assert est.ci == (2.5, 97.5)


def test_estimate_without_a_defined_draw_has_a_nan_interval():
    est = estimate([[1.0]], boot=np.array([np.nan, np.inf]))
    assert np.isnan(est.ci).all()
    assert estimate([[1.0]]).ci is None


def test_row_log_loss_hand_case():
    np.testing.assert_allclose(row_log_loss([1, 0], [0.5, 0.25]), [np.log(2), -np.log(0.75)])
