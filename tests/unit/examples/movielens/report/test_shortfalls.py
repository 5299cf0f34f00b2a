from solaris.examples.movielens.report.shortfalls import KD, PLACEBOS, _transfer


def _row(mean: float, half: float) -> dict:
    return {"mean": mean, "ci95": [mean - half, mean + half]}


def _summary(placebo: dict) -> dict:
    rows = {KD: _row(0.4, 0.25)}
    rows.update({name: placebo for name in PLACEBOS})
    return {"transfer_ratio": {"like": rows}}


def test_distillation_is_quoted_with_its_joint_half_width():
    out = _transfer(_summary(_row(0.0, 0.05)))
    assert out == [
        "On like the distillation TR is 40% [15, 65]: ±25 pp over seeds and users together."
    ]


def test_a_placebo_whose_interval_holds_zero_is_not_a_shortfall():
    assert len(_transfer(_summary(_row(0.2, 0.3)))) == 1


def test_a_placebo_away_from_zero_is_named_with_its_sign():
    above = _transfer(_summary(_row(0.3, 0.1)))
    assert any("Placebo above 0 on like" in x for x in above)
    below = _transfer(_summary(_row(-0.3, 0.1)))
    assert any("Placebo below 0 on like" in x for x in below)
