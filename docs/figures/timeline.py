"""Draws docs/figures/request-timeline.svg: one request's timeline and what each metric spans.

Run ``python3 docs/figures/timeline.py`` after changing it; ``tests/test_docs.py`` fails
when the committed SVG differs from what this script writes. Plain SVG text, no
dependencies, so the figure is the same on every machine.
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).with_name("request-timeline.svg")

WIDTH, HEIGHT = 900, 300
AXIS_Y = 120
X0, X1 = 40, 860  # time axis ends

# the request, in ms from its scheduled time: (label, t)
SCHEDULED, SENT, FIRST, DONE = 0.0, 100.0, 230.0, 600.0
CHUNKS = [(230.0, 1), (280.0, 1), (330.0, 2), (395.0, 1), (450.0, 1), (505.0, 1), (560.0, 3), (600.0, 1)]
T_MAX = 640.0


def x(t: float) -> float:
    return X0 + (X1 - X0) * t / T_MAX


def text(
    px: float, py: float, s: str, *, anchor: str = "middle", size: int = 13, weight: str = "normal", fill: str = "#222"
) -> str:
    return (
        f'<text x="{px:.1f}" y="{py:.1f}" text-anchor="{anchor}" font-size="{size}" '
        f'font-weight="{weight}" fill="{fill}">{s}</text>'
    )


def span(t0: float, t1: float, y: float, label: str, colour: str) -> list[str]:
    """A bracket from t0 to t1 at height y with its label above it."""
    a, b = x(t0), x(t1)
    return [
        f'<line x1="{a:.1f}" y1="{y}" x2="{b:.1f}" y2="{y}" stroke="{colour}" stroke-width="2"/>',
        f'<line x1="{a:.1f}" y1="{y - 5}" x2="{a:.1f}" y2="{y + 5}" stroke="{colour}" stroke-width="2"/>',
        f'<line x1="{b:.1f}" y1="{y - 5}" x2="{b:.1f}" y2="{y + 5}" stroke="{colour}" stroke-width="2"/>',
        text((a + b) / 2, y - 7, label, size=12, fill=colour),
    ]


def svg() -> str:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Helvetica, Arial, sans-serif">',
        '<rect width="100%" height="100%" fill="white"/>',
        text(WIDTH / 2, 24, "One streamed request, as loadgen times it", size=15, weight="bold"),
        f'<line x1="{X0}" y1="{AXIS_Y}" x2="{X1}" y2="{AXIS_Y}" stroke="#444" stroke-width="1.5"/>',
    ]
    for label, t in (("scheduled", SCHEDULED), ("sent", SENT), ("first token", FIRST), ("done", DONE)):
        parts.append(
            f'<line x1="{x(t):.1f}" y1="{AXIS_Y - 40}" x2="{x(t):.1f}" y2="{AXIS_Y + 8}" '
            f'stroke="#444" stroke-dasharray="3,3"/>'
        )
        parts.append(text(x(t), AXIS_Y - 46, label, weight="bold", anchor="start" if t == SCHEDULED else "middle"))
    for t, n in CHUNKS:  # output-carrying chunks: a bar as tall as its token count
        h = 12 * n
        parts.append(f'<rect x="{x(t) - 3:.1f}" y="{AXIS_Y - h}" width="6" height="{h}" fill="#1f77b4"/>')
        if n > 2:
            parts.append(text(x(t), AXIS_Y - h - 4, f"{n} tokens", size=10, fill="#1f77b4"))
    y = AXIS_Y + 32
    parts += span(SENT, FIRST, y, "TTFT", "#d62728")
    parts += span(SCHEDULED, FIRST, y + 30, "TTFT (queued): from the scheduled send", "#ff7f0e")
    parts += span(SENT, DONE, y + 60, "E2E latency", "#2ca02c")
    parts += span(FIRST, DONE, y + 90, "TPOT = this span / (output tokens - 1)", "#9467bd")
    g0, g1 = CHUNKS[1][0], CHUNKS[2][0]
    parts += span(g0, g1, AXIS_Y - 62, "gap g before a 2-token chunk: ITL samples g/2, g/2", "#17becf")
    parts.append(
        text(
            X0,
            HEIGHT - 8,
            "Bars: output-carrying chunks (events read at once are one chunk); "
            "height = tokens. ms on the axis are illustrative.",
            anchor="start",
            size=11,
            fill="#555",
        )
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    OUT.write_text(svg())
    print(OUT)
