"""What the report claims, written from its joint intervals so the prose cannot outrun them.

Every sentence quotes a figure with its 95% interval over seeds and users together
(:func:`solaris.examples.movielens.report.stats.joint_bootstrap`, over every window), and
a claim goes under "what holds" only where that interval supports it: a log-loss gain
above zero, a paired difference that excludes zero, a placebo whose interval holds zero.
Decisions are made on gains, not on transfer ratios: against a VM that already knows the
user the FM's advantage left is small, and a ratio over it is unstable. The earlier
reports' claims are re-tested the same way.
"""

from __future__ import annotations

import math
from typing import Any

from solaris.examples.movielens.report.aggregate import BLIND_TR, FM_GAP, FM_GAP_BLIND
from solaris.examples.movielens.report.render import TASK_LABEL
from solaris.examples.movielens.report.seed import (
    CAUSAL_PLACEBO,
    KD,
    LOGITS,
    SHUFFLED,
    TIERS,
    USER_CONTROL,
    Z,
)

__all__ = ["EARLIER", "claims"]


EARLIER_Z = {"like": 0.857, "neutral": 0.678}
# What the earlier reports (one window, the user-blind VM, intervals over seeds or over
# users alone) said, as they said it.
EARLIER = {
    "z": "z transfers 85.7% of the FM's advantage on rating>=4 and 67.8% on rating==3",
    "logits": "on rating==3 z beats the FM's logits by 9.0 pp (users [1.5, 16.1])",
    "tiers": "the served tiers transfer 47.6% on rating>=4, in line with the paper's 42–44%",
    "shuffled": "the placebo shuffled within user is the null that z's item-specific part "
    "is measured against",
    "verifier": "the verifier closes 35.1% of the random → oracle gap at 5% (seeds "
    "[34.3, 36.0]) and beats the retrieval score by 9 pp",
}


def _interval(f: dict[str, Any]) -> tuple[float, float]:
    """The joint interval; NaN where no bootstrap draw was defined (tiny data)."""
    return tuple(f["ci95"]) if f["ci95"] is not None else (float("nan"), float("nan"))


def _pct(f: dict[str, Any]) -> str:
    lo, hi = _interval(f)
    return f"{100 * f['mean']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def _pp(f: dict[str, Any]) -> str:
    lo, hi = _interval(f)
    return f"{100 * f['mean']:+.1f} pp [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def _above(f: dict[str, Any]) -> bool:
    return f["ci95"] is not None and f["ci95"][0] > 0


def _below(f: dict[str, Any]) -> bool:
    return f["ci95"] is not None and f["ci95"][1] < 0


def _gap(s: dict[str, Any], part: str, selector: str, share: float) -> dict[str, Any]:
    key = "gap_closed" if part == "test" else "gap_closed_val"
    return next(g for g in s["selection"][key][selector] if g["share"] == share)


def _selection(s: dict[str, Any], holds: list[str], not_: list[str]) -> None:
    test, val = _gap(s, "test", "verifier", 0.05), _gap(s, "val", "verifier", 0.05)
    diff = _gap(s, "test", "verifier − retrieval", 0.05)
    line = (
        f"At a 5% budget the verifier closes {_pct(test)} of the random → oracle coverage "
        f"gap on the test periods and {_pct(val)} on the validation periods"
    )
    (holds if _above(test) and _above(val) else not_).append(line + ".")
    if _above(diff):
        holds.append(f"It beats the retrieval score by {_pp(diff)} of the gap on test.")
    else:
        not_.append(
            f"The verifier is not distinguishable from the retrieval score at 5% on test: "
            f"{_pp(diff)} of the gap."
        )


def _g(f: dict[str, Any], signed: bool = True) -> str:
    """A log-loss gain in units of 1e-3 with its interval."""
    lo, hi = _interval(f)
    sign = "+" if signed else ""
    return f"{1000 * f['mean']:{sign}.1f}e-3 [{1000 * lo:{sign}.1f}, {1000 * hi:{sign}.1f}]"


def _task(s: dict[str, Any], task: str, holds: list[str], not_: list[str]) -> None:
    """One task's claims. Each is decided on the log-loss gain's interval (no denominator,
    so it stays defined where the VM is nearly as good as the FM); the TR is quoted."""
    tr, gain = s["transfer_ratio"][task], s["gain"][task]
    name = TASK_LABEL.get(task, task)
    seen = "an FM task" if task == "like" else "a task the FM never trained on"
    yes, no = [], []
    for label, row in (
        ("z (100% offline)", Z),
        ("the served tiers", TIERS),
        ("distillation", KD),
        ("the FM's logits", LOGITS),
    ):
        g = gain[row]
        if _above(g):
            yes.append(f"{label}: the VM's log-loss falls by {_g(g)} (TR {_pct(tr[row])})")
        else:
            no.append(f"{label}: no measurable gain, {_g(g)} (TR {_pct(tr[row])})")
    for label, key in (
        ("z beats the FM's logits", f"{Z} − {LOGITS}"),
        ("z beats distillation", f"{Z} − {KD}"),
        (
            "z beats the user's own earlier code (what z says about the item)",
            f"{Z} − {USER_CONTROL}",
        ),
        ("the served tiers beat another user's code", f"{TIERS} − {CAUSAL_PLACEBO}"),
    ):
        f = gain[key]
        if _above(f):
            yes.append(f"{label} by {_g(f)}")
        else:
            verdict = "the other way round" if _below(f) else "not distinguishably"
            no.append(f"{label}: {verdict}, {_g(f)}")
    placebo = gain[CAUSAL_PLACEBO]
    lo, hi = _interval(placebo)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        no.append(f"the causal placebo has no defined interval: {_g(placebo)}")
    elif lo <= 0 <= hi:
        yes.append(f"the causal placebo gains {_g(placebo)}, as a null should")
    else:
        no.append(f"the causal placebo is not null: {_g(placebo)}")
    fm, fm_blind = gain[FM_GAP], gain[FM_GAP_BLIND]
    intro = (
        f"On {name} ({seen}) the FM's log-loss is {_g(fm, signed=False)} below that of the "
        f"VM that already knows the user ({_g(fm_blind, signed=False)} below the user-blind "
        "VM's). "
    )
    if yes:
        holds.append(intro + "Holds: " + "; ".join(yes) + ".")
    if no:
        not_.append(intro + "Does not hold: " + "; ".join(no) + ".")


def _verdict(ok: bool) -> str:
    return "still holds" if ok else "no longer holds"


def _earlier(s: dict[str, Any]) -> list[str]:
    tr, gain = s["transfer_ratio"], s["gain"]
    like, neutral = "like", "neutral" if "neutral" in tr else "like"
    test = _gap(s, "test", "verifier", 0.05)
    diff = _gap(s, "test", "verifier − retrieval", 0.05)
    logits = gain[neutral][f"{Z} − {LOGITS}"]
    tiers, tiers_vs_null = gain[like][TIERS], gain[like][f"{TIERS} − {CAUSAL_PLACEBO}"]

    def z_holds(task: str) -> bool:
        """The earlier TR is still inside an interval that excludes zero."""
        lo, hi = _interval(tr[task][Z])
        return lo > 0 and lo <= EARLIER_Z[task] <= hi

    z_verdict = "; ".join(
        f"{TASK_LABEL[t]}: {_verdict(z_holds(t))}" for t in dict.fromkeys((like, neutral))
    )
    return [
        f"“{EARLIER['z']}”: against the user-blind VM it reproduces in these windows "
        f"({_pct(tr[like][BLIND_TR])} on rating>=4, {_pct(tr[neutral][BLIND_TR])} on "
        "rating==3), but a VM that knows the user already has most of what z gave it: the "
        f"FM's advantage on rating>=4 falls from {_g(gain[like][FM_GAP_BLIND])} to "
        f"{_g(gain[like][FM_GAP])}, z's gain over the user-aware VM is {_g(gain[like][Z])} "
        f"(TR {_pct(tr[like][Z])}), and on rating==3 z transfers {_pct(tr[neutral][Z])} "
        f"of an advantage of {_g(gain[neutral][FM_GAP])}. Against the user-aware VM, "
        f"{z_verdict}.",
        f"“{EARLIER['logits']}”: {_verdict(_above(logits))}; z's log-loss is "
        f"{_g(logits)} below the logits' on rating==3 (TR difference "
        f"{_pp(tr[neutral][f'{Z} − {LOGITS}'])}), over seeds and users together.",
        f"“{EARLIER['tiers']}”: against the user-aware VM the served tiers lower log-loss by "
        f"{_g(tiers)} on rating>=4 (TR {_pct(tr[like][TIERS])}) and beat another user's "
        f"code by {_g(tiers_vs_null)}; "
        + _verdict(_above(tiers) and _above(tiers_vs_null))
        + ". The paper's 42–44% is set beside this served-tiers row, not beside z.",
        f"“{EARLIER['shuffled']}”: no longer holds. That shuffle hands about half of the rows "
        "a code computed after the row, from a history holding the row's own rating; the "
        "report keeps it only with that caveat, and measures the item-specific part against "
        "the user's own earlier code instead.",
        f"“{EARLIER['verifier']}”: on the test periods of three windows it closes "
        f"{_pct(test)} and beats retrieval by {_pp(diff)}; "
        + _verdict(_above(test) and _above(diff))
        + " (the single interval was over seeds only).",
    ]


def claims(s: dict[str, Any]) -> dict[str, list[str]]:
    """``holds``, ``does_not`` and ``earlier`` (the earlier reports' claims re-tested)."""
    holds: list[str] = []
    not_: list[str] = []
    _selection(s, holds, not_)
    for task in s["transfer_ratio"]:
        _task(s, task, holds, not_)
    shuffled = ", ".join(
        f"{TASK_LABEL.get(t, t)} {_pct(s['transfer_ratio'][t][SHUFFLED])}"
        for t in s["transfer_ratio"]
    )
    not_.append(
        f"The placebo shuffled within user is not a null ({shuffled}): it is not causal, "
        "and what it carries is the user, which the user-aware VM partly has already."
    )
    return {"holds": holds, "does_not": not_, "earlier": _earlier(s)}
