"""URL handling before a run: normalising, credentials into a header, redaction."""

from __future__ import annotations

import base64

import pytest

from loadgen.client.discovery import discover, endpoint_path, normalize_url, split_credentials
from loadgen.client.redact import redact_url
from loadgen.errors import ConfigError, TargetError
from tests.client.redirecting import RedirectingServers
from tests.scripted_server import ScriptedServer


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("http://u:pw@Host:8000/v1?key=k#frag", "http://Host:8000/v1"),
        ("http://pw@[::1]:8000", "http://[::1]:8000"),
        ("http://u:p@ss@h/v1", "http://h/v1"),  # an unencoded '@' in the password
        ("http://h:99999/x?k=1", "http://h:99999/x"),  # an impossible port is still cleaned
        ("x://a:b", "x://a:b"),
        ("http://[::1?k=1", "http://..."),  # not parsable: only the scheme is kept
    ],
)
def test_redact_url(url: str, want: str) -> None:
    assert redact_url(url) == want


@pytest.mark.parametrize("url", ["http://h:99999", "http://h:port/v1", "http://[::1", "ftp://h", "h:8000"])
def test_a_url_that_cannot_be_used_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match=r"^url: not a"):
        normalize_url(url)


def test_credentials_become_a_basic_header() -> None:
    base, headers = split_credentials(normalize_url("http://me:p%40ss@h:8000/v1/"))
    assert base == "http://h:8000"
    assert base64.b64decode(headers["Authorization"].removeprefix("Basic ")) == b"me:p@ss"
    assert split_credentials("http://h:8000") == ("http://h:8000", {})


async def test_a_redirected_model_list_is_an_error_naming_its_location() -> None:
    """Even with --model given: the URL is not the server's."""
    async with RedirectingServers() as srv:
        with pytest.raises(TargetError, match=f"answered HTTP 302: redirect to '{srv.target}/v1/models' not followed"):
            await discover(srv.url, {"X-Secret": "s"}, "m")
    assert srv.reached == []


@pytest.mark.parametrize(
    ("url", "base", "path"),
    [
        ("http://h:8000/v1/chat/completions", "http://h:8000", "/v1/chat/completions"),
        ("http://h:8000/v1/completions/", "http://h:8000", "/v1/completions"),
        ("http://h/proxy/v1/responses", "http://h/proxy", "/v1/responses"),
        ("http://h/v1/messages", "http://h", "/v1/messages"),
        ("http://h/v1/embeddings", "http://h", "/v1/embeddings"),
        ("http://h/v2/rerank", "http://h", "/v2/rerank"),
        ("http://h/v1/score", "http://h", "/v1/score"),
        ("http://h/v1/models", "http://h", "/v1/models"),
        ("http://h:8000/v1", "http://h:8000", None),
        ("http://h:8000/proxy", "http://h:8000/proxy", None),
    ],
)
def test_an_endpoint_url_is_cut_to_its_base(url: str, base: str, path: str | None) -> None:
    assert normalize_url(url) == base
    assert endpoint_path(url) == path


async def test_a_model_list_missing_under_a_path_says_url_takes_the_base_url() -> None:
    async with ScriptedServer() as srv:
        with pytest.raises(TargetError, match=r"404 \(--url takes the server's base URL, .*\); pass --model"):
            await discover(normalize_url(srv.url + "/proxy"), {})
