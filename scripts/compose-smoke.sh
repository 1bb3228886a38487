#!/usr/bin/env bash
# Compose smoke test: builds the binaries and images, starts the mesh with
# docker-compose.yml (three schedulers, two flash indexers, two frontends), sends two
# turns of one agent session, the first through frontend-0 and the second through
# frontend-1, and checks that the second turn lands on the same worker as a KV-cache hit
# (both frontends send the session to the same scheduler); then that the mesh's mutual
# TLS refuses a plaintext call and calls with certificates of the wrong identity
# (grpcurl, pinned in scripts/tools.sh). Always tears the stack down.
#
# Environment:
#   COMPOSE                   compose command (default: "docker compose" if it works,
#                             else "docker-compose")
#   SWITCHYARD_FRONTEND_PORT, SWITCHYARD_FRONTEND1_PORT
#                             host ports of frontend-0 and frontend-1 (default 8000, 8001)
#   SMOKE_PROJECT             compose project name (default switchyard-smoke)
#   SMOKE_READY_TIMEOUT       seconds to wait for the frontends to answer (default 120)
#   SMOKE_SKIP_BUILD=1        reuse dist/ and the images already built
#   SWITCHYARD_SCHEDULER_PORT, SWITCHYARD_SHIM_PORT
#                             host loopback ports of scheduler-0 and engine-shim-0 gRPC
#                             (default 9100, 9500)
set -euo pipefail

cd "$(dirname "$0")/.."

say() { echo "compose-smoke: $*"; }
fail() {
	echo "compose-smoke: FAIL: $*" >&2
	exit 1
}

if [ -n "${COMPOSE:-}" ]; then
	read -r -a compose <<<"$COMPOSE"
elif docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
	compose=(docker-compose)
else
	fail "neither 'docker compose' nor 'docker-compose' is installed"
fi
compose+=(-p "${SMOKE_PROJECT:-switchyard-smoke}" -f docker-compose.yml)
export SWITCHYARD_FRONTEND_PORT=${SWITCHYARD_FRONTEND_PORT:-8000}
export SWITCHYARD_FRONTEND1_PORT=${SWITCHYARD_FRONTEND1_PORT:-8001}
export SWITCHYARD_SCHEDULER_PORT=${SWITCHYARD_SCHEDULER_PORT:-9100}
export SWITCHYARD_SHIM_PORT=${SWITCHYARD_SHIM_PORT:-9500}
base="http://127.0.0.1:${SWITCHYARD_FRONTEND_PORT}"   # frontend-0
base1="http://127.0.0.1:${SWITCHYARD_FRONTEND1_PORT}" # frontend-1
ready_timeout=${SMOKE_READY_TIMEOUT:-120}
say "using: ${compose[*]}; frontends at $base and $base1"

work=$(mktemp -d)
cleanup() {
	local status=$?
	if [ "$status" -ne 0 ]; then
		say "failed; service status and last log lines:"
		"${compose[@]}" ps || true
		"${compose[@]}" logs --no-color --tail=60 || true
	fi
	say "tearing down"
	"${compose[@]}" down -v --remove-orphans || true
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT

# JSON helpers: jq if installed, else python3. The assistant message of turn 1 is spliced
# back into turn 2 as raw JSON, so no helper ever needs to re-escape text.
if command -v jq >/dev/null 2>&1; then
	json_get() { jq -r "$2 // empty" "$1"; }           # json_get FILE JQ_PATH
	json_raw() { jq -c "$2" "$1"; }                    # json_raw FILE JQ_PATH (compact JSON)
elif command -v python3 >/dev/null 2>&1; then
	py_path() {
		python3 - "$1" "$2" "$3" <<'PY'
import json, re, sys
mode, path, expr = sys.argv[1], sys.argv[2], sys.argv[3]
v = json.load(open(path))
for part in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", expr):
    key, idx = part
    try:
        v = v[int(idx)] if idx else v[key]
    except (KeyError, IndexError, TypeError):
        v = None
        break
if mode == "raw":
    print(json.dumps(v, separators=(",", ":")))
elif v is not None:
    print(v if isinstance(v, str) else json.dumps(v))
PY
	}
	json_get() { py_path get "$1" "$2"; }
	json_raw() { py_path raw "$1" "$2"; }
else
	fail "need jq or python3 to read JSON responses"
fi

[ -x bin/grpcurl ] || scripts/tools.sh

if [ "${SMOKE_SKIP_BUILD:-0}" != 1 ]; then
	say "building binaries (scripts/build.sh)"
	scripts/build.sh
	say "building images"
	"${compose[@]}" build
fi

say "starting the stack"
"${compose[@]}" up -d

deadline=$((SECONDS + ready_timeout))
for b in "$base" "$base1"; do
	say "waiting for $b/healthz"
	until curl -fsS -o /dev/null "$b/healthz" 2>/dev/null; do
		[ "$SECONDS" -lt "$deadline" ] || fail "frontend $b/healthz not OK after ${ready_timeout}s"
		sleep 1
	done
done

# The model name: the first one the frontend lists, else the simulated engine's default.
model=""
if curl -fsS -o "$work/models.json" "$base/v1/models" 2>/dev/null; then
	model=$(json_get "$work/models.json" '.data[0].id' || true)
fi
model=${model:-switchyard-sim}
say "model: $model"

# chat_at BASE FILE_PREFIX SESSION BODY: POST one non-streaming chat completion to the
# frontend at BASE; prints the HTTP status, leaves headers in FILE_PREFIX.headers and the
# body in FILE_PREFIX.json. chat: the same at frontend-0.
chat_at() {
	curl -sS -o "$2.json" -D "$2.headers" -w '%{http_code}' \
		-H 'Content-Type: application/json' -H "x-dynamo-session-id: $3" \
		--max-time 60 -d "$4" "$1/v1/chat/completions" 2>/dev/null || echo 000
}
chat() { chat_at "$base" "$@"; }

probe='{"model":"'"$model"'","messages":[{"role":"user","content":"readiness probe"}],"max_tokens":4}'
for b in "$base" "$base1"; do
	say "waiting until POST $b/v1/chat/completions answers 200"
	code=000
	while :; do
		code=$(chat_at "$b" "$work/probe" "smoke-probe-$$" "$probe")
		[ "$code" = 200 ] && break
		[ "$SECONDS" -lt "$deadline" ] || fail "chat completions at $b still answer $code after ${ready_timeout}s: $(head -c 500 "$work/probe.json" 2>/dev/null)"
		sleep 2
	done
done

session="smoke-$(date +%s)-$$"
# A long first prompt, so that it fills several KV blocks whatever the block size.
long="You are a coding agent working in a Go repository. $(printf 'The scheduler routes each turn of an agent session to the worker whose KV cache already holds most of its prompt. %.0s' $(seq 1 30))Summarise the plan in one line."
user1='{"role":"user","content":"'"$long"'"}'
turn1='{"model":"'"$model"'","messages":['"$user1"'],"max_tokens":16}'

say "turn 1 (session $session, through frontend-0)"
code=$(chat "$work/turn1" "$session" "$turn1")
[ "$code" = 200 ] || fail "turn 1 answered HTTP $code: $(head -c 500 "$work/turn1.json")"
assistant=$(json_raw "$work/turn1.json" '.choices[0].message')
[ -n "$assistant" ] && [ "$assistant" != null ] || fail "turn 1 has no choices[0].message: $(head -c 500 "$work/turn1.json")"

# An agent's next turn follows a tool call, not the previous answer's last byte: leave a
# second for it, as a harness would. (Sent at once, turn 2 once went to a cold worker: the
# worker's last heartbeat, taken while turn 1 ran, still charged it for turn 1's blocks,
# which cancelled the credit of its cache; the router now takes the turns it finished
# since out of that report, pkg/routing TestReportBeforeFinishDoesNotCountIt.)
sleep 1

# Turn 2 extends turn 1: its messages, the assistant's answer, then a new user message.
turn2='{"model":"'"$model"'","messages":['"$user1"','"$assistant"',{"role":"user","content":"Now list the files you would change."}],"max_tokens":16}'
say "turn 2 (same session, prompt extends turn 1, through frontend-1)"
code=$(chat_at "$base1" "$work/turn2" "$session" "$turn2")
[ "$code" = 200 ] || fail "turn 2 answered HTTP $code: $(head -c 500 "$work/turn2.json")"

worker_of() { grep -i '^x-switchyard-worker:' "$1" | tail -n 1 | cut -d: -f2- | tr -d ' \r\n'; }
w1=$(worker_of "$work/turn1.headers")
w2=$(worker_of "$work/turn2.headers")
cached=$(json_get "$work/turn2.json" '.usage.prompt_tokens_details.cached_tokens')
prompt2=$(json_get "$work/turn2.json" '.usage.prompt_tokens')

say "turn 1 worker: ${w1:-<none>}"
say "turn 2 worker: ${w2:-<none>}; prompt_tokens=${prompt2:-?} cached_tokens=${cached:-<none>}"
[ -n "$w1" ] || fail "turn 1 response has no X-Switchyard-Worker header"
[ -n "$w2" ] || fail "turn 2 response has no X-Switchyard-Worker header"
[ "$w1" = "$w2" ] || fail "turn 2 went to $w2, not to turn 1's worker $w1"
case "$cached" in
'' | *[!0-9]*) fail "turn 2 has no integer usage.prompt_tokens_details.cached_tokens: $(head -c 500 "$work/turn2.json")" ;;
esac
[ "$cached" -gt 0 ] || fail "turn 2 was not a cache hit (cached_tokens=$cached)"

# Streaming answers carry the worker header too, and end the way OpenAI clients expect.
say "turn 3 (same session, stream: true, through frontend-0)"
turn3='{"model":"'"$model"'","messages":['"$user1"','"$assistant"',{"role":"user","content":"Stream the answer this time."}],"max_tokens":8,"stream":true}'
code=$(curl -sS -N -o "$work/turn3.sse" -D "$work/turn3.headers" -w '%{http_code}' \
	-H 'Content-Type: application/json' -H "x-dynamo-session-id: $session" \
	--max-time 60 -d "$turn3" "$base/v1/chat/completions" 2>/dev/null || echo 000)
[ "$code" = 200 ] || fail "streaming turn answered HTTP $code: $(head -c 500 "$work/turn3.sse")"
w3=$(worker_of "$work/turn3.headers")
say "turn 3 worker: ${w3:-<none>}; $(grep -c '^data: ' "$work/turn3.sse") SSE events"
[ -n "$w3" ] || fail "streaming response has no X-Switchyard-Worker header"
grep -q '^data: \[DONE\]' "$work/turn3.sse" || fail "stream did not end with data: [DONE]: $(tail -c 300 "$work/turn3.sse")"

# Mutual TLS: the operator certificate from the certs volume, then one call of each kind.
say "copying the mesh certificates out of the certs volume"
certs_container=$(docker ps -aq --filter "label=com.docker.compose.project=${SMOKE_PROJECT:-switchyard-smoke}" \
	--filter label=com.docker.compose.service=certs | head -n 1)
[ -n "$certs_container" ] || fail "no certs container"
docker cp "$certs_container:/certs" "$work/certs" >/dev/null
sched="127.0.0.1:$SWITCHYARD_SCHEDULER_PORT"
shim="127.0.0.1:$SWITCHYARD_SHIM_PORT"
# as NAME ADDR METHOD JSON: one grpcurl call with NAME's certificate; prints its output.
as() {
	bin/grpcurl -cacert "$work/certs/ca.crt" -cert "$work/certs/$1.crt" -key "$work/certs/$1.key" \
		-max-time 10 -d "$4" "$2" "$3" 2>&1
}
expect_denied() { # expect_denied WHAT OUTPUT
	grep -q 'PermissionDenied' <<<"$2" || fail "$1 was not refused with PermissionDenied: $2"
	say "refused as it should be: $1"
}
out=$(bin/grpcurl -plaintext -max-time 10 "$sched" list 2>&1) && fail "a plaintext call to the scheduler answered: $out"
say "refused as it should be: a plaintext call to the scheduler"
out=$(as admin "$sched" switchyard.scheduler.v1.SchedulerService/ListWorkers '{}') ||
	fail "the operator certificate could not list workers: $out"
workers=$(grep -c '"workerId"' <<<"$out" || true)
[ "$workers" -eq 4 ] || fail "ListWorkers as admin on scheduler-0 shows $workers workers, want 4 (each shim registers with every scheduler): $out"
say "the operator certificate lists the $workers workers on scheduler-0"
register='{"worker":{"workerId":"worker-0","address":"attacker:9500","engine":"sim","blockSize":16,"capacity":{"kvCapacityTokens":"1000"}}}'
expect_denied "RegisterWorker with the frontend's certificate" \
	"$(as frontend "$sched" switchyard.scheduler.v1.SchedulerService/RegisterWorker "$register" || true)"
expect_denied "RegisterWorker for worker-0 with worker-1's certificate" \
	"$(as engine-shim-worker-1 "$sched" switchyard.scheduler.v1.SchedulerService/RegisterWorker "$register" || true)"
expect_denied "ApplyKvHints on a shim with the frontend's certificate" \
	"$(as frontend "$shim" switchyard.engine.v1.EngineShimService/ApplyKvHints '{}' || true)"
out=$(bin/grpcurl -plaintext -max-time 10 -d '{}' "$shim" switchyard.engine.v1.EngineShimService/ApplyKvHints 2>&1) &&
	fail "a plaintext ApplyKvHints answered: $out"
say "refused as it should be: a plaintext ApplyKvHints"

say "PASS: turns 1-2 on $w1 through two frontends, turn 2 reused $cached cached prompt tokens; streaming turn on $w3; mTLS refuses plaintext and wrong identities"
