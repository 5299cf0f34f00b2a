"""The facts about the machine every benchmark prints above its figures."""

from __future__ import annotations

import datetime as dt
import os
import platform

__all__ = ["machine_facts"]


def machine_facts() -> dict[str, str]:
    """When and where a benchmark ran: date, CPUs, load, Python and platform."""
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": str(os.cpu_count()),
        "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
