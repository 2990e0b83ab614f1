"""Images in prompts: the synthesised PNGs are valid (decoded here with zlib, CRCs and
IHDR checked), seeded, sized by their distributions; ``[images]`` tables parse, and
malformed ones (a URL among them) are one-line errors naming the key."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from loadgen.client.dialects.images import data_url, input_image_parts
from loadgen.errors import WorkloadError
from loadgen.workload.generate import generate_specs
from loadgen.workload.images import MAX_SIDE, png, request_images
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.spec import load_workload

REPO_WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"


def _decode(data: bytes) -> tuple[int, int, np.ndarray]:
    """(width, height, pixels as a height x width x 3 array), checking every chunk's CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n : pos + 12 + n])
        assert crc == zlib.crc32(kind + body), kind
        chunks.append((kind, body))
        pos += 12 + n
    assert pos == len(data) and chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b"")
    w, h, depth, color, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color, comp, filt, interlace) == (8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    assert len(raw) == h * (3 * w + 1)
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(h, 3 * w + 1)
    assert (rows[:, 0] == 0).all()  # filter type 0 on every row
    return w, h, rows[:, 1:].reshape(h, w, 3)


@pytest.mark.parametrize(("w", "h"), [(1, 1), (512, 512), (3, 700), (1500, 40), (MAX_SIDE, 3)])
def test_synthesised_png_is_valid_and_random(w: int, h: int) -> None:
    data = png(w, h, np.random.default_rng(7))
    width, height, pixels = _decode(data)
    assert (width, height) == (w, h)
    if w >= 512:
        assert len(np.unique(pixels[0])) > 200  # random pixels, not a flat colour


def test_png_bytes_stay_small() -> None:
    data = png(512, 512, np.random.default_rng(1))
    assert len(data) < 512 * 512 * 3 / 10  # repeated rows compress: a tenth of the raw pixels at most


def test_pillow_reads_it_too() -> None:
    image_mod = pytest.importorskip("PIL.Image")
    import io

    im = image_mod.open(io.BytesIO(png(64, 48, np.random.default_rng(0))))
    im.load()
    assert im.size == (64, 48) and im.mode == "RGB"


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "w.toml"
    p.write_text("prompt_tokens = 16\noutput_tokens = 4\n[images]\n" + body)
    return p


def test_a_workload_file_with_images_parses_and_sends_seeded_images(tmp_path: Path) -> None:
    wl = load_workload(
        str(_write(tmp_path, 'count = "uniform:min=1,max=3"\nwidth = 64\nheight = "uniform:min=8,max=32"\n')), []
    )
    assert wl.images is not None and wl.to_dict()["images"]["width"] == "64"
    specs = generate_specs(wl, 40, seed=3, synth=PromptSynthesizer(0))
    again = generate_specs(wl, 40, seed=3, synth=PromptSynthesizer(0))
    other = generate_specs(wl, 40, seed=4, synth=PromptSynthesizer(0))
    assert [s.images for s in specs] == [s.images for s in again]
    assert [s.images for s in specs] != [s.images for s in other]
    counts = [len(s.images) for s in specs]
    assert set(counts) == {1, 2, 3}
    sizes = [_decode(data)[:2] for s in specs for _, data in s.images]
    assert {w for w, _ in sizes} == {64} and all(8 <= h <= 32 for _, h in sizes) and len({h for _, h in sizes}) > 5
    every = [data for s in specs for _, data in s.images]
    assert len(set(every)) == len(every)  # no two images alike: a server's cache cannot make them free
    # the images have their own generator: the texts and lengths are those of the workload without them
    plain = load_workload(str(tmp_path / "w.toml"), [])
    plain.images = None
    assert [s.prompt for s in generate_specs(plain, 40, seed=3, synth=PromptSynthesizer(0))] == [
        s.prompt for s in specs
    ]
    assert specs[5].images == request_images(wl.images, 3, specs[5].index)


def test_the_sample_vision_workload() -> None:
    wl = load_workload("vision", [REPO_WORKLOADS])
    assert wl.images is not None
    specs = generate_specs(wl, 20, seed=0, synth=PromptSynthesizer(0))
    for s in specs:
        assert 1 <= len(s.images) <= 2
        for mime, data in s.images:
            w, h, _ = _decode(data)
            assert mime == "image/png" and 256 <= w <= 1024 and 256 <= h <= 1024


def test_local_files_by_glob(tmp_path: Path) -> None:
    pics = tmp_path / "pics"
    pics.mkdir()
    a, b = png(4, 4, np.random.default_rng(1)), png(5, 5, np.random.default_rng(2))
    (pics / "a.png").write_bytes(a)
    (pics / "b.png").write_bytes(b)
    (pics / "c.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"jpeg-ish")
    wl = load_workload(str(_write(tmp_path, 'count = 2\nfiles = ["pics/*.png", "pics/*.jpg"]\n')), [])
    specs = generate_specs(wl, 30, seed=0, synth=PromptSynthesizer(0))
    seen = {im for s in specs for im in s.images}
    assert seen == {("image/png", a), ("image/png", b), ("image/jpeg", b"\xff\xd8\xff\xe0jpeg-ish")}
    assert all(len(s.images) == 2 for s in specs)


@pytest.mark.parametrize(
    ("body", "key", "needle"),
    [
        ("count = 1\nwidth = 8\n", "images.height", "missing"),
        ("width = 8\nheight = 8\nsize = 3\n", "images.size", "unknown key 'size'"),
        ('width = 8\nheight = 8\nformat = "jpeg"\n', "images.format", "JPEG needs an image library"),
        ('width = 8\nheight = 8\nformat = "bmp"\n', "images.format", "unknown format 'bmp'"),
        ("width = 9000\nheight = 8\n", "images.width", "at most 4,096"),
        ('width = "lognormal:median=800,sigma=1"\nheight = 8\n', "images.width", "give it a max"),
        ("count = 100\nwidth = 8\nheight = 8\n", "images.count", "at most 64"),
        ("width = 8.5\nheight = 8\n", "images.width", "expected a whole number"),
        ('width = "wide"\nheight = 8\n', "images.width", "unknown"),
        ('files = ["https://example.com/cat.png"]\n', "images.files", "is a URL; loadgen fetches nothing"),
        ('files = "http://example.com/a.png"\n', "images.files", "is a URL"),
        ('files = ["nothing/*.png"]\n', "images.files", "matches no file"),
        ('files = ["w.toml"]\n', "images.files", "is not a PNG, JPEG, GIF or WebP image"),
        ("files = []\n", "images.files", "expected a path or glob"),
        ('files = ["w.toml"]\nwidth = 8\n', "images.width", "not both"),
    ],
)
def test_malformed_images_tables_are_one_line_errors(tmp_path: Path, body: str, key: str, needle: str) -> None:
    with pytest.raises(WorkloadError) as err:
        load_workload(str(_write(tmp_path, body)), [])
    msg = str(err.value)
    assert key in msg and needle in msg and "\n" not in msg, msg


def test_images_a_table_also_beside_a_dataset(tmp_path: Path) -> None:
    p = tmp_path / "x.toml"
    p.write_text("prompt_tokens = 16\noutput_tokens = 4\nimages = 3\n")
    with pytest.raises(WorkloadError, match=r"images.*expected a table"):
        load_workload(str(p), [])
    p.write_text('[dataset]\npath = "d.jsonl"\n[images]\nwidth = 8\nheight = 8\n')
    wl = load_workload(str(p), [])  # for a dataset without images of its own (checked when it is loaded)
    assert wl.dataset is not None and wl.images is not None and wl.images.width is not None
    p.write_text('[dataset]\npath = "d.jsonl"\n[images]\nwidth = "oops"\n')
    with pytest.raises(WorkloadError, match=r"images.width"):
        load_workload(str(p), [])


def test_responses_parts_carry_the_data_url() -> None:
    im = ("image/png", b"\x89PNGxyz")
    assert data_url(im) == "data:image/png;base64,iVBOR3h5eg=="
    assert input_image_parts([im]) == [{"type": "input_image", "image_url": "data:image/png;base64,iVBOR3h5eg=="}]
