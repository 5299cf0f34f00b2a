import numpy as np

from solaris.examples.movielens.report.aggregate import kd_choices, pool_distillation


def _seed(val: dict[str, float], chosen: float) -> dict:
    weights = list(val)
    return {
        "kd": {"like": {"val_logloss": val, "chosen": chosen, "at_edge": False, "n_inits": 5}},
        "kd_scores": {"like": {w: {"logloss": float(w)} for w in weights}},
        "table1": {"like": {"VM": {"logloss": 1.0}, "VM+KD": {"logloss": chosen}}},
        "row_losses": {"like": {"VM+KD": np.full(3, chosen)}},
        "kd_row_losses": {"like": {w: np.full(3, float(w)) for w in weights}},
    }


def test_one_distillation_weight_is_chosen_over_all_seeds_on_validation():
    # Seed a alone prefers 10, seed b alone 100; on the mean 100 wins (0.50 < 0.51).
    a = _seed({"0.0": 0.60, "10.0": 0.50, "100.0": 0.51}, chosen=10.0)
    b = _seed({"0.0": 0.60, "10.0": 0.52, "100.0": 0.49}, chosen=100.0)
    pooled = pool_distillation([a, b])
    for s in pooled:
        assert s["kd"]["like"]["chosen"] == 100.0
        assert s["table1"]["like"]["VM+KD"] == {"logloss": 100.0}
        np.testing.assert_array_equal(s["row_losses"]["like"]["VM+KD"], np.full(3, 100.0))
        assert s["kd"]["like"]["at_edge"]  # the largest weight of the grid won
    choices = kd_choices(pooled)["like"]
    assert choices["per_seed_choice"] == [10.0, 100.0] and choices["n_seeds"] == 2
    # Pure and idempotent: the inputs keep their own choice; pooling again changes nothing.
    assert a["table1"]["like"]["VM+KD"] == {"logloss": 10.0} and a["kd"]["like"]["chosen"] == 10.0
    again = pool_distillation(pooled)
    assert kd_choices(again)["like"] == choices
