"""Every read of ``loadgen watch`` is bounded, on real files: run.json linked to /dev/zero, a
summary.json over the cap, a record claiming 2 GB of events, a record whose events are over
the cap; each is one line and the tail goes on with what it can read."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

import loadgen.dashboard.tail as tail_mod
from loadgen.dashboard.feed import Feed
from loadgen.dashboard.tail import MAX_JSON_BYTES, FolderTail
from loadgen.report.files import RunWriter
from loadgen.report.recordio import encode_batch, split_batch
from tests.dashboard.conftest import Loadgen
from tests.dashboard.test_tail import Clock, _recs, _run_json

ZERO = Path("/dev/zero")
pytestmark = pytest.mark.skipif(not ZERO.exists(), reason="needs /dev/zero")


def _claiming(nbytes: int, index: int) -> bytes:
    """A record line as the writer writes it, its events claiming ``nbytes`` of events.bin."""
    line = json.loads(bytes(split_batch(encode_batch(_recs(0, 1, start=index)))[0]))
    line["events"] = {"n": nbytes // 20, "bytes": nbytes}
    return json.dumps(line).encode() + b"\n"


def _append(folder: Path, lines: bytes = b"", events: bytes = b"") -> None:
    """Bytes added as the writer adds them: the events first, then the lines."""
    with (folder / "events.bin").open("ab") as f:
        f.write(events)
    with (folder / "records.jsonl").open("ab") as f:
        f.write(lines)


def _batch(first: int, n: int) -> tuple[bytes, bytes]:
    lines, events = split_batch(encode_batch(_recs(0, n, start=first)))
    return bytes(lines), bytes(events)


def test_run_json_on_a_device_and_a_summary_over_the_cap_are_one_line_each(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    with RunWriter(folder) as w:
        w.append_batch(encode_batch(_recs(0, 3)))
    (folder / "run.json").symlink_to(ZERO)  # never ends: read whole, it would fill the memory
    with (folder / "summary.json").open("wb") as f:
        f.truncate(MAX_JSON_BYTES + 1)  # sparse: no disk taken
    feed = Feed(clock=Clock())
    tail = FolderTail(folder, feed)
    for _ in range(3):
        tail.poll()
    assert feed.snapshot()["totals"]["done"] == 3  # the records still read
    assert tail.problems == [
        f"{folder / 'run.json'} is a character device, not a regular file: not read",
        f"{folder / 'summary.json'} is {MAX_JSON_BYTES + 1:,} bytes, over 32 MiB: not read",
    ]
    (folder / "run.json").unlink()
    (folder / "run.json").write_text(json.dumps(_run_json()))  # once a real one comes, it is read
    tail.poll()
    assert feed.snapshot()["run"]["title"] == "tail test" and len(tail.problems) == 2


def test_a_record_claiming_2_gb_of_events_is_never_read(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    with RunWriter(folder) as w:
        w.write_run(_run_json())
        w.append_batch(encode_batch(_recs(0, 2)))
    _append(folder, _claiming(2_000_000_000, 2))  # its bytes are not in events.bin
    lines, events = _batch(3, 2)
    _append(folder, lines, events)
    feed = Feed(clock=Clock())
    tail = FolderTail(folder, feed)
    tail.poll()
    # a writer puts the bytes before the line: these may still come, nothing is read yet
    assert feed.snapshot()["totals"]["done"] == 2 and tail.damaged == 0 and not tail.problems
    (folder / "run.json").write_text(json.dumps(_run_json(finished=True)))
    tail.poll()  # the run has ended: they never come; the lines after it are read in step
    assert feed.snapshot()["totals"]["done"] == 4 and tail.damaged == 1 and tail.done
    assert tail.problems == [f"{folder / 'records.jsonl'}: a record claims events past the end of events.bin"]


def test_events_over_the_cap_are_skipped_unread_and_a_poll_reads_at_most_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "run"
    with RunWriter(folder) as w:
        w.write_run(_run_json())
    big = _recs(0, 1, start=0)[0]
    t = big.sent_ns
    big.events = [[t + i * 1_000_000, 1] for i in range(1, 400)]  # about 1.6 kB of events
    lines, events = split_batch(encode_batch([big, *_recs(0, 6, start=1)]))
    _append(folder, bytes(lines), bytes(events))
    small = len(split_batch(encode_batch(_recs(0, 1, start=1)))[1])
    monkeypatch.setattr(tail_mod, "MAX_EVENT_BYTES", 2 * small)  # the big one is over, two small fit a poll
    feed = Feed(clock=Clock())
    tail = FolderTail(folder, feed)
    tail.poll()
    snap = feed.snapshot()
    assert snap["totals"]["done"] == 3 and tail.damaged == 0  # the big one (without its events), two more
    assert tail.problems == [
        f"{folder / 'records.jsonl'}: a record's events are over {2 * small} bytes: shown without them"
    ]
    tail.poll()
    tail.poll()
    assert feed.snapshot()["totals"]["done"] == 7 and tail.damaged == 0  # the small ones' events in step
    p = feed.tick()["point"]
    assert p["ttft_p50"] == 20.0  # the events decoded: every small record's first token at 20 ms


def test_watch_goes_on_with_run_json_linked_to_dev_zero(tmp_path: Path) -> None:
    """The CLI, its memory capped at 1 GiB: one warning line, the page served, Ctrl-C ends it (0)."""
    folder = tmp_path / "run"
    with RunWriter(folder) as w:
        w.append_batch(encode_batch(_recs(0, 3)))
    (folder / "run.json").symlink_to(ZERO)
    watch = Loadgen(["watch", str(folder), "--port", "0"], memory_cap=1 << 30)
    try:
        watch.url("watching ")
        watch.line("warning: ")
        watch.proc.send_signal(signal.SIGINT)
        code = watch.wait()
    finally:
        watch.close()
    assert code == 0, watch.text()
    assert watch.lines[1:] == [
        f"warning: {folder / 'run.json'} is a character device, not a regular file: not read",
        "stopped watching",
    ], watch.text()
