"""Multi-turn and reasoning entries of a level summary: ``by_turn``, ``sessions``, ``reasoning``.

- ``by_turn[t]`` (multi-turn levels): the requests of turn ``t`` of their session (all
  measured ones counted), TTFT, ITL, E2E and prompt tokens of the ok ones. Comparing turn
  1 with later turns shows what a prefix cache saves on the resent history.
- ``sessions``: sessions with a measured turn, those whose last turn finished ok, and ok
  turns per session.
- ``reasoning`` (levels whose answers streamed reasoning): time to the first answer token
  (``ttfa_ms``, from the send) over every ok request, and reasoning and answer tokens
  per ok request; ``requests`` counts the ok requests that streamed any reasoning.
- ``images`` (levels whose requests sent images): over the ok requests that sent any,
  images and bytes per request, and the mean prompt tokens the server reported (its
  ``usage``, image tokens included) beside the mean text tokens loadgen aimed at.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen.metrics.per_request import EventArrays
from loadgen.metrics.results import Images, Reasoning, Sessions, TurnSummary
from loadgen.metrics.stats import distribution
from loadgen.records import RequestRecord

__all__ = ["by_turn", "images_of", "reasoning_of", "sessions_of"]

Bools = npt.NDArray[np.bool_]


def by_turn(
    frame: pd.DataFrame, ev: EventArrays, ok: Bools, itl: npt.NDArray[np.float64], prompt: npt.NDArray[np.float64]
) -> dict[str, TurnSummary] | None:
    """Per turn index; None without multi-turn requests. ``itl`` are the level's ITL
    samples (``ev.itl_ms(ok)``), ``prompt`` its prompt tokens per row."""
    turn = frame["turn"].to_numpy(dtype=np.int64)
    if not (turn > 0).any():
        return None
    itl_turn = ev.like_itl(np.repeat(turn.astype(np.int32), ev.n_chunks), ok)
    out: dict[str, TurnSummary] = {}
    for t in np.unique(turn[turn > 0]).tolist():
        rows = turn == t
        sel = frame[rows & ok]
        out[str(t)] = TurnSummary(
            requests=int(rows.sum()),
            ttft_ms=distribution(sel["ttft_ms"].to_numpy()),
            itl_ms=distribution(itl[itl_turn == t]),
            e2e_ms=distribution(sel["e2e_ms"].to_numpy()),
            prompt_tokens=distribution(prompt[rows & ok]),
        )
    return out


def sessions_of(frame: pd.DataFrame, ok: Bools, turns: npt.NDArray[np.int64]) -> Sessions | None:
    """Session counts; None without multi-turn requests. ``turns``: each row's session length."""
    session = frame["session"].to_numpy(dtype=np.int64)
    mine = session >= 0
    if not mine.any():
        return None
    ids = np.unique(session[mine])
    ok_turns = pd.Series(ok[mine]).groupby(session[mine]).sum().reindex(ids, fill_value=0)
    last = mine & ok & (frame["turn"].to_numpy(dtype=np.int64) == turns)
    return Sessions(
        sessions=int(ids.size),
        completed=int(np.unique(session[last]).size),
        turns_per_session=distribution(ok_turns.to_numpy(dtype=np.float64)),
    )


def images_of(measured: Sequence[RequestRecord]) -> Images | None:
    """The images entry of a level's measured records; None when no ok request sent one."""
    sent = [r for r in measured if r.ok and r.images > 0]
    if not sent:
        return None
    reported = [r.prompt_tokens for r in sent if r.prompt_tokens is not None]
    return Images(
        requests=len(sent),
        images_per_request=sum(r.images for r in sent) / len(sent),
        bytes_per_request=sum(r.image_bytes for r in sent) / len(sent),
        prompt_tokens_reported=sum(reported) / len(reported) if reported else None,
        prompt_tokens_text=sum(r.target_prompt_tokens for r in sent) / len(sent),
    )


def reasoning_of(okf: pd.DataFrame) -> Reasoning | None:
    """The reasoning entry of the ok rows ``okf``; None when none streamed reasoning."""
    reasoning = okf["reasoning_tokens"].to_numpy(dtype=np.float64)
    if not (reasoning > 0).any():
        return None
    return Reasoning(
        requests=int((reasoning > 0).sum()),
        time_to_first_answer_ms=distribution(okf["ttfa_ms"].to_numpy()),
        reasoning_tokens=distribution(reasoning),
        answer_tokens=distribution(okf["output_tokens"].to_numpy(dtype=np.float64) - reasoning),
    )
