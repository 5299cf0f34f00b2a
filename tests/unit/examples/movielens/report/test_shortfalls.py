from solaris.examples.movielens.report.shortfalls import KD, LOGITS, PLACEBOS, Z, _transfer


def _row(mean: float, seed_half: float, user_half: float) -> dict:
    return {
        "mean": mean,
        "seed_ci95": [mean - seed_half, mean + seed_half],
        "user_bootstrap_ci95": [mean - user_half, mean + user_half],
    }


def _summary(kd: dict) -> dict:
    rows = {KD: kd, Z: _row(0.6, 0.05, 0.2)}
    rows.update({name: _row(0.0, 0.05, 0.05) for name in PLACEBOS})
    rows.update({f"{Z} − {other}": _row(0.2, 0.05, 0.05) for other in (LOGITS, KD)})
    return {"transfer_ratio": {"like": rows}}


def test_a_stable_distillation_tr_is_not_a_shortfall():
    assert _transfer(_summary(_row(0.4, 0.08, 0.09))) == []


def test_distillation_shortfalls_name_the_seed_and_the_user_interval_apart():
    seed_wide = _transfer(_summary(_row(0.4, 0.15, 0.09)))
    assert len(seed_wide) == 1 and "seed interval is ±15.0 pp" in seed_wide[0]
    user_wide = _transfer(_summary(_row(0.4, 0.08, 0.25)))
    assert len(user_wide) == 1
    assert "±8.0 pp over seeds but ±25.0 pp over users" in user_wide[0]
    assert "z's own user interval there is ±20.0 pp" in user_wide[0]
