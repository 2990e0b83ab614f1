"""A dataset's images end to end: ``loadgen run --dataset`` of the shipped ShareGPT-4V-style
sample (and a Parquet image column) against the small aiohttp vision server on loopback;
the bytes received are the files', the records count them, run.json rebuilds the images."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import loadgen
from loadgen.cli import app
from loadgen.orchestrate.recover import workload_of
from loadgen.workload.images import png, request_images
from tests.client.test_images_run import VisionServer, _parts, _run, _workload, runner

SAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "samples"


@pytest.fixture
def vision() -> Iterator[VisionServer]:
    with VisionServer() as srv:
        yield srv


def _images_of(body: dict[str, Any]) -> tuple[str, list[bytes]]:
    parts = _parts(body)
    assert parts[0]["type"] == "text"
    out = []
    for p in parts[1:]:
        head, b64 = p["image_url"]["url"].split(",", 1)
        assert head == "data:image/png;base64"
        out.append(base64.b64decode(b64, validate=True))
    return parts[0]["text"], out


def _dataset_run(url: str, out: Path, *args: str) -> Any:
    return runner.invoke(app, ["run", "--url", url, "--requests", "6", "--out", str(out), "--quiet", *args])


def test_the_sample_sends_each_entrys_own_image(vision: VisionServer, tmp_path: Path) -> None:
    sample = json.loads((SAMPLES / "sharegpt4v.json").read_text())
    files = {
        e["conversations"][0]["value"].replace("<image>", "").strip(): (SAMPLES / e["image"]).read_bytes()
        for e in sample
    }
    assert len(files) == 3 and all(len(b) < 1000 for b in files.values())
    res = _dataset_run(vision.url, tmp_path / "out", "--dataset", str(SAMPLES / "sharegpt4v.json"))
    assert res.exit_code == 0, res.output
    sent = vision.bodies[2:]  # after the calibration's two (text only)
    assert len(sent) == 6
    for body in sent:
        text, images = _images_of(body)
        assert "<image>" not in text
        assert images == [files[text]]  # the entry's own file, byte for byte
    records = [r for r in loadgen.read_records(tmp_path / "out") if not r.warmup]
    assert len(records) == 6 and all(r.ok and r.images == 1 for r in records)
    by_row = {r.source_row: r.image_bytes for r in records}
    assert by_row == {i: len((SAMPLES / e["image"]).read_bytes()) for i, e in enumerate(sample) if i in by_row}
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["workload"]["dataset"]["entries_with_images"] == 3


def test_a_parquet_image_column_and_image_root(vision: VisionServer, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (loadgen[datasets])")
    pics = [png(6 + i, 4, np.random.default_rng(i)) for i in range(3)]
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "two.png").write_bytes(pics[2])
    frame = pd.DataFrame(
        {
            "prompt": ["describe one", "describe two", "describe three"],
            "image": [
                {"bytes": pics[0], "path": None},
                {"bytes": pics[1], "path": "x.png"},
                {"bytes": None, "path": "two.png"},
            ],
        }
    )
    frame.to_parquet(tmp_path / "d.parquet")
    wl = tmp_path / "w.toml"
    wl.write_text('[dataset]\npath = "d.parquet"\nimage_root = "pics"\noutput_tokens = 2\n')
    res = _dataset_run(vision.url, tmp_path / "out", "--workload", str(wl))
    assert res.exit_code == 0, res.output
    want = dict(zip(frame["prompt"], pics))
    for body in vision.bodies[2:]:
        text, images = _images_of(body)
        assert images == [want[text]]
    rebuilt = workload_of(loadgen.read_run_info(tmp_path / "out"))
    assert rebuilt.dataset is not None and rebuilt.dataset.image_root == str(tmp_path / "pics")


@pytest.mark.parametrize(
    ("image", "needle"),
    [
        ("gone.png", "no such image file"),
        ("https://example.com/cat.png", "is a URL; loadgen fetches nothing"),
        ("/dev/zero", "image /dev/zero is a character device, not a regular file"),
        ("pics", "is a folder, not a regular file"),
    ],
)
def test_a_bad_reference_is_one_line_naming_the_row(
    vision: VisionServer, tmp_path: Path, image: str, needle: str
) -> None:
    (tmp_path / "ok.png").write_bytes(png(4, 4, np.random.default_rng(0)))
    (tmp_path / "pics").mkdir()
    rows = [{"prompt": "first", "image": "ok.png"}, {"prompt": "second", "image": image}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = _dataset_run(vision.url, tmp_path / "out", "--dataset", str(tmp_path / "d.jsonl"))
    assert res.exit_code == 2 and "line 2" in res.output and needle in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert vision.bodies == []


def test_images_table_beside_a_dataset(vision: VisionServer, tmp_path: Path) -> None:
    (tmp_path / "plain.jsonl").write_text('{"prompt": "a b c"}\n{"prompt": "d e f"}\n')
    wl = tmp_path / "w.toml"
    wl.write_text('[dataset]\npath = "plain.jsonl"\noutput_tokens = 2\n[images]\nwidth = 8\nheight = 8\n')
    res = _dataset_run(vision.url, tmp_path / "a", "--workload", str(wl))
    assert res.exit_code == 0, res.output
    seed = json.loads((tmp_path / "a" / "run.json").read_text())["config"]["seed"]
    records = {r.index: r for r in loadgen.read_records(tmp_path / "a") if not r.warmup}
    assert len(records) == 6 and all(r.images == 1 for r in records.values())
    rebuilt = workload_of(loadgen.read_run_info(tmp_path / "a"))  # what --resume uses: the same images
    assert rebuilt.images is not None
    assert {r.image_bytes for r in records.values()} == {
        len(request_images(rebuilt.images, seed, i)[0][1]) for i in records
    }
    # a dataset with its own images: refused beside [images]
    (tmp_path / "ok.png").write_bytes(png(4, 4, np.random.default_rng(0)))
    (tmp_path / "own.jsonl").write_text('{"prompt": "a b", "image": "ok.png"}\n')
    wl.write_text('[dataset]\npath = "own.jsonl"\n[images]\nwidth = 8\nheight = 8\n')
    res = _dataset_run(vision.url, tmp_path / "b", "--workload", str(wl))
    assert res.exit_code == 2 and "name images" in res.output and len(res.output.strip().splitlines()) == 1
    res = _dataset_run(vision.url, tmp_path / "c", "--dataset", str(tmp_path / "own.jsonl"), "--api", "completions")
    assert res.exit_code == 2 and "they need the chat" in res.output, res.output


def test_run_json_records_the_images_table(vision: VisionServer, tmp_path: Path) -> None:
    (tmp_path / "cat.png").write_bytes(png(7, 5, np.random.default_rng(9)))
    res = _run(vision.url, _workload(tmp_path, 'files = "*.png"\n'), tmp_path / "out")
    assert res.exit_code == 0, res.output
    info = loadgen.read_run_info(tmp_path / "out")
    assert info.workload is not None and info.workload.images is not None
    assert info.workload.images.files == [str(tmp_path / "*.png")] and info.workload.images.matched == 1
    assert workload_of(info).images is not None
    (tmp_path / "cat.png").write_bytes(png(7, 5, np.random.default_rng(10)))  # other bytes: refused on resume
    with pytest.raises(loadgen.errors.ConfigError, match="not the ones the run sent"):
        workload_of(info)
