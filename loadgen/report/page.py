"""The self-contained HTML page shared by the run report and the comparison.

One file: plotly.js embedded once, each figure's JSON in a ``<script
type="application/json">`` block next to its ``<div class="lg-plot">``, and one small
script that draws them all with ``Plotly.newPlot``. A Content-Security-Policy allows
only those two scripts (by hash) and no network access at all, so the page makes no
request when opened, and text that slipped through escaping could not run anyway.

Escaping: every piece of user text goes through :func:`esc` (HTML) before it reaches
the page or a figure's text (plotly renders a few HTML tags in its strings, and decodes
entities, so escaped text shows as typed); figure JSON goes through
:func:`script_json`, which escapes ``<``, ``>`` and ``&`` so no ``</script>`` can end the
block early.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import html
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen import __version__
from loadgen.errors import ConfigError
from loadgen.numfmt import fmt

__all__ = [
    "FIGURE_CLASS",
    "PAGE_CSS",
    "Page",
    "esc",
    "fmt",
    "plotly_hash",
    "plotly_js",
    "script_hash",
    "script_json",
    "write_page",
]

FIGURE_CLASS = "lg-plot"

_INIT_JS = (
    "(function(){var c={displaylogo:false,responsive:true};"
    f"var d=document.querySelectorAll('div.{FIGURE_CLASS}');"
    "for(var i=0;i<d.length;i++){try{var s=JSON.parse(document.getElementById(d[i].id+'-data').textContent);"
    "Plotly.newPlot(d[i],s.data,s.layout,c);}catch(e){console.error('figure '+d[i].id+': '+e);}}})();"
)

PAGE_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;
 color:#1b1f24;background:#fafafa;line-height:1.45}
header{background:#1f2937;color:#f9fafb;padding:18px 28px}
header h1{margin:0 0 4px 0;font-size:1.5em}
header .meta{color:#d1d5db;font-size:.92em}
nav{background:#fff;border-bottom:1px solid #e5e7eb;padding:6px 28px;position:sticky;top:0;z-index:5;
 font-size:.9em}
nav a{margin-right:14px;color:#2563eb;text-decoration:none}
main{padding:8px 28px 40px 28px;max-width:1500px}
section{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:14px 18px;margin:16px 0}
section h2{margin:0 0 8px 0;font-size:1.2em}
p.note{color:#4b5563;font-size:.9em;margin:4px 0 8px 0}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0}
.card{border:1px solid #e5e7eb;border-radius:8px;padding:10px 14px;min-width:200px;background:#f9fafb}
.card .k{font-size:.8em;color:#6b7280;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:1.35em;font-weight:600}
.card .s{font-size:.85em;color:#4b5563}
.banner{border-radius:8px;padding:10px 14px;margin:10px 0;font-weight:500}
.banner.warn{background:#fef3c7;border:1px solid #f59e0b;color:#78350f}
.banner.ok{background:#ecfdf5;border:1px solid #10b981;color:#065f46}
table{border-collapse:collapse;font-size:.88em;margin:6px 0}
th,td{border-bottom:1px solid #e5e7eb;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#f3f4f6}
td.l,th.l{text-align:left}
.scroll{overflow-x:auto}
.table-box{overflow:auto;max-height:80vh;border:1px solid #e5e7eb}
.table-box table{margin:0}
.table-box thead th{position:sticky;top:0;z-index:2}
.table-box .k{position:sticky;z-index:1;background:#fff;white-space:normal;overflow-wrap:anywhere;
 box-sizing:border-box}
.table-box th.k{background:#f3f4f6;z-index:3}
.table-box .k0{left:0;width:96px;min-width:96px;max-width:96px}
.table-box .k1{left:96px;width:190px;min-width:190px;max-width:190px}
.table-box .k2{left:286px;width:64px;min-width:64px;max-width:64px;box-shadow:inset -2px 0 0 #9ca3af}
.better{color:#047857;font-weight:600}.worse{color:#b91c1c;font-weight:600}.same{color:#6b7280}
.unsure{color:#92400e;font-weight:600}
.bad{color:#b91c1c;font-weight:600}.good{color:#047857}
dl.kv{display:grid;grid-template-columns:max-content auto;gap:2px 14px;margin:6px 0;font-size:.9em}
dl.kv dt{color:#6b7280}dl.kv dd{margin:0;overflow-wrap:anywhere}
code{background:#f3f4f6;padding:1px 4px;border-radius:4px;font-size:.9em}
.lg-plot{width:100%}
"""


def esc(text: Any) -> str:
    """HTML-escaped text (quotes too); None becomes an empty string."""
    return "" if text is None else html.escape(str(text), quote=True)


def script_json(obj: Any) -> str:
    """Compact JSON that is safe inside a ``<script>`` element."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    """The plotly.js bundle shipped with the plotly package (read once per process)."""
    from plotly.offline import get_plotlyjs  # type: ignore[import-untyped]

    return str(get_plotlyjs())


def script_hash(text: str) -> str:
    """The CSP source that allows one inline script: ``'sha256-…'``."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


@functools.lru_cache(maxsize=1)
def plotly_hash() -> str:
    """The CSP source of the embedded plotly.js bundle."""
    return script_hash(plotly_js())


@dataclass
class Page:
    """A report page being assembled: header, sections (with figures), then rendered."""

    title: str
    subtitle: str = ""
    sections: list[tuple[str, str, str]] = field(default_factory=list)  # (id, title, html)
    n_figures: int = 0

    def figure(self, fig_id: str, fig: dict[str, Any], height: int = 420) -> str:
        """HTML for one figure (a plot div and its JSON); ``fig`` is ``{"data", "layout"}``."""
        if not fig_id.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"figure id {fig_id!r}: letters, digits, '-' and '_' only")
        self.n_figures += 1
        layout = dict(fig.get("layout") or {})
        layout.setdefault("height", height)
        spec = {"data": fig.get("data") or [], "layout": layout}
        return (
            f'<div id="{fig_id}" class="{FIGURE_CLASS}" style="height:{int(layout["height"])}px"></div>'
            f'<script type="application/json" id="{fig_id}-data">{script_json(spec)}</script>'
        )

    def section(self, sec_id: str, title: str, body: str) -> None:
        """Add a section; ``title`` is plain text (escaped here), ``body`` is HTML."""
        self.sections.append((sec_id, title, body))

    def render(self) -> str:
        js = plotly_js()
        csp = (
            "default-src 'none'; "
            f"script-src {plotly_hash()} {script_hash(_INIT_JS)}; "
            "style-src 'unsafe-inline'; img-src data: blob:; font-src data:; connect-src 'none'; "
            "base-uri 'none'; form-action 'none'"
        )
        nav = "".join(f'<a href="#{sid}">{esc(title)}</a>' for sid, title, _ in self.sections)
        body = "".join(
            f'<section id="{sid}"><h2>{esc(title)}</h2>{content}</section>' for sid, title, content in self.sections
        )
        stamp = time.strftime("%Y-%m-%d %H:%M")
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="generator" content="loadgen {esc(__version__)}">'
            f"<title>{esc(self.title)}</title><style>{PAGE_CSS}</style></head><body>"
            f'<header><h1>{esc(self.title)}</h1><div class="meta">{self.subtitle}</div></header>'
            f"<nav>{nav}</nav><main>{body}"
            f'<p class="note">Rendered by loadgen {esc(__version__)} on {esc(stamp)}; '
            "this page is self-contained and loads nothing from the network.</p></main>"
            f"<script>{js}</script><script>{_INIT_JS}</script></body></html>\n"
        )


def write_page(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (a temporary file, then a rename)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.with_name(path.name + ".tmp").unlink()  # a full disk leaves no half-written page
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return path
