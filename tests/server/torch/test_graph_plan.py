"""What the torch engine captures at start-up and how much memory it keeps for decodes."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch engine needs torch: pip install -e '.[server]'")

from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.server.config import ServeConfig, TorchOptions
from loadgen.server.torch.cuda_graphs import capture_plan
from loadgen.server.torch.memory import blocks_within
from loadgen.server.torch.worker import build_core, graph_batch_sizes


def test_capture_plan_is_every_bounded_shape() -> None:
    # contexts up to 100 tokens: 7 blocks of 16, bucket 8; one layer's K+V of a shape is
    # batch * blocks * 16 * 1024 bytes, at most 131072: batch * blocks <= 8
    plan = capture_plan([4, 1, 2], 16, 100, 131072, 1024)
    assert plan == [(1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2)]


def test_graph_batch_sizes_end_at_max_num_seqs() -> None:
    assert graph_batch_sizes((), 256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert graph_batch_sizes((), 48) == [1, 2, 4, 8, 16, 32, 48]
    assert graph_batch_sizes((100, 3, 1, 3), 48) == [1, 3, 48]


def test_kv_blocks_leave_room_for_the_decode_gather() -> None:
    # 32 blocks of 100 bytes = 3200, plus a twofold-padded gather of one layer of 32:
    # 2 * 3200 / 32 = 200; 3400 bytes in all
    assert blocks_within(3400, 100, 32) == 32
    assert blocks_within(3399, 100, 32) == 31
    assert blocks_within(-5, 100, 32) == 0


def test_cpu_core_captures_nothing_and_says_so() -> None:
    config = ServeConfig(
        engine="torch",
        model="tiny",
        torch=TorchOptions(device="cpu", threads=1, kv_cache_gb=0.01, cuda_graph_sizes=(1, 2)),
    )
    core, info = build_core(config)
    assert (info["cuda_graphs"], info["graph_capture_s"]) == (0, 0.0)
    assert core.scheduler.config.num_gpu_blocks > 0


@pytest.mark.parametrize("sizes", ["1,x", "0,2", "4,-1"])
def test_bad_graph_sizes_are_one_line(sizes: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--engine", "torch", "--cuda-graph-sizes", sizes])
    assert result.exit_code == 2
    assert "--cuda-graph-sizes" in result.output and "Traceback" not in result.output
