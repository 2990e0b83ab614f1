"""Write the small sample files of workloads/samples/ (synthetic text, no real user data).

    python workloads/samples/make_samples.py

One file per format loadgen reads: datasets (ShareGPT JSON, OpenAI chat JSONL, prompt
JSONL, CSV, Parquet when pyarrow is installed) and traces (Mooncake JSONL, Azure CSV,
BurstGPT CSV). Seeded: the same files every time. Prompt and answer lengths are
correlated (long questions get long answers), as in real traffic; Mooncake rows share
hash ids (a few system prompts and a few long documents), so prefix caching has work.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORDS = [
    w.strip()
    for w in (HERE.parents[1] / "loadgen" / "data" / "words.txt").read_text().splitlines()
    if w.strip() and not w.startswith("#")
]


def text(rng: np.random.Generator, n: int) -> str:
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n))


def lengths(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Correlated (prompt, answer) word counts: lognormal, log-correlation about 0.6."""
    z = rng.standard_normal((n, 2))
    z[:, 1] = 0.6 * z[:, 0] + 0.8 * z[:, 1]
    p = np.clip(np.exp(np.log(60) + 0.8 * z[:, 0]), 4, 600).astype(int)
    a = np.clip(np.exp(np.log(40) + 0.7 * z[:, 1]), 2, 400).astype(int)
    return p, a


def datasets(n: int = 48) -> None:
    rng = np.random.default_rng(11)
    p, a = lengths(rng, n)
    prompts = [text(rng, int(k)) for k in p]
    answers = [text(rng, int(k)) for k in a]
    sharegpt = [
        {"id": f"sample-{i}", "conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": r}]}
        for i, (q, r) in enumerate(zip(prompts, answers))
    ]
    (HERE / "sharegpt.json").write_text(json.dumps(sharegpt, indent=1) + "\n")
    with (HERE / "chat.jsonl").open("w") as fh:
        for i, (q, r) in enumerate(zip(prompts, answers)):
            msgs = [{"role": "system", "content": "You answer briefly."}] if i % 3 == 0 else []
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": r}]
            fh.write(json.dumps({"messages": msgs}) + "\n")
    with (HERE / "prompts.jsonl").open("w") as fh:
        for q, k in zip(prompts, a):
            fh.write(json.dumps({"prompt": q, "output_tokens": int(k)}) + "\n")
    with (HERE / "prompts.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["prompt", "output_tokens"])
        w.writerows([q, int(k)] for q, k in zip(prompts, a))
    try:
        import pandas as pd

        pd.DataFrame({"conversations": [c["conversations"] for c in sharegpt]}).to_parquet(HERE / "sharegpt.parquet")
    except ImportError:
        print("pyarrow is not installed: no sharegpt.parquet (pip install pyarrow)")


def traces(n: int = 240) -> None:
    rng = np.random.default_rng(12)
    gaps = rng.gamma(0.5, 1 / (4.0 * 0.5), n - 1)  # 4 req/s, burstier than Poisson
    t = np.concatenate(([0.0], np.cumsum(gaps)))
    p, a = lengths(rng, n)
    p = p * 12  # tokens: prompts of a few hundred to a few thousand
    with (HERE / "mooncake.jsonl").open("w") as fh:
        next_id = 1000
        for i in range(n):
            blocks = -(-int(p[i]) // 512)
            system = [int(rng.integers(0, 4))]  # one of four shared system prompts (one block)
            doc = [100 + 10 * int(rng.integers(0, 3)) + k for k in range(min(2, blocks - 1))] if i % 2 else []
            own = list(range(next_id, next_id + max(blocks - 1 - len(doc), 0)))
            next_id += len(own)
            ids = (system + doc + own)[:blocks]
            fh.write(
                json.dumps(
                    {
                        "timestamp": int(t[i] * 1000),
                        "input_length": int(p[i]),
                        "output_length": int(a[i]),
                        "hash_ids": ids,
                    }
                )
                + "\n"
            )
    start = dt.datetime(2023, 11, 16, 18, 15, 46)
    with (HERE / "azure.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for ti, pi, ai in zip(t, p, a):
            w.writerow(
                [(start + dt.timedelta(seconds=float(ti))).strftime("%Y-%m-%d %H:%M:%S.%f") + "0", int(pi), int(ai)]
            )
    with (HERE / "burstgpt.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])
        for ti, pi, ai in zip(t, p, a):
            w.writerow([round(float(ti) + 5.0, 3), "ChatGPT", int(pi), int(ai), int(pi + ai), "Conversation log"])


def tokenizer() -> None:
    """A word-level tokenizer.json over loadgen's word list: one token per prompt word, like
    the reference server counts. A stand-in to try --tokenizer with; for a real server use
    its model's own tokenizer.json."""
    try:
        import tokenizers
    except ImportError:
        print("tokenizers is not installed: no tokenizer.json (pip install tokenizers)")
        return
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(str(HERE / "tokenizer.json"))


def fitted() -> None:
    """burstgpt-fit.toml: what `loadgen workload fit burstgpt.csv` writes."""
    from loadgen.workload.fit import fit_workload

    fit = fit_workload(str((HERE / "burstgpt.csv").relative_to(HERE.parents[1])), "burstgpt-fit", bins=16)
    (HERE / "burstgpt-fit.toml").write_text(fit.to_toml())


def vision() -> None:
    """A ShareGPT-4V-style dataset: three entries naming small PNGs under images/ (a few
    hundred bytes each, written by loadgen's own PNG writer)."""
    from loadgen.workload.images import png

    rng = np.random.default_rng(25)
    (HERE / "images").mkdir(exist_ok=True)
    entries = []
    for i, (w, h) in enumerate([(12, 8), (10, 10), (8, 14)]):
        name = f"images/shape{i}.png"
        (HERE / name).write_bytes(png(w, h, rng))
        entries.append(
            {
                "id": f"vision-{i}",
                "image": name,
                "conversations": [
                    {"from": "human", "value": "<image>\n" + text(rng, 12) + "?"},
                    {"from": "gpt", "value": text(rng, 20) + "."},
                ],
            }
        )
    (HERE / "sharegpt4v.json").write_text(json.dumps(entries, indent=1) + "\n")


if __name__ == "__main__":
    import os
    import sys

    os.chdir(HERE.parents[1])
    sys.path.insert(0, str(HERE.parents[1]))
    datasets()
    traces()
    tokenizer()
    fitted()
    vision()
    print(
        "wrote",
        ", ".join(
            sorted(f.name for f in HERE.iterdir() if f.suffix in (".json", ".jsonl", ".csv", ".parquet", ".toml"))
        ),
    )
