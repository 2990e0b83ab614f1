from loadgen.metrics.client import lag_over_time, late_sends
from loadgen.records import RequestRecord


def test_lag_over_time_bins_the_worst_sample() -> None:
    anchor = 1_000_000_000
    t = [anchor + int(x * 1e9) for x in (0.01, 0.5, 0.99, 1.2, 3.7, 3.9)]
    lag = [0.1, 2.0, 0.3, 0.4, 5.0, 1.0]
    assert lag_over_time(t, lag, anchor).to_json() == {"t_s": [0.0, 1.0, 3.0], "max_ms": [2.0, 0.4, 5.0]}
    assert lag_over_time([], [], anchor).to_json() == {"t_s": [], "max_ms": []}


def test_late_sends_counts_beyond_the_threshold() -> None:
    recs = [
        RequestRecord(index=i, scheduled_ns=1_000_000_000, sent_ns=1_000_000_000 + d)
        for i, d in enumerate((0, 2_000_000, 2_000_001, 50_000_000))
    ]
    assert late_sends(recs) == 2
