"""The dashboard page: one HTML document that draws the feed's snapshot, then extends its
figures with each point pushed over Server-Sent Events.

plotly.js is the report's own bundle, embedded (nothing from a CDN; works offline), and the
figure layouts come from the report's style helpers. A Content-Security-Policy allows only
the bundle and the page's one script (by hash) and network access to this origin alone.
Feed text (model names, URLs, error kinds) is untrusted: the script inserts it with
``textContent`` only, and plotly gets it escaped.
"""

from __future__ import annotations

import functools
from typing import Any

from loadgen import __version__
from loadgen.report.figures import base_layout
from loadgen.report.page import PAGE_CSS, esc, plotly_hash, plotly_js, script_hash, script_json
from loadgen.report.plotdata import palette

__all__ = ["FIGURES", "WAITS", "page_csp", "render_page"]

MAX_POINTS = 3600  # points a live trace keeps (the feed's series keep as many)

_T_AXIS = {
    "title": {"text": "time since the run started (s)"},
    "rangemode": "tozero",
    "autorangeoptions": {"minallowed": 0},  # a bar at t=0 does not pull the axis below 0
}


def _fig(
    fig_id: str,
    title: str,
    traces: list[tuple[str, str, str]],
    y_title: str,
    wait: str,
    *,
    zero_waits: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A live figure; ``wait``: what it says while none of its values is there (with
    ``zero_waits``, while every value is 0: a rate before anything finished)."""
    layout = base_layout(
        title={"text": title, "x": 0, "font": {"size": 14}},
        xaxis=dict(_T_AXIS),
        yaxis={"title": {"text": y_title}, "rangemode": "tozero"},
        margin={"l": 60, "r": 50, "t": 40, "b": 80},
        height=300,
        uirevision="keep",
        **extra,
    )
    return {
        "id": fig_id,
        "layout": layout,
        "wait": wait,
        "zero_waits": zero_waits,
        "traces": [{"key": k, "name": n, "color": c, "yaxis": "y2" if k == "req_s" else "y"} for k, n, c in traces],
    }


def _figures() -> list[dict[str, Any]]:
    c = palette(8)
    right = {"title": {"text": "req/s"}, "overlaying": "y", "side": "right", "rangemode": "tozero"}
    return [
        _fig(
            "fig-ttft",
            "TTFT over the last seconds",
            [("ttft_p50", "p50", "#0072B2"), ("ttft_p90", "p90", "#E69F00"), ("ttft_p99", "p99", "#D55E00")],
            "TTFT (ms)",
            "no request has finished yet",
        ),
        _fig(
            "fig-itl",
            "ITL",
            [("itl_p50", "p50", "#0072B2"), ("itl_p99", "p99", "#D55E00")],
            "ITL (ms)",
            "no request with two or more chunks has finished yet",
        ),
        _fig(
            "fig-tput",
            "Throughput",
            [("out_tok_s", "output tok/s", "#009E73"), ("req_s", "req/s", "#CC79A7")],
            "output tokens/s",
            "no request has finished yet",
            zero_waits=True,
            yaxis2=right,
        ),
        _fig(
            "fig-flight",
            "In flight and server queue",
            [
                ("in_flight", "client in flight", c[0]),
                ("running", "server running", c[1]),
                ("waiting", "server waiting", c[2]),
            ],
            "requests",
            "no count of requests in flight yet",
        ),
        _fig(
            "fig-lag",
            "Client event-loop lag",
            [("loop_lag_ms", "loop lag", "#6b7280")],
            "lag (ms)",
            "no lag measured yet",
        ),
        _fig(
            "fig-server",
            "Server: KV cache, prefix hits, GPU",
            [
                ("kv_usage", "KV cache use", c[3]),
                ("prefix_hit_rate", "prefix hit rate", c[4]),
                ("gpu_util", "GPU util", c[5]),
            ],
            "fraction",
            "no server sample yet",
        ),
    ]


FIGURES: list[dict[str, Any]] = _figures()

_OTHER_LAYOUTS = {
    "fig-errors": base_layout(
        title={"text": "Failures by kind (per tick)", "x": 0, "font": {"size": 14}},
        xaxis=dict(_T_AXIS),
        yaxis={"title": {"text": "failed requests"}, "rangemode": "tozero"},
        barmode="stack",
        margin={"l": 60, "r": 50, "t": 40, "b": 80},
        height=300,
        uirevision="keep",
    ),
    "fig-sweep-ttft": base_layout(
        title={"text": "TTFT vs load (finished levels)", "x": 0, "font": {"size": 14}},
        yaxis={"title": {"text": "TTFT (ms)"}, "rangemode": "tozero"},
        margin={"l": 60, "r": 50, "t": 40, "b": 80},
        height=320,
    ),
    "fig-sweep-tput": base_layout(
        title={"text": "Throughput vs load (finished levels)", "x": 0, "font": {"size": 14}},
        yaxis={"title": {"text": "output tokens/s"}, "rangemode": "tozero"},
        margin={"l": 60, "r": 50, "t": 40, "b": 80},
        height=320,
    ),
}

WAITS = {  # what an empty panel says it waits for (a live figure's own: its "wait")
    "first": "waiting for the first point (one a second)",
    "no_failure_yet": "no failures yet",
    "no_failure": "no request failed",
    "no_level_yet": "no level finished yet",
    "no_level": "no level finished",
}

_EXTRA_CSS = """
.badge{display:inline-block;border-radius:999px;padding:2px 10px;font-size:.8em;font-weight:600;
 margin-left:10px;vertical-align:middle;background:#374151;color:#f9fafb}
.badge.running{background:#2563eb}.badge.finished{background:#059669}.badge.interrupted{background:#d97706}
.badge.failed{background:#b91c1c}
.bar{height:8px;background:#e5e7eb;border-radius:4px;overflow:hidden;margin:4px 0 2px 0;min-width:200px}
.bar>div{height:100%;background:#2563eb;width:0}
.controls button{font:inherit;padding:6px 16px;margin-right:8px;border-radius:6px;border:1px solid #9ca3af;
 background:#fff;cursor:pointer}
.controls button.stop{border-color:#b91c1c;color:#b91c1c}
.controls button:disabled{opacity:.5;cursor:default}
.figs{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:12px}
.figs>div{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:6px}
.figs>div.hidden{display:none}
#lg-conn{color:#9ca3af;font-size:.85em;margin-left:10px}
"""

_JS = r"""(function(){"use strict";
var cfg=JSON.parse(document.getElementById('lg-config').textContent);
var token=new URLSearchParams(location.search).get('token');
var q=token?('?token='+encodeURIComponent(token)):'';
var pc={displaylogo:false,responsive:true};
var levels=[],errT=[],errK={},serverShown=false,lastState='',filled={},waiting={},blanks={};
function ended(){return lastState==='finished'||lastState==='interrupted'||lastState==='failed';}
function blank(id,layout,text){var key=id+'\n'+text;if(blanks[key])return blanks[key];
 var l=JSON.parse(JSON.stringify(layout));['xaxis','yaxis','yaxis2'].forEach(function(a){
  if(a!=='yaxis2'||l[a]){l[a]=l[a]||{};l[a].visible=false;}});
 l.showlegend=false;l.annotations=[{text:text,xref:'paper',yref:'paper',x:0.5,y:0.5,showarrow:false,
  font:{size:15,color:'#6b7280'}}];blanks[key]=l;return l;}
function hasData(f,ys){for(var i=0;i<ys.length;i++){for(var j=0;j<ys[i].length;j++){var v=ys[i][j];
 if(typeof v==='number'&&isFinite(v)&&(!f.zero_waits||v!==0))return true;}}return false;}
function drawLive(f,data,n){var d=$(f.id);if(filled[f.id]){waiting[f.id]='';Plotly.react(d,data,f.layout,pc);return;}
 var text=n?f.wait:cfg.waits.first;if(data===d.data&&waiting[f.id]===text)return;waiting[f.id]=text;
 Plotly.react(d,data,blank(f.id,f.layout,text),pc);}
function $(id){return document.getElementById(id);}
function num(v){if(typeof v!=='number'||!isFinite(v))return '–';if(v===0)return '0';
 var r=Number(v.toPrecision(3));if(Math.abs(r)>=1000)return Math.round(v).toLocaleString('en-US');
 var t=r.toFixed(Math.max(0,2-Math.floor(Math.log10(Math.abs(r)))));
 if(t.indexOf('.')>=0)t=t.replace(/0+$/,'').replace(/[.]$/,'');return t==='-0'?'0':t;}
function put(id,v){var e=$(id);if(e)e.textContent=(v===null||v===undefined||v==='')?'–':String(v);}
function bar(id,p){var e=$(id);if(e)e.style.width=(typeof p==='number'?Math.max(0,Math.min(1,p))*100:0)+'%';}
function series(f,s){return f.traces.map(function(tr){return {type:'scatter',mode:'lines',x:(s.t||[]).slice(),
 y:(s[tr.key]||[]).slice(),name:tr.name,meta:tr.key,yaxis:tr.yaxis,connectgaps:false,line:{color:tr.color,width:2}};});}
function hasServer(vals){for(var i=0;i<vals.length;i++){if(vals[i]!==null&&vals[i]!==undefined)return true;}return false;}
function showServer(){if(serverShown)return;serverShown=true;var d=$('fig-server');d.parentNode.classList.remove('hidden');
 Plotly.Plots.resize(d);}
function drawErrors(){var kinds=Object.keys(errK).sort(),d=$('fig-errors'),l=cfg.layouts['fig-errors'];
 if(!kinds.length){var text=!errT.length?cfg.waits.first:(ended()?cfg.waits.no_failure:cfg.waits.no_failure_yet);
  if(waiting['fig-errors']!==text){waiting['fig-errors']=text;Plotly.react(d,[],blank('fig-errors',l,text),pc);}return;}
 waiting['fig-errors']='';var tr=kinds.map(function(k,i){return {type:'bar',x:errT.slice(),
 y:errK[k].slice(),name:k,meta:'errors.'+k,marker:{color:cfg.colours[i%cfg.colours.length]}};});
 Plotly.react(d,tr,l,pc);}
function addErrors(t,e){errT.push(t);var n=errT.length;e=e||{};Object.keys(e).forEach(function(k){
 if(!errK[k]){errK[k]=[];for(var i=0;i<n-1;i++)errK[k].push(0);}});
 Object.keys(errK).forEach(function(k){errK[k].push(e[k]||0);});
 if(n>cfg.max_points){errT.shift();Object.keys(errK).forEach(function(k){errK[k].shift();});}}
function loadAxis(mode,x){var a={title:{text:mode==='concurrency'?'concurrency (users)':
 (mode==='rate'?'offered rate (req/s)':'load')},gridcolor:'#eeeeee',zerolinecolor:'#cccccc',rangemode:'tozero'};
 var pos=x.filter(function(v){return typeof v==='number'&&v>0;});
 if(pos.length===x.length&&pos.length>=3&&Math.max.apply(null,pos)/Math.min.apply(null,pos)>=8){a.type='log';delete a.rangemode;}
 if(pos.length&&pos.length<=12){a.tickvals=pos;a.ticktext=pos.map(function(v){return String(Number(v.toPrecision(4)));});}
 return a;}
function drawSweeps(){var ls=levels.slice().sort(function(a,b){return a.x-b.x;});var x=ls.map(function(l){return l.x;});
 if(!ls.length){var text=ended()?cfg.waits.no_level:cfg.waits.no_level_yet;['fig-sweep-ttft','fig-sweep-tput'].forEach(
  function(id){Plotly.react($(id),[],blank(id,cfg.layouts[id],text),pc);});return;}
 function g(k){return ls.map(function(l){return (typeof l[k]==='number')?l[k]:null;});}
 function eb(vk,k){var v=g(vk),lo=g(k+'_lo'),hi=g(k+'_hi');return {type:'data',symmetric:false,
  array:v.map(function(y,i){return (y!==null&&hi[i]!==null)?hi[i]-y:NaN;}),
  arrayminus:v.map(function(y,i){return (y!==null&&lo[i]!==null)?y-lo[i]:NaN;}),thickness:1.5,width:4};}
 var xt=loadAxis(ls[0].mode,x);var text=ls.map(function(l){return l.label;});
 var lt=JSON.parse(JSON.stringify(cfg.layouts['fig-sweep-ttft']));lt.xaxis=xt;
 var lp=JSON.parse(JSON.stringify(cfg.layouts['fig-sweep-tput']));lp.xaxis=xt;
 Plotly.react($('fig-sweep-ttft'),[{type:'scatter',mode:'lines+markers',x:x,y:g('ttft_p50_ms'),name:'TTFT p50',
  meta:'sweep.ttft_p50',text:text,line:{color:'#0072B2'}},{type:'scatter',mode:'lines+markers',x:x,y:g('ttft_p99_ms'),
  name:'TTFT p99',meta:'sweep.ttft_p99',text:text,error_y:eb('ttft_p99_ms','ttft_p99'),line:{color:'#D55E00'}}],lt,pc);
 var last=levels[levels.length-1];if(last){put('lg-verdict',(last.client_verdict||'–')+' (level '+(last.index+1)+')');
  put('lg-verdict-why',(last.client_reasons||[]).join('; '));}
 var ot=eb('out_tok_s','out_tok_s');Plotly.react($('fig-sweep-tput'),[{type:'scatter',mode:'lines+markers',x:x,
  y:g('out_tok_s'),name:'output tok/s',meta:'sweep.out_tok_s',text:text,error_y:ot,line:{color:'#009E73'}}],lp,pc);}
function status(m){var r=m.run||{},lv=m.level,tot=m.totals||{};put('lg-title',r.title||'loadgen');
 if(r.title)document.title=r.title+' · loadgen live';
 put('lg-meta',[r.api,r.model,r.url,r.out].filter(function(s){return s;}).join(' · '));
 var b=$('lg-state');b.textContent=r.state||'';b.className='badge '+(r.state||'');
 if(lv){var h=lv.heading||('level '+(lv.index+1));if(typeof lv.duration_s==='number')h+=' · '+num(lv.elapsed_s)+' s of '+num(lv.duration_s)+' s';
  else if(typeof lv.requests==='number')h+=' · '+lv.done+' of '+lv.requests+' requests';else h+=' · '+num(lv.elapsed_s)+' s';
  put('lg-heading',h);put('lg-target',lv.target);put('lg-done',lv.done);put('lg-failed',lv.failed);put('lg-warm',lv.warm);
  put('lg-inflight',lv.in_flight);put('lg-left',typeof lv.left_s==='number'?num(lv.left_s)+' s left':'');bar('lg-lbar',lv.progress);}
 else{put('lg-heading',r.state==='starting'?'starting…':'between levels');bar('lg-lbar',0);}
 bar('lg-rbar',m.progress);put('lg-rprog',typeof m.progress==='number'?Math.round(m.progress*100)+'% of the run':'');
 put('lg-tdone',tot.done);put('lg-tfailed',typeof tot.failed==='number'?tot.failed+' failed':'');
 var c=r.controls||{},live=(r.state==='running'||r.state==='starting');
 $('lg-stop').hidden=!(c.stop&&live);$('lg-skip').hidden=!(c.skip&&live);
 var over=!!r.state&&!live;$('lg-banner').hidden=!over;
 if(over&&r.state!==lastState){put('lg-banner-text','run '+r.state);}
 var a=$('lg-report');a.hidden=!(over&&r.report);if(r.report){a.href='/report'+q;}
 var was=lastState;lastState=r.state;if(over&&was!==lastState){drawErrors();drawSweeps();}}
function onSnapshot(e){var s=JSON.parse(e.data),ser=s.series||{};
 var n=(ser.t||[]).length;cfg.figures.forEach(function(f){var data=series(f,ser);
  filled[f.id]=hasData(f,data.map(function(tr){return tr.y;}));drawLive(f,data,n);});
 if(hasServer([].concat(ser.running||[],ser.waiting||[],ser.kv_usage||[],ser.prefix_hit_rate||[],ser.gpu_util||[])))showServer();
 errT=[];errK={};var t=ser.t||[],er=ser.errors||[];for(var i=0;i<t.length;i++)addErrors(t[i],er[i]);drawErrors();
 levels=(s.levels||[]).slice();drawSweeps();status(s);put('lg-conn','live');}
function onPoint(e){var m=JSON.parse(e.data),p=m.point;
 if(!p){if(m.levels&&m.levels.length){levels=levels.concat(m.levels);drawSweeps();}status(m);return;}
 cfg.figures.forEach(function(f){var ix=f.traces.map(function(_,i){return i;});
  Plotly.extendTraces($(f.id),{x:f.traces.map(function(){return [p.t];}),y:f.traces.map(function(tr){
   var v=p[tr.key];return [v===undefined?null:v];})},ix,cfg.max_points);
  if(!filled[f.id]){filled[f.id]=hasData(f,f.traces.map(function(tr){return [p[tr.key]];}));
   drawLive(f,$(f.id).data,1);}});
 if(hasServer([p.running,p.waiting,p.kv_usage,p.prefix_hit_rate,p.gpu_util]))showServer();
 addErrors(p.t,p.errors);drawErrors();
 if(m.levels&&m.levels.length){levels=levels.concat(m.levels);drawSweeps();}status(m);}
function control(what){var h={};h[cfg.control_header]=cfg.control;if(token)h[cfg.token_header]=token;
 var btn=$('lg-'+what);btn.disabled=true;
 fetch('/'+what+q,{method:'POST',headers:h,cache:'no-store'}).then(function(r){return r.json();})
 .then(function(j){put('lg-answer',j.why);}).catch(function(err){put('lg-answer','no answer: '+err);})
 .then(function(){btn.disabled=false;});}
$('lg-stop').addEventListener('click',function(){control('stop');});
$('lg-skip').addEventListener('click',function(){control('skip');});
var es=new EventSource('/events'+q);
es.addEventListener('snapshot',onSnapshot);es.addEventListener('point',onPoint);
es.addEventListener('end',function(){es.close();put('lg-conn','dashboard closed');});
es.onerror=function(){if(es.readyState!==2)put('lg-conn','reconnecting…');};
})();"""


@functools.lru_cache(maxsize=1)
def page_csp() -> str:
    """The page's Content-Security-Policy (also sent as a header by the server)."""
    return (
        "default-src 'none'; "
        f"script-src {plotly_hash()} {script_hash(_JS)}; "
        "connect-src 'self'; style-src 'unsafe-inline'; img-src data: blob:; font-src data:; "
        "base-uri 'none'; form-action 'none'"
    )


def _card(key: str, el_id: str, sub: str = "") -> str:
    s = f'<div class="s" id="{sub}"></div>' if sub else ""
    return f'<div class="card"><div class="k">{esc(key)}</div><div class="v" id="{el_id}">–</div>{s}</div>'


def render_page(control_token: str, title: str) -> str:
    """The dashboard page; ``control_token`` goes into its config for the Stop/Skip
    requests (the header the server checks); ``title`` is plain text (escaped here)."""
    config = {
        "control": control_token,
        "control_header": "X-Loadgen-Control",
        "token_header": "X-Loadgen-Token",
        "max_points": MAX_POINTS,
        "figures": FIGURES,
        "layouts": _OTHER_LAYOUTS,
        "colours": palette(14),
        "waits": WAITS,
    }
    figs = "".join(
        f'<div{" class=hidden" if f["id"] == "fig-server" else ""}><div id="{f["id"]}" style="height:300px"></div></div>'
        for f in FIGURES
    )
    figs += '<div><div id="fig-errors" style="height:300px"></div></div>'
    sweeps = "".join(
        f'<div><div id="{i}" style="height:320px"></div></div>' for i in ("fig-sweep-ttft", "fig-sweep-tput")
    )
    cards = (
        _card("level", "lg-heading", "lg-target")
        + _card("done", "lg-done", "lg-left")
        + _card("failed", "lg-failed")
        + _card("warm-up", "lg-warm")
        + _card("in flight", "lg-inflight")
        + _card("run: done", "lg-tdone", "lg-tfailed")
        + _card("client health", "lg-verdict", "lg-verdict-why")
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{page_csp()}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="loadgen {esc(__version__)}">'
        f"<title>{esc(title)}</title><style>{PAGE_CSS}{_EXTRA_CSS}</style></head><body>"
        f'<header><h1><span id="lg-title">{esc(title)}</span><span id="lg-state" class="badge">connecting</span>'
        '<span id="lg-conn"></span></h1><div class="meta" id="lg-meta"></div></header><main>'
        '<div id="lg-banner" class="banner ok" hidden><span id="lg-banner-text"></span> '
        '<a id="lg-report" hidden href="#">open the report</a></div>'
        f'<section id="lg-status"><div class="cards">{cards}</div>'
        '<div class="k">level</div><div class="bar"><div id="lg-lbar"></div></div>'
        '<div class="k">run <span id="lg-rprog"></span></div><div class="bar"><div id="lg-rbar"></div></div>'
        '<div class="controls"><button id="lg-stop" class="stop" hidden>Stop</button>'
        '<button id="lg-skip" hidden>Skip level</button> <span id="lg-answer" class="note"></span></div></section>'
        f'<div class="figs">{figs}</div><section id="lg-sweeps"><h2>Finished levels</h2><div class="figs">{sweeps}</div>'
        "</section>"
        f'<script type="application/json" id="lg-config">{script_json(config)}</script>'
        f'<p class="note">loadgen {esc(__version__)} live dashboard; this page loads nothing from the network '
        "but its own server.</p></main>"
        f"<script>{plotly_js()}</script><script>{_JS}</script></body></html>\n"
    )
