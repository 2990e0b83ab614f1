"""Workload files: the shipped ones load, the README's examples load, bad files are named."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from loadgen.errors import WorkloadError
from loadgen.paths import search_dirs
from loadgen.workload.distributions import Fixed, LogNormal, Uniform
from loadgen.workload.spec import (
    RequestClass,
    Workload,
    list_workloads,
    load_workload,
    workload_from_flags,
)

REPO_WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"
SHIPPED = ["agent", "chat", "code", "demo", "mixed", "multiturn", "prefix", "rag", "summarize", "vision"]
TOP_KEYS = (
    "allowed keys: name, description, prompt_tokens, output_tokens, joint_tokens, shared_prefix, classes, "
    "sessions, tools, tool_choice, dataset, arrivals, images, agent"
)


def write(tmp_path: Path, text: str, name: str = "wl.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def sample_mean_median(d: object, n: int = 50_000) -> tuple[float, float]:
    x = d.sample(np.random.default_rng(0), n)  # type: ignore[attr-defined]
    return float(x.mean()), float(np.median(x))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_workload_loads(name: str) -> None:
    wl = load_workload(name, [REPO_WORKLOADS])
    assert wl.name == name and wl.description
    assert wl.source == str(REPO_WORKLOADS / f"{name}.toml")
    assert wl.classes and all(c.weight > 0 for c in wl.classes)
    text = (REPO_WORKLOADS / f"{name}.toml").read_text(encoding="utf-8")
    assert text.startswith("#") and "numbers come from" in text  # the explanatory comment block


def test_shipped_workloads_have_the_documented_shapes() -> None:
    chat = load_workload("chat", [REPO_WORKLOADS]).classes[0]
    _, med = sample_mean_median(chat.prompt_tokens)
    assert med == pytest.approx(250, rel=0.03)
    _, med = sample_mean_median(chat.output_tokens)
    assert med == pytest.approx(200, rel=0.03)

    rag = load_workload("rag", [REPO_WORKLOADS]).classes[0]
    x = rag.prompt_tokens.sample(np.random.default_rng(0), 10_000)
    assert x.min() >= 2048 and x.max() <= 8192
    assert rag.output_tokens.mean() == pytest.approx(100, abs=2)

    code = load_workload("code", [REPO_WORKLOADS]).classes[0]
    assert code.output_tokens.mean() > chat.output_tokens.mean()

    summ = load_workload("summarize", [REPO_WORKLOADS]).classes[0]
    assert summ.prompt_tokens.mean() == pytest.approx(4096, rel=0.02)
    assert summ.output_tokens.mean() == pytest.approx(300, rel=0.02)

    mixed = load_workload("mixed", [REPO_WORKLOADS])
    assert [(c.name, c.weight) for c in mixed.classes] == [("chat", 95.0), ("long", 5.0)]
    assert mixed.classes[1].prompt_tokens == Uniform(8000, 16000)
    assert mixed.classes[1].output_tokens.mean() < 100

    prefix = load_workload("prefix", [REPO_WORKLOADS]).classes[0]
    assert (prefix.shared_prefix_groups, prefix.shared_prefix_tokens) == (4, 1024)


def test_list_workloads_names_and_descriptions() -> None:
    listed = list_workloads([REPO_WORKLOADS])
    assert [n for n, _ in listed] == SHIPPED
    assert all(desc for _, desc in listed)


def test_list_workloads_first_dir_wins_and_marks_invalid(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write(a, 'description = "from a"\nprompt_tokens = 1\noutput_tokens = 1\n', "x.toml")
    write(b, 'description = "from b"\nprompt_tokens = 1\noutput_tokens = 1\n', "x.toml")
    write(b, "oops = 1\n", "y.toml")
    assert list_workloads([a, b, tmp_path / "missing"]) == [
        ("x", "from a"),
        ("y", f"(invalid: {b / 'y.toml'}: oops: unknown key 'oops'; {TOP_KEYS})"),
    ]
    assert load_workload("x", [a, b]).description == "from a"
    assert load_workload("x", [b, a]).description == "from b"


def test_default_search_dirs_find_the_shipped_files() -> None:
    assert REPO_WORKLOADS in search_dirs("workloads")
    assert load_workload("chat", search_dirs("workloads")).name == "chat"


def test_readme_examples_load(tmp_path: Path) -> None:
    readme = (REPO_WORKLOADS / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", readme, flags=re.S)
    assert len(blocks) == 7
    single = load_workload(str(write(tmp_path, blocks[0], "single.toml")), [])
    assert single.classes[0].name == "default" and single.classes[0].shared_prefix_groups == 4
    assert single.classes[0].output_tokens == LogNormal(200.0, 0.8, 1, 2048)
    mix = load_workload(str(write(tmp_path, blocks[1], "mix.toml")), [])
    assert [c.name for c in mix.classes] == ["chat", "long"]
    assert mix.classes[1].output_tokens == Fixed(64)
    base = "prompt_tokens = 100\noutput_tokens = 100\n"
    sessions = load_workload(str(write(tmp_path, base + blocks[2], "sessions.toml")), []).sessions
    assert sessions is not None and (sessions.groups, sessions.system_prompt_tokens) == (8, 512)
    agent = load_workload(str(write(tmp_path, base + blocks[3], "agent.toml")), []).agent
    assert agent is not None
    tools = load_workload(str(write(tmp_path, base + blocks[4], "tools.toml")), [])
    assert tools.tool_choice == "auto" and tools.tools and tools.tools[0]["function"]["name"] == "get_weather"
    images = load_workload(str(write(tmp_path, base + blocks[5], "images.toml")), []).images
    assert images is not None and images.describe()["height"] == "512"
    joint = load_workload(str(write(tmp_path, blocks[6], "joint.toml")), []).classes[0].joint
    assert joint is not None and joint.cells == ((0, 0, 40.0), (1, 1, 25.0), (3, 2, 5.0))


def test_single_class_file_with_tables_and_csv(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "lens.csv").write_text("out\n10\n20\n", encoding="utf-8")
    path = write(
        tmp_path,
        """
name = "mine"
description = "d"
prompt_tokens = {dist = "normal", mean = 512, std = 128, min = 16}
output_tokens = {dist = "empirical", csv = "data/lens.csv", column = "out"}
[shared_prefix]
groups = 2
tokens = 64
""",
    )
    wl = load_workload(str(path), [])
    assert wl == Workload(
        "mine",
        "d",
        [RequestClass("default", 1.0, wl.classes[0].prompt_tokens, wl.classes[0].output_tokens, 2, 64)],
        str(path),
    )
    assert wl.classes[0].output_tokens.mean() == 15.0
    assert wl.to_dict()["classes"][0]["shared_prefix"] == {"groups": 2, "tokens": 64}


def test_name_defaults_to_file_stem_and_weight_to_one(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[[classes]]\nname = "a"\nprompt_tokens = 5\noutput_tokens = "uniform:min=1,max=3"\n', "stem.toml"
    )
    wl = load_workload(str(path), [])
    assert wl.name == "stem" and wl.description == "" and wl.classes[0].weight == 1.0


def test_unknown_name_lists_available() -> None:
    with pytest.raises(WorkloadError) as info:
        load_workload("chatt", [REPO_WORKLOADS])
    msg = str(info.value)
    assert msg.startswith(
        "workload: unknown workload 'chatt'; available: agent, chat, code, demo, mixed, multiturn, prefix, rag, summarize"
    )
    assert str(REPO_WORKLOADS) in msg


def test_missing_toml_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(WorkloadError, match=r"nope\.toml: no such workload file; named workloads: agent, chat, code"):
        load_workload(str(missing), [REPO_WORKLOADS])


BAD_FILES = [
    ("colour = 1\nprompt_tokens = 1\noutput_tokens = 1\n", "colour", ["unknown key 'colour'", TOP_KEYS]),
    ("name = 5\nprompt_tokens = 1\noutput_tokens = 1\n", "name", ["expected a string, got integer 5"]),
    ("prompt_tokens = true\noutput_tokens = 1\n", "prompt_tokens", ["expected spec text", "got boolean True"]),
    ("prompt_tokens = 1.5\noutput_tokens = 1\n", "prompt_tokens", ["got float 1.5"]),
    ("prompt_tokens = 1\n", "output_tokens", ["missing; it is required"]),
    (
        'prompt_tokens = "gauss:mean=3"\noutput_tokens = 1\n',
        "prompt_tokens",
        ["unknown distribution kind 'gauss'", "valid kinds: fixed, uniform, normal, lognormal, empirical"],
    ),
    (
        "prompt_tokens = 1\noutput_tokens = 1\nshared_prefix = 3\n",
        "shared_prefix",
        ["expected a table with groups, tokens, got integer"],
    ),
    (
        "prompt_tokens = 1\noutput_tokens = 1\n[shared_prefix]\ngroups = 0\ntokens = 5\n",
        "shared_prefix.groups",
        ["must be in [1, 1,000,000], got 0"],
    ),
    # past int64: was accepted, then an OverflowError when prompts were built (found writing tests/fuzz)
    (
        "prompt_tokens = 1\noutput_tokens = 1\n[shared_prefix]\ngroups = 2\ntokens = " + "9" * 40 + "\n",
        "shared_prefix.tokens",
        ["must be in [1, 1,000,000]"],
    ),
    # tomllib's ValueError for an integer of over 4,300 digits escaped (found by tests/fuzz)
    ("prompt_tokens = " + "9" * 4301 + "\noutput_tokens = 1\n", None, ["invalid TOML", "4300 digits"]),
    (
        "prompt_tokens = 1\noutput_tokens = 1\n[shared_prefix]\ngroups = 2\n",
        "shared_prefix.tokens",
        ["missing; it is required (a whole number >= 1)"],
    ),
    (
        "prompt_tokens = 1\noutput_tokens = 1\n[shared_prefix]\ngroups = 2\ntokens = 5\nsize = 1\n",
        "shared_prefix.size",
        ["unknown key 'size'; allowed keys: groups, tokens"],
    ),
    ("classes = 3\n", "classes", ["expected an array of tables ([[classes]]), got integer"]),
    ("classes = []\n", "classes", ["needs at least one class"]),
    (
        'prompt_tokens = 1\n[[classes]]\nname = "a"\nprompt_tokens = 1\noutput_tokens = 1\n',
        "prompt_tokens",
        ["either top-level prompt_tokens/output_tokens or [[classes]], not both"],
    ),
    (
        '[[classes]]\nname = "a"\nprompt_tokens = 1\noutput_tokens = 1\n[[classes]]\nname = "b"\ncolour = "red"\n',
        "classes[1].colour",
        ["unknown key 'colour'; allowed keys: name, weight, prompt_tokens, output_tokens, joint_tokens, shared_prefix"],
    ),
    (
        '[[classes]]\nname = "a"\nweight = "high"\nprompt_tokens = 1\noutput_tokens = 1\n',
        "classes[0].weight",
        ["expected a number > 0, got string 'high'"],
    ),
    (
        '[[classes]]\nname = "a"\nweight = 0\nprompt_tokens = 1\noutput_tokens = 1\n',
        "classes[0].weight",
        ["must be a finite number > 0, got 0"],
    ),
    (
        "[[classes]]\nweight = 1\nprompt_tokens = 1\noutput_tokens = 1\n",
        "classes[0].name",
        ["missing; it is required (a string)"],
    ),
    (
        '[[classes]]\nname = "a"\nprompt_tokens = 1\noutput_tokens = 1\n[[classes]]\nname = "a"\nprompt_tokens = 2\n'
        "output_tokens = 2\n",
        "classes[1].name",
        ["duplicate class name 'a'"],
    ),
    (
        '[[classes]]\nname = "a"\nprompt_tokens = "normal:mean=5,std=-1"\noutput_tokens = 1\n',
        "classes[0].prompt_tokens",
        ["normal: std must be >= 0, got -1", "normal takes mean, std (required)"],
    ),
    (
        '[[classes]]\nname = "a"\nprompt_tokens = 1\noutput_tokens = {dist = "uniform", min = 9}\n',
        "classes[0].output_tokens",
        ["uniform: missing required parameter 'max'"],
    ),
]


@pytest.mark.parametrize(
    ("text", "key", "parts"), BAD_FILES, ids=[f"{k or 'file'}{i}" for i, (_, k, _) in enumerate(BAD_FILES)]
)
def test_malformed_file_names_file_and_key(tmp_path: Path, text: str, key: str | None, parts: list[str]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path), [])
    msg = str(info.value)
    assert msg.startswith(f"{path}: {key}: " if key else f"{path}: "), msg
    assert info.value.source == str(path) and info.value.key == key and "\n" not in msg
    for part in parts:
        assert part in msg


def test_bad_toml_syntax_names_file_and_position(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "x"\nprompt_tokens = [1,\noutput_tokens = 1\n')
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path), [])
    msg = str(info.value)
    assert msg.startswith(f"{path}: invalid TOML: ")
    assert re.search(r"line \d+, column \d+", msg)


def test_bad_toml_found_by_name(tmp_path: Path) -> None:
    write(tmp_path, "name = \n", "broken.toml")
    with pytest.raises(WorkloadError, match=r"broken\.toml: invalid TOML: .*line 1"):
        load_workload("broken", [tmp_path])


def test_workload_from_flags() -> None:
    wl = workload_from_flags("256", "normal:mean=64,std=8")
    assert wl.name == "cli" and wl.source == "command line"
    assert [c.name for c in wl.classes] == ["default"]
    assert wl.classes[0].prompt_tokens == Fixed(256)
    assert wl.description == "prompt 256, output normal:mean=64,std=8"
    with pytest.raises(WorkloadError) as info:
        workload_from_flags("256", "normal:mean=64")
    assert info.value.field == "output_tokens"  # the CLI names it --output-tokens (tests/test_cli.py)
    assert str(info.value).startswith("command line: output_tokens: normal: missing required parameter 'std'")
