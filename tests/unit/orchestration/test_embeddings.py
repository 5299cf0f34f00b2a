"""The embeddings DAG keeps its work queue in the cycle's own state."""

from __future__ import annotations

import pandas as pd

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.orchestration.embeddings import work_intervals
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.orchestration.resources import write_parquet


def test_an_earlier_selection_left_without_codes_is_embedded_by_the_next_run(tmp_path) -> None:
    cfg = SolarisConfig(namespace="t_emb", artifacts_dir=tmp_path)
    layout = CycleLayout(Namespace.of(cfg))
    done, lost, now = Interval(0, 900), Interval(900, 1_800), Interval(1_800, 2_700)
    for interval in (done, lost, now):
        write_parquet(pd.DataFrame({"user_id": [1]}), layout.selections(interval))
    layout.embeddings_done(done).parent.mkdir(parents=True)
    layout.embeddings_done(done).touch()
    # The event of `lost` never came (or its run failed): the run for `now` takes it too.
    assert work_intervals(cfg, [now]) == [lost, now]
    # Nothing later than the run's own intervals is taken ahead of its event.
    assert work_intervals(cfg, [lost]) == [lost]
