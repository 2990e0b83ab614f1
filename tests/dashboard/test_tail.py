"""FolderTail: following a run folder as loadgen's own writer fills it, and a real run's folder."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from loadgen.dashboard.feed import Feed, level_point
from loadgen.dashboard.tail import FolderTail
from loadgen.load.profiles import Profile
from loadgen.orchestrate import RunConfig, execute
from loadgen.records import ErrorKind, RequestRecord
from loadgen.report.files import RunWriter, read_records
from loadgen.report.recordio import encode_batch, split_batch
from loadgen.server.process import ServerProcess
from loadgen.workload.spec import workload_from_flags

MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run_json(finished: bool = False, label: str = "tail test") -> dict[str, object]:
    run: dict[str, object] = {
        "tool": "loadgen",
        "label": label,
        "clock_anchor": {"unix_s": 1700000000.5, "perf_counter_ns": 1},
        "target": {"url": "http://127.0.0.1:8000", "api": "chat", "model": "llama"},
        "profile": {"kind": "levels", "mode": "concurrency", "levels": [2, 8], "requests": 4, "warmup_requests": 1},
    }
    if finished:
        run["finished"] = {"interrupted": False, "levels": 2, "stopped": None}
    return run


def _recs(level: int, n: int, start: int = 0) -> list[RequestRecord]:
    out = []
    for i in range(start, start + n):
        sent = (level * 1000 + i) * 100 * MS
        events = [[sent + 20 * MS, 1], [sent + 30 * MS, 2], [sent + 30 * MS, 1], [sent + 45 * MS, 1]]
        out.append(RequestRecord(index=i, level=level, sent_ns=sent, done_ns=sent + 50 * MS, events=events))
    return out


def _level_summary(value: int) -> dict[str, object]:
    return {
        "load": {"mode": "concurrency", "value": value},
        "requests": {"total": 4, "ok": 4, "failed": 0},
        "ttft_ms": {"p50": 20.0, "p99": 20.0, "intervals": {"p99": {"low": 19.0, "high": 21.0}}},
        "throughput": {"output_tokens_per_s": 100.0, "requests_per_s": 20.0},
    }


def test_the_tail_follows_a_writer(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    feed = Feed(clock=Clock())
    tail = FolderTail(folder, feed)  # the feed now keeps the run's time, as its records show it
    assert feed.clock == tail.clock and tail.clock() == 0.0
    tail.poll()  # nothing there yet: nothing happens
    assert feed.snapshot()["run"]["state"] == "starting" and not tail.done
    with RunWriter(folder) as w:
        tail.poll()  # empty files
        w.write_run(_run_json())
        warm = _recs(0, 1)
        warm[0].warmup = True
        w.append_batch(encode_batch(warm + _recs(0, 3, start=1)))
        tail.poll()
        snap = feed.snapshot()
        assert snap["run"]["title"] == "tail test" and snap["run"]["levels_planned"] == 2
        assert snap["run"]["started_unix"] == 1700000000.5 and snap["run"]["url"] == "http://127.0.0.1:8000"
        assert snap["level"]["heading"] == "level 1 of 2" and snap["level"]["target"] == "2 users"
        assert (snap["level"]["done"], snap["level"]["warm"], snap["level"]["requests"]) == (3, 1, 4)
        # the run's clock: its anchor at 1 ns, its last answer at 350 ms
        assert tail.clock() == pytest.approx(0.35 - 1e-9)
        p = feed.tick()["point"]
        # TTFT 20 ms; ITL: 10 ms over 3 tokens (coalesced), 15 ms over 1; 15 tokens over the
        # level's 0.35 s of the run's time (not the time this process took to read them)
        assert p["ttft_p50"] == 20.0 and p["itl_p99"] == 15.0
        assert p["out_tok_s"] == pytest.approx(15 / 0.35, abs=0.01) and p["t"] == pytest.approx(0.35)
        assert feed.tick()["point"] is None  # no new record, the run's clock has not moved: no point

        # a partial line waits for its end; its events are in events.bin before it
        bad = _recs(0, 1, start=4)[0]
        bad.fail(ErrorKind.HTTP_ERROR, "500", bad.done_ns, 500)
        lines, events = split_batch(encode_batch([bad]))
        with (folder / "events.bin").open("ab") as f:
            f.write(events)
        with (folder / "records.jsonl").open("ab") as f:
            f.write(bytes(lines)[:30])
        tail.poll()
        assert feed.snapshot()["totals"]["done"] == 3
        with (folder / "records.jsonl").open("ab") as f:
            f.write(bytes(lines)[30:] + b'{"not": "a record"}\n' + b"\x00garbage\n")
        tail.poll()
        assert feed.snapshot()["totals"] == {"done": 4, "failed": 1, "errors": {"http_error": 1}}
        assert tail.damaged == 2
        # the writer goes on after the damage, its events still in step
        w.append_batch(encode_batch(_recs(1, 4)))
        with (folder / "server_metrics.jsonl").open("a") as f:
            f.write(json.dumps({"t_ns": 5, "running": 7.0, "waiting": 2.0, "kv_usage": 0.3}) + "\n")
            f.write('{"t_ns": 6, "runn')  # torn
        w.write_summary({"levels": [_level_summary(2)]})
        tail.poll()
        snap = feed.snapshot()
        assert snap["level"]["index"] == 1 and snap["level"]["heading"] == "level 2 of 2"
        assert snap["totals"]["done"] == 8 and [lv["label"] for lv in snap["levels"]] == ["2 users"]
        msg = feed.tick()  # level 2's records moved the clock
        assert msg["point"]["t"] > p["t"]
        assert msg["point"]["running"] == 7.0 and msg["point"]["waiting"] == 2.0
        assert msg["levels"][0]["ttft_p99_lo"] == 19.0
        w.write_summary({"levels": [_level_summary(2), _level_summary(8)]})
        w.write_run(_run_json(finished=True))
    (folder / "report.html").write_text("<html></html>")
    tail.poll()
    assert tail.done and tail.report == folder / "report.html"
    snap = feed.snapshot()
    assert snap["run"]["state"] == "finished" and snap["run"]["report"] == str(folder / "report.html")
    assert [lv["label"] for lv in snap["levels"]] == ["2 users", "8 users"] and snap["progress"] == 1.0

    # a new run in the same folder: started again from scratch
    with RunWriter(folder) as w:
        w.write_run(_run_json(label="second"))
        w.append_batch(encode_batch(_recs(0, 2)))
        tail.poll()
    snap = feed.snapshot()
    assert snap["run"]["title"] == "second" and snap["run"]["state"] == "running" and not tail.done
    assert snap["totals"]["done"] == 2 and snap["levels"] == []


def test_a_poll_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import loadgen.dashboard.tail as tail_mod

    folder = tmp_path / "run"
    feed = Feed(clock=Clock())
    with RunWriter(folder) as w:
        w.write_run(_run_json())
        w.append_batch(encode_batch(_recs(0, 250)))
    tail = FolderTail(folder, feed)
    monkeypatch.setattr(tail_mod, "MAX_LINES", 100)
    tail.poll()
    assert feed.snapshot()["totals"]["done"] == 100
    tail.poll()
    tail.poll()
    assert feed.snapshot()["totals"]["done"] == 250 and tail.damaged == 0


def test_the_tail_of_a_real_run(tmp_path: Path) -> None:
    out = tmp_path / "real"
    with ServerProcess(["--engine", "sim"]) as url:
        cfg = RunConfig(
            url=url,
            api="chat",
            workload=workload_from_flags("64", "16"),
            profile=Profile(levels=[1, 4], requests=12, warmup_requests=2),
            out=out,
            live=False,
            scrape_metrics=True,
        )
        execute(cfg, Console(file=io.StringIO(), width=200))
    feed = Feed(clock=Clock())
    tail = FolderTail(out, feed)
    for _ in range(5):
        tail.poll()
    assert tail.done and tail.damaged == 0
    records = list(read_records(out))
    measured = [r for r in records if not r.warmup]
    snap = feed.snapshot()
    assert snap["totals"]["done"] == len(measured) == 24 and snap["totals"]["failed"] == 0
    assert snap["run"]["state"] == "finished" and snap["run"]["model"] and snap["progress"] == 1.0
    summary = json.loads((out / "summary.json").read_text())
    assert snap["levels"] == [level_point(lv, i) for i, lv in enumerate(summary["levels"])]
    first = snap["levels"][0]
    assert first["label"] == "1 user" and first["ok"] == 12
    assert first["ttft_p99_ms"] == round(summary["levels"][0]["ttft_ms"]["p99"], 3)
    assert first["out_tok_s"] == round(summary["levels"][0]["throughput"]["output_tokens_per_s"], 2)
    feed.tick()
    assert feed.snapshot()["series"]["running"][-1] is not None  # the scraped server sample
