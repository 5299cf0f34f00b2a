"""The report's sentences follow its intervals: a claim holds only where its joint interval
supports it (a gain above zero, a paired difference that excludes zero, a placebo whose
interval holds zero)."""

from solaris.examples.movielens.report.aggregate import BLIND_TR, FM_GAP, FM_GAP_BLIND, PAIRED
from solaris.examples.movielens.report.claims import claims
from solaris.examples.movielens.report.seed import CAUSAL_PLACEBO, TR_VARIANTS

Z, TIERS = "VM+z (100% offline)", "VM+SOLARIS tiers (served)"


def _f(mean: float, lo: float, hi: float) -> dict:
    return {"mean": mean, "ci95": [lo, hi], "window_means": [mean]}


def _summary(z_gain: dict, placebo_gain: dict) -> dict:
    names = [*TR_VARIANTS, *(f"{a} − {b}" for a, b in PAIRED), BLIND_TR]
    gain = {name: _f(0.0, -1e-3, 1e-3) for name in names}  # nothing measurable by default
    gain.update({FM_GAP: _f(0.02, 0.01, 0.03), FM_GAP_BLIND: _f(0.03, 0.02, 0.04)})
    gain.update({Z: z_gain, CAUSAL_PLACEBO: placebo_gain})
    tr = {name: _f(0.5, 0.2, 0.8) for name in names}
    gaps = {sel: [{"share": 0.05, **_f(0.3, 0.25, 0.35)}] for sel in ("verifier",)}
    gaps["verifier − retrieval"] = [{"share": 0.05, **_f(0.08, 0.05, 0.11)}]
    return {
        "transfer_ratio": {"neutral": tr, "like": tr},
        "gain": {"neutral": gain, "like": gain},
        "selection": {"gap_closed": gaps, "gap_closed_val": gaps},
    }


def _sentences(out: dict, key: str) -> str:
    return " ".join(out[key])


def test_a_gain_above_zero_holds_and_one_that_holds_zero_does_not():
    out = claims(_summary(_f(0.01, 0.004, 0.016), _f(0.0, -0.002, 0.002)))
    assert "z (100% offline): the VM's log-loss falls by +10.0e-3 [+4.0, +16.0]" in _sentences(
        out, "holds"
    )
    out = claims(_summary(_f(0.01, -0.001, 0.02), _f(0.0, -0.002, 0.002)))
    assert "z (100% offline): no measurable gain, +10.0e-3 [-1.0, +20.0]" in _sentences(
        out, "does_not"
    )


def test_the_causal_placebo_holds_only_as_a_null():
    null = claims(_summary(_f(0.01, 0.004, 0.016), _f(0.0, -0.002, 0.002)))
    assert "the causal placebo gains +0.0e-3 [-2.0, +2.0], as a null should" in _sentences(
        null, "holds"
    )
    leaky = claims(_summary(_f(0.01, 0.004, 0.016), _f(0.005, 0.001, 0.009)))
    assert "the causal placebo is not null: +5.0e-3 [+1.0, +9.0]" in _sentences(leaky, "does_not")


def test_the_verifier_and_the_earlier_claims_are_judged_by_their_intervals():
    out = claims(_summary(_f(0.01, 0.004, 0.016), _f(0.0, -0.002, 0.002)))
    assert out["holds"][0].startswith("At a 5% budget the verifier closes 30.0% [25.0, 35.0]")
    assert "beats the retrieval score by +8.0 pp [+5.0, +11.0]" in out["holds"][1]
    earlier = " ".join(out["earlier"])
    # rating==3: 67.8% lies inside [20, 80], which excludes 0; rating>=4: 85.7% does not.
    assert "rating==3: still holds" in earlier
    assert "rating>=4: no longer holds" in earlier
    # z − logits holds zero by default: the earlier "z beats the logits" no longer holds.
    assert "“on rating==3 z beats the FM's logits by 9.0 pp (users [1.5, 16.1])”: no longer" in (
        earlier
    )
