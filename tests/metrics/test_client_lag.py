from loadgen.metrics.client import lag_over_time


def test_lag_over_time_bins_the_worst_sample() -> None:
    anchor = 1_000_000_000
    t = [anchor + int(x * 1e9) for x in (0.01, 0.5, 0.99, 1.2, 3.7, 3.9)]
    lag = [0.1, 2.0, 0.3, 0.4, 5.0, 1.0]
    assert lag_over_time(t, lag, anchor) == {"t_s": [0.0, 1.0, 3.0], "max_ms": [2.0, 0.4, 5.0]}
    assert lag_over_time([], [], anchor) == {"t_s": [], "max_ms": []}
