"""`redact_argv`: the command line that run.json keeps has no secrets and never fails; a
run against a server that echoes the API key in any form writes none of them."""

from __future__ import annotations

import html
import json
import os
import random
import string
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from loadgen.client.redact import redact_argv as _redact_argv

SECRET = "S3cr3t"


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (
            ["run", "--url", f"http://me:{SECRET}@gpu-1:8000/v1?api_key={SECRET}#{SECRET}"],
            ["run", "--url", "http://gpu-1:8000/v1"],
        ),
        ([f"--url=http://me:{SECRET}@gpu-1:8000/v1?api_key={SECRET}"], ["--url=http://gpu-1:8000/v1"]),
        (["--url", f"https://{SECRET}@[::1]:8443"], ["--url", "https://[::1]:8443"]),
        (["--url", f"http://me:{SECRET}%40x@h"], ["--url", "http://h"]),  # an encoded '@' in the password
        (
            ["--header", f"Authorization: Bearer {SECRET}", "--rate", "2"],
            ["--header", "Authorization: ***", "--rate", "2"],
        ),
        ([f"--header=X-Api-Key: {SECRET}"], ["--header=X-Api-Key: ***"]),
        (["--header", f"Referer: http://me:{SECRET}@x/?k={SECRET}"], ["--header", "Referer: ***"]),
        ([f"--header=Referer: http://x/?k={SECRET}"], ["--header=Referer: ***"]),
        (["--header", "A: 1", "--header", f"B: {SECRET}"], ["--header", "A: ***", "--header", "B: ***"]),
        (["--header", SECRET, f"--header={SECRET}"], ["--header", ": ***", "--header=: ***"]),  # no name: refused later
        (
            ["--workload", "chat", "--concurrency", "8", "--slo", "ttft=200ms", "--label", "a b"],
            ["--workload", "chat", "--concurrency", "8", "--slo", "ttft=200ms", "--label", "a b"],
        ),
    ],
)
def test_secrets_are_removed_and_the_rest_kept(argv: list[str], want: list[str]) -> None:
    assert _redact_argv(argv) == want


@pytest.mark.parametrize(
    "arg",
    ["http://h:99999", "http://h:port/v1", "x://a:b", "http://[::1", f"http://[::1?k={SECRET}", "://", "a://"],
)
def test_text_that_only_looks_like_a_url_does_not_fail(arg: str) -> None:
    """Before, an invalid port here was a traceback instead of a run (or a one-line error)."""
    for argv in (["--label", arg], [f"--label={arg}"], ["--url", arg]):
        out = _redact_argv(argv)
        assert len(out) == len(argv) and SECRET not in " ".join(out)


def _secret_argv(rng: random.Random) -> list[str]:
    """A command line with the secret in a password, a query, a fragment or a header value,
    given as "--opt value" or "--opt=value", among ordinary arguments."""
    userinfo = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:%"
    password = SECRET + "".join(rng.choice(userinfo) for _ in range(rng.randrange(8)))
    host = rng.choice(["h", "gpu-1.example", "10.0.0.7:8000", "[fe80::1]:80"])
    where = rng.randrange(4)
    if where == 0:
        opt, value = "--url", f"http://{rng.choice(['', 'user:'])}{password}@{host}/v1"
    elif where == 1:
        opt, value = "--url", f"http://{host}/v1?{rng.choice(['key', 'a=1&token'])}={password}"
    elif where == 2:
        opt, value = "--url", f"http://{host}/v1#{password}"
    else:
        opt, value = "--header", f"X-{rng.choice(['Key', 'Auth'])}:{rng.choice(['', ' '])}{password} {host}"
    given = [opt, value] if rng.random() < 0.5 else [f"{opt}={value}"]
    plain = [["run"], ["--rate", "3"], ["--api", "chat"], ["--label", "x"]]
    rng.shuffle(plain)
    cut = rng.randrange(len(plain) + 1)
    return [a for p in plain[:cut] for a in p] + given + [a for p in plain[cut:] for a in p]


def test_no_secret_survives_in_any_form() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        argv = _secret_argv(rng)
        out = _redact_argv(argv)
        assert SECRET not in " ".join(out), (argv, out)
        assert len(out) == len(argv)
        assert [a for a in out if a in ("run", "--rate", "3", "--api", "chat", "--label", "x")] == [
            a for a in argv if a in ("run", "--rate", "3", "--api", "chat", "--label", "x")
        ]


def test_any_text_is_accepted() -> None:
    """Whatever the shell hands over, redaction returns one string per argument."""
    rng = random.Random(11)
    alphabet = string.printable + "[]@:/?#%é\u2028"
    for _ in range(2000):
        argv = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(20))) for _ in range(rng.randrange(1, 5))]
        argv[rng.randrange(len(argv))] = rng.choice(["://", "http://", "--header", "--header="]) + argv[0]
        out = _redact_argv(argv)
        assert len(out) == len(argv) and all(isinstance(a, str) for a in out)


def test_a_run_keeps_no_form_of_the_key_a_server_echoes(tmp_path: Path) -> None:
    """A proxy on loopback echoes the API key (given with --api-key-env) in each form of
    tests/hostile_server.py's echo_forms: in a 401 body, in an error event and in an ok
    stream's text and vendor object. No file of the run folder holds any form of it (nor
    those forms JSON- or HTML-escaped again), and the records show the mask."""
    from tests.hostile_server import HostileServer, echo_forms

    key = "sk-SEC/AAA111"
    names = list(echo_forms(key))
    modes = [f"form:{where}:{name}" for where in ("status", "event", "content") for name in names]
    out = tmp_path / "run"
    with HostileServer(streams=["ok", "ok", *modes]) as srv:
        args = ["--url", srv.url + "/v1", "--api", "completions", "--api-key-env", "ECHO_KEY", "--out", str(out)]
        args += ["--concurrency", "1", "--requests", str(len(modes)), "--prompt-tokens", "8", "--output-tokens", "4"]
        env = {**os.environ, "ECHO_KEY": key, "COLUMNS": "200"}
        proc = subprocess.run(
            [sys.executable, "-m", "loadgen.cli", "run", *args, "--quiet"],
            capture_output=True,
            env=env,
            timeout=240,
            check=False,
        )
        assert srv.handled == 2 + len(modes), proc.stderr.decode(errors="replace")[-2000:]
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == len(modes)
    statuses = Counter(r["status"] for r in records)
    assert statuses == {"http_error": len(names), "error_event": len(names), "ok": len(names)}, statuses
    assert all("***" in r["error"] for r in records if r["status"] != "ok")
    assert all("***" in json.dumps(r["server"]) for r in records if r["status"] == "ok")
    forms = {key: key, **echo_forms(key)}
    files = [p for p in sorted(out.rglob("*")) if p.is_file()]
    assert {"records.jsonl", "run.json", "summary.json", "report.html", "events.bin"} <= {p.name for p in files}
    for path in files:
        blob = path.read_bytes()
        for name, form in forms.items():
            for written in {form, json.dumps(form)[1:-1], html.escape(form)}:
                assert written.encode() not in blob, (path.name, name, written)
    for output in (proc.stdout, proc.stderr):
        assert not [name for name, form in forms.items() if form.encode() in output]
