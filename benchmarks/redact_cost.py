"""Client CPU of one secret-masking call (:class:`loadgen.client.redact.Redactor`).

The redactor runs only on server text that is kept (an error body, an error event, a
``Location``, a vendor object), never per streamed event; this prints its cost on a
300-character error and on a 64 KiB error body (``MAX_ERROR``), without and with an echoed
key, and the one-off cost of building it (best of 5 runs).

    python benchmarks/redact_cost.py
"""

from __future__ import annotations

import timeit

from loadgen.client.redact import Redactor

HEADERS = {"Authorization": "Bearer sk-SEC-AAA111", "X-Custom-Token": "tok-9f8e7d6c5b4a"}


def main() -> None:
    redact = Redactor(HEADERS)
    line = "upstream refused the request: model overloaded, retry later. " * 5
    texts = {
        "300 B, no secret": line[:300],
        "300 B, key echoed": line[:250] + " Bearer sk-SEC-AAA111",
        "64 KiB, no secret": (line * 220)[: 64 << 10],
        "64 KiB, key echoed": (line * 220)[: (64 << 10) - 40] + " sk%2DSEC%2DAAA111",
    }
    build = min(timeit.repeat(lambda: Redactor(HEADERS), number=20, repeat=5)) / 20
    print(f"build: {build * 1e3:.2f} ms")
    for name, text in texts.items():
        n = 2000 if len(text) < 1000 else 50
        t = min(timeit.repeat(lambda text=text: redact(text), number=n, repeat=5)) / n  # type: ignore[misc]
        print(f"{name}: {t * 1e6:.1f} µs per call")


if __name__ == "__main__":
    main()
