#!/usr/bin/env bash
# Harness conformance: the real Claude Code, Codex and OpenCode CLIs, pinned, each run a
# tool-using task through `switchyard up --sim-tool-calls` inside a network namespace that
# has only loopback. For each CLI it checks, from Switchyard's own state (the admin session
# view, the request-trace file, the frontend's metrics) matched against what the CLI itself
# records (its session id, its sub-agents), not from the CLI's answer:
#
#   - the CLI exited 0;
#   - the frontend recognised the session from the CLI's own headers: the admin view names
#     the harness, and the session id is the one the CLI itself reports (Claude Code's
#     session_id, Codex's thread_id, OpenCode's sessionID);
#   - the conversation took at least two turns (a tool call, then the turn carrying its
#     result), all on one worker, and every turn after the first was served partly from
#     that worker's KV cache (cached tokens > 0);
#   - Claude Code's sub-agents (X-Claude-Code-Agent-Id) are sessions of their own whose
#     parent is the session that spawned them, each meeting the same rules, and they are
#     exactly the sub-agents Claude Code recorded in its own transcripts;
#   - every request carried a session identity and every HTTP request got a 2xx.
#
# What the simulated engine does: with --sim-tool-calls it answers a user message that
# declares tools with a call of the FIRST declared tool, its required arguments empty
# (pkg/chat/sim.go), and answers a tool result with text. So the prompt below only makes
# the CLIs declare their tools; which tool runs is each CLI's first: Claude Code's `Agent`
# (a sub-agent, which itself calls `Agent` until Claude Code stops offering it, then
# `Bash`), Codex's `exec_command` (an empty command), OpenCode's `bash` (an empty command,
# which fails, and the failure is the tool result). Sub-agents are exercised for Claude
# Code only: Codex's and OpenCode's sub-agent tools are never first in their lists.
#
# Usage: scripts/conformance.sh [claude] [codex] [opencode]   (default: all three)
#
# Environment:
#   CONFORMANCE_DIR          npm prefix the CLIs are installed into, kept between runs
#                            (default /tmp/switchyard-conformance; installs only what is
#                            missing or at another version)
#   CONFORMANCE_CLI_TIMEOUT  seconds one CLI run may take (default 180)
#   CONFORMANCE_KEEP=1       keep the run folder (logs, traces, CLI homes) after a pass
#   CONFORMANCE_SPEEDUP      the simulated engines' --speedup (default 20)
#
# Needs: go, node and npm, jq, curl, timeout, unshare (util-linux), and either root or
# unprivileged user namespaces; `ip` (iproute2), `ifconfig` or python3 to bring up `lo`.
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$(pwd)

claude_version=2.1.197
codex_version=0.171.0
opencode_version=1.18.33
declare -A package=(
	[claude]="@anthropic-ai/claude-code@$claude_version"
	[codex]="@openai/codex@$codex_version"
	[opencode]="opencode-ai@$opencode_version"
)
packages=("${package[claude]}" "${package[codex]}" "${package[opencode]}")

prefix=${CONFORMANCE_DIR:-/tmp/switchyard-conformance}
cli_timeout=${CONFORMANCE_CLI_TIMEOUT:-180}
speedup=${CONFORMANCE_SPEEDUP:-20}
frontend=127.0.0.1:8000 # alone in its own network namespace, so the port is always free
task="Read the file hello.txt in this directory and tell me what it says."

say() { echo "conformance: $*"; }
die() {
	echo "conformance: FAIL: $*" >&2
	exit 1
}

# ---------------------------------------------------------------------------------------
# Inside the namespace: one CLI against one mesh.

# lo_up brings up loopback, the namespace's only interface.
lo_up() {
	if command -v ip >/dev/null 2>&1; then
		ip link set lo up
	elif command -v ifconfig >/dev/null 2>&1; then
		ifconfig lo up
	else
		# SIOCGIFFLAGS / SIOCSIFFLAGS with IFF_UP on "lo".
		python3 - <<'PY'
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
req = struct.pack("16sH", b"lo", 0)
flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, req))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))
PY
	fi
}

# base_env is the whole environment a CLI gets (env -i): nothing of the caller's, no
# real credentials, no proxy, a home of its own.
base_env() {
	local run=$1
	echo "PATH=$prefix/node_modules/.bin:$(dirname "$(command -v node)"):/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
	echo "HOME=$run/home"
	echo "TMPDIR=$run/tmp"
	echo "XDG_CONFIG_HOME=$run/home/.config"
	echo "XDG_DATA_HOME=$run/home/.local/share"
	echo "XDG_CACHE_HOME=$run/home/.cache"
	echo "XDG_STATE_HOME=$run/home/.local/state"
	echo "TERM=dumb"
	echo "LANG=C.UTF-8"
	echo "NO_COLOR=1"
}

# Each harness: how it is configured and run, how its own output names its session and
# its sub-agents, and how it shows that it completed the task.

claude_run() {
	local run=$1 env
	mapfile -t env < <(base_env "$run")
	env -i "${env[@]}" \
		ANTHROPIC_BASE_URL="http://$frontend" \
		ANTHROPIC_API_KEY=sk-switchyard-conformance \
		ANTHROPIC_MODEL=claude-sonnet-4-5 \
		ANTHROPIC_DEFAULT_SONNET_MODEL=claude-sonnet-4-5 \
		ANTHROPIC_DEFAULT_OPUS_MODEL=claude-sonnet-4-5 \
		ANTHROPIC_DEFAULT_HAIKU_MODEL=claude-haiku-4-5 \
		ANTHROPIC_SMALL_FAST_MODEL=claude-haiku-4-5 \
		CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
		DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_BUG_COMMAND=1 \
		timeout --kill-after=10 "$cli_timeout" \
		claude -p "$task" --output-format json
}
# claude_session: the session_id of `--output-format json`'s result object.
claude_session() { jq -r 'select(.type == "result") | .session_id // empty' "$1/cli.out" | tail -n 1; }
# claude_children: the sub-agents Claude Code itself recorded, one transcript each
# (<config>/projects/<cwd>/<session>/subagents/agent-<id>.jsonl in this pinned version).
claude_children() {
	find "$1/home/.claude/projects" -path "*/$2/subagents/agent-*.jsonl" 2>/dev/null |
		sed 's|.*/agent-||; s|\.jsonl$||' | sort
}
claude_completed() { jq -se 'any(.[]; .type == "result" and .subtype == "success" and .is_error == false)' "$1/cli.out" >/dev/null; }

codex_run() {
	local run=$1 env
	mkdir -p "$run/codex-home"
	cat >"$run/codex-home/config.toml" <<-EOF
		model = "gpt-5.5"
		model_provider = "switchyard"

		[model_providers.switchyard]
		name = "Switchyard"
		base_url = "http://$frontend/v1"
		wire_api = "responses"
		env_key = "SWITCHYARD_API_KEY"
	EOF
	mapfile -t env < <(base_env "$run")
	env -i "${env[@]}" \
		CODEX_HOME="$run/codex-home" \
		SWITCHYARD_API_KEY=sk-switchyard-conformance \
		timeout --kill-after=10 "$cli_timeout" \
		codex exec --skip-git-repo-check --json "$task"
}
# codex_session: `exec --json` opens with {"type":"thread.started","thread_id":...}.
codex_session() { jq -r 'select(.type == "thread.started") | .thread_id // empty' "$1/cli.out" | head -n 1; }
codex_children() { :; }
codex_completed() { jq -se 'any(.[]; .type == "turn.completed")' "$1/cli.out" >/dev/null; }

opencode_run() {
	local run=$1 env
	cat >"$run/opencode.json" <<-EOF
		{
		  "\$schema": "https://opencode.ai/config.json",
		  "provider": {
		    "switchyard": {
		      "npm": "@ai-sdk/openai-compatible",
		      "name": "Switchyard",
		      "options": {"baseURL": "http://$frontend/v1", "apiKey": "sk-switchyard-conformance"},
		      "models": {"qwen3-coder": {"name": "qwen3-coder", "tool_call": true}}
		    }
		  },
		  "model": "switchyard/qwen3-coder",
		  "small_model": "switchyard/qwen3-coder",
		  "autoupdate": false,
		  "share": "disabled"
		}
	EOF
	mapfile -t env < <(base_env "$run")
	env -i "${env[@]}" \
		OPENCODE_CONFIG="$run/opencode.json" \
		OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_AUTOUPDATE=1 \
		OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1 \
		timeout --kill-after=10 "$cli_timeout" \
		opencode run --format json "$task"
}
# opencode_session: every `run --format json` event carries sessionID.
opencode_session() { jq -r '.sessionID // empty' "$1/cli.out" | head -n 1; }
opencode_children() { :; }
opencode_completed() { jq -se 'any(.[]; .type == "tool_use") and any(.[]; .type == "step_finish" and .part.reason == "stop")' "$1/cli.out" >/dev/null; }

# models are the names each CLI sends, as configured above (the frontend's
# --model-aliases); harness is the name the frontend's admin view gives each CLI's
# header family.
declare -A models=([claude]="claude-sonnet-4-5,claude-haiku-4-5" [codex]=gpt-5.5 [opencode]=qwen3-coder)
declare -A harness=([claude]=claude-code [codex]=codex [opencode]=opencode)
# min_children: Claude Code's first tool is Agent, so its run must show a sub-agent.
declare -A min_children=([claude]=1 [codex]=0 [opencode]=0)

# check reads what the mesh recorded and prints the table; its status is the verdict.
# Every turn of a session is one request_end record of the trace. A session's requests
# that share their first KV block are one conversation (an agent resends its whole
# history each turn); other requests under the same id, such as OpenCode's title request
# (another system prompt, no tools), are side requests: listed, never held to the rules.
check() {
	local cli=$1 run=$2 root=$3 children=$4
	jq -rn --arg cli "$cli" --arg harness "${harness[$cli]}" --arg root "$root" \
		--argjson children "$children" \
		--slurpfile trace "$run/trace.jsonl" --slurpfile admin "$run/sessions.json" \
		--rawfile metrics "$run/metrics.txt" -f /dev/stdin <<'JQ'
def pad($n): tostring | . + " " * ([$n - length, 1] | max);
def recs: [$trace[] | .event | select(.event_type == "request_end")];
def first_block: .request.replay.input_sequence_hashes[0] // "empty";
def calls: [.request.finish_reason_metadata.tool_calls[]?.name];

(recs) as $recs
| ($admin[0].sessions // [] | map({key: .agent.sessionId, value: .}) | from_entries) as $views
| ([$root] + ($children | sort_by(. as $c | [$recs[] | select(.agent_context.session_id == $c) | .request.request_received_ms] | min // 0))) as $expected
| ($recs | map(.agent_context.session_id // null)) as $sids
| [
    # one row per expected session, with the errors it raises
    ($expected[] as $sid
     | ($recs | map(select(.agent_context.session_id == $sid)) | sort_by(.request.request_received_ms)) as $all
     | ($all | map(select((calls | length) > 0)) | first // $all[0] // null) as $opener
     | (if $opener then ($opener | first_block) else null end) as $family
     | ($all | map(select(first_block == $family))) as $turns
     | ($all | map(select(first_block != $family))) as $side
     | ($turns | map(.request.worker.worker_name) | unique) as $workers
     | $views[$sid] as $view
     | (if $sid == $root then "" else ($all[0].agent_context.parent_session_id // $view.agent.parentSessionId // "") end) as $parent
     | {
         sid: $sid, parent: $parent, turns: ($turns | length), side: ($side | length),
         workers: $workers,
         cached: ($turns | map(.request.cached_tokens // 0)),
         prompt: ($turns | map(.request.input_tokens // 0)),
         tools: ($turns | map(calls | join("+")) | map(select(. != ""))),
         side_workers: ($side | map(.request.worker.worker_name) | unique),
         errors: [
           (if ($all | length) == 0 then "no request of session \($sid) in the trace (not recognised from the headers?)" else empty end),
           (if $view == null then "the admin view has no session \($sid)"
            elif $view.agent.harness != $harness then "session \($sid): admin view says harness \($view.agent.harness | tojson), want \($harness)"
            elif ($view.turns // 0) != ($all | length) then "session \($sid): admin view counts \($view.turns) turns, the trace \($all | length)"
            else empty end),
           (if $sid == $root then
              (if ($view.agent.parentSessionId // "") != "" then "root session \($sid) has parent \($view.agent.parentSessionId)" else empty end)
            else
              (if ($expected | index($parent)) == null or $parent == $sid then "sub-agent \($sid): parent \($parent | tojson) is not a session of this run" else empty end)
            end),
           (if ($all | length) > 0 and ($turns | length) < 2 then "session \($sid): \($turns | length) conversation turn(s), want at least 2" else empty end),
           (if $sid == $root and ($turns | length) > 0 and (($turns | map(select((calls | length) > 0)) | length) == 0 or ($turns | map(select(.agent_context.input_trigger == "tool_result")) | length) == 0)
            then "session \($sid): no tool call followed by a tool-result turn" else empty end),
           (if ($workers | length) > 1 then "session \($sid): turns went to \($workers | length) workers (\($workers | join(", ")))" else empty end),
           ($turns[1:] | to_entries[] | select((.value.request.cached_tokens // 0) == 0)
            | "session \($sid): turn \(.key + 2) of \($turns | length) had no cached tokens"),
           ($all[] | select(.request.finish_reason_metadata.finish_reason == "abort" or .request.finish_reason_metadata.finish_reason == "error")
            | "session \($sid): request \(.request.request_id) ended \(.request.finish_reason_metadata.finish_reason)")
         ]
       })
  ] as $rows
| [
    ($rows[].errors[]),
    (if ($sids | map(select(. == null)) | length) > 0 then "\($sids | map(select(. == null)) | length) request(s) carried no session identity" else empty end),
    ($sids | map(select(. != null)) | unique[] | select(($expected | index(.)) == null)
     | "session \(.) in the trace is neither the CLI's session nor one of its recorded sub-agents"),
    ($metrics | split("\n")[] | select(startswith("switchyard_frontend_requests_total{"))
     | capture("api=\"(?<api>[^\"]*)\".*status=\"(?<status>[0-9]+)\"\\} (?<n>[0-9.e+]+)")
     | select(.status | startswith("2") | not)
     | "the frontend answered \(.n) \(.api) request(s) with \(.status)"),
    # every HTTP request, the inference APIs' and any other path a CLI probes
    ($metrics | split("\n")[] | select(startswith("switchyard_frontend_http_requests_total{"))
     | capture("code=\"(?<code>[0-9]+)\".*method=\"(?<method>[^\"]*)\"\\} (?<n>[0-9.e+]+)")
     | select(.code | startswith("2") | not)
     | "the frontend's HTTP server answered \(.n) \(.method | ascii_upcase) request(s) with \(.code)")
  ] as $errors
| ("  " + ("session" | pad(38)) + ("parent" | pad(20)) + ("turns" | pad(7)) + ("workers" | pad(10)) + "cached tokens per turn (of prompt)"),
  ($rows[] | "  " + ((if .sid == $root then .sid else "└ " + .sid end) | pad(38))
     + ((if .parent == "" then "-" elif (.parent | length) > 17 then .parent[0:8] + "…" + .parent[-8:] else .parent end) | pad(20))
     + (.turns | pad(7)) + ((.workers | join(",")) | pad(10))
     + ([.cached, .prompt] | transpose | map("\(.[0])/\(.[1])") | join(" "))
     + (if .tools != [] then "  tools: " + (.tools | join(" ")) else "" end)
     + (if .side > 0 then "  (+\(.side) side request(s) on \(.side_workers | join(",")))" else "" end)),
  "  frontend requests: " + ([$metrics | split("\n")[] | select(startswith("switchyard_frontend_requests_total{"))
     | capture("api=\"(?<api>[^\"]*)\".*status=\"(?<status>[0-9]+)\"\\} (?<n>[0-9.e+]+)") | "\(.api) \(.status) ×\(.n)"] | join(", ")),
  ($errors[] | "  ERROR: " + .),
  (if ($errors | length) > 0 then "__FAILED__" else empty end)
JQ
}

in_netns() {
	local cli=$1 run=$2
	lo_up
	# /proc/net/dev is this namespace's: loopback must be all there is.
	local links
	links=$(awk -F: 'NR > 2 { gsub(/ /, "", $1); print $1 }' /proc/net/dev | sort | tr '\n' ' ')
	[ "$links" = "lo " ] || die "$cli: the namespace has interfaces other than lo: $links"
	mkdir -p "$run/home" "$run/tmp" "$run/work"
	echo "Switchyard conformance: the answer is 42." >"$run/work/hello.txt"

	SWITCHYARD_REQUEST_TRACE=1 \
		SWITCHYARD_REQUEST_TRACE_SINKS=jsonl \
		SWITCHYARD_REQUEST_TRACE_FILE_PATH="$run/trace.jsonl" \
		SWITCHYARD_REQUEST_TRACE_FILE_ROLL_BYTES=0 \
		SWITCHYARD_REQUEST_TRACE_FILE_FLUSH_INTERVAL_MS=100 \
		"$repo/bin/switchyard" up --sim-tool-calls --frontend-addr "$frontend" \
		--speedup "$speedup" --model-aliases "${models[$cli]}" --log-level INFO \
		>"$run/mesh.out" 2>"$run/mesh.log" &
	local mesh=$!
	# shellcheck disable=SC2064 # the pid is fixed now
	trap "kill $mesh 2>/dev/null || true" EXIT
	local deadline=$((SECONDS + 60))
	until grep -q '^Switchyard is up' "$run/mesh.out"; do
		kill -0 "$mesh" 2>/dev/null || die "$cli: switchyard up exited before it was ready"
		[ "$SECONDS" -lt "$deadline" ] || die "$cli: switchyard up not ready within 60s"
		sleep 0.2
	done

	local start=$SECONDS status=0
	(cd "$run/work" && "${cli}_run" "$run") >"$run/cli.out" 2>"$run/cli.err" </dev/null || status=$?
	echo "$status" >"$run/cli.status"
	echo "$((SECONDS - start))" >"$run/cli.seconds"

	curl -sf --max-time 10 "http://$frontend/v1/admin/sessions?limit=1000" >"$run/sessions.json" || echo '{}' >"$run/sessions.json"
	curl -sf --max-time 10 "http://$frontend/metrics" >"$run/metrics.txt" || : >"$run/metrics.txt"
	wc -l <"$run/mesh.log" >"$run/mesh.log.lines" # what came before the shutdown
	# Stopping the mesh drains the trace queue into the file.
	kill -INT "$mesh"
	for _ in $(seq 100); do
		kill -0 "$mesh" 2>/dev/null || break
		sleep 0.2
	done
	kill -0 "$mesh" 2>/dev/null && die "$cli: switchyard up did not stop within 20s"
	trap - EXIT
	touch "$run/trace.jsonl"

	local root children='[]' verdict=0
	root=$("${cli}_session" "$run" 2>/dev/null || true)
	if [ -n "$root" ]; then
		children=$("${cli}_children" "$run" "$root" | jq -R . | jq -sc .)
	fi
	echo "$cli (${package[$cli]}): exit $status in $(cat "$run/cli.seconds")s, the CLI's own session id ${root:-<none>}"
	local check_status=0
	check "$cli" "$run" "${root:-<none>}" "$children" >"$run/check.txt" 2>&1 || check_status=$?
	grep -v '^__FAILED__$' "$run/check.txt" || true
	grep -q '^__FAILED__$' "$run/check.txt" && verdict=1
	if [ "$check_status" -ne 0 ]; then
		echo "  ERROR: the mesh's recorded state could not be read (jq exit $check_status)"
		verdict=1
	fi
	if [ -n "$root" ] && [ "$(jq length <<<"$children")" -lt "${min_children[$cli]}" ]; then
		echo "  ERROR: the CLI recorded no sub-agent, though its first tool starts one"
		verdict=1
	fi
	if [ "$status" -ne 0 ]; then
		echo "  ERROR: the CLI exited $status"
		verdict=1
	elif ! "${cli}_completed" "$run"; then
		echo "  ERROR: the CLI's output does not show a completed task"
		verdict=1
	fi
	[ -n "$root" ] || {
		echo "  ERROR: the CLI's output names no session"
		verdict=1
	}
	return "$verdict"
}

# ---------------------------------------------------------------------------------------
# Outside: install, build, one namespace per CLI, summary.

installed_version() { jq -r '.version // empty' "$prefix/node_modules/$1/package.json" 2>/dev/null || true; }

install_clis() {
	local want=() spec name version
	for spec in "${packages[@]}"; do
		name=${spec%@*} version=${spec##*@}
		[ "$(installed_version "$name")" = "$version" ] || want+=("$spec")
	done
	if [ ${#want[@]} -eq 0 ]; then
		say "CLIs already installed in $prefix"
		return
	fi
	say "npm install ${want[*]} into $prefix"
	mkdir -p "$prefix"
	timeout 600 npm install --no-audit --no-fund --loglevel=error --prefix "$prefix" "${packages[@]}"
	for spec in "${packages[@]}"; do
		name=${spec%@*} version=${spec##*@}
		[ "$(installed_version "$name")" = "$version" ] || die "npm did not install $spec"
	done
}

fail_tails() {
	local cli=$1 run=$2
	echo "---- $cli: CLI stderr (last 30 lines) ----"
	tail -n 30 "$run/cli.err" 2>/dev/null || true
	echo "---- $cli: CLI stdout (last 10 lines, cut to 400 characters) ----"
	tail -n 10 "$run/cli.out" 2>/dev/null | cut -c1-400 || true
	# The mesh log before the shutdown began (its last lines are the shutdown's own).
	echo "---- $cli: mesh log before the shutdown (last 30 lines) ----"
	head -n "$(cat "$run/mesh.log.lines" 2>/dev/null || echo 1000000)" "$run/mesh.log" 2>/dev/null | tail -n 30 | cut -c1-600 || true
}

main() {
	local clis=("$@") cli tool
	[ ${#clis[@]} -gt 0 ] || clis=(claude codex opencode)
	for cli in "${clis[@]}"; do
		case $cli in claude | codex | opencode) ;; *) die "unknown CLI $cli (claude, codex, opencode)" ;; esac
	done
	for tool in go node npm jq curl timeout unshare; do
		command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed"
	done
	local netns=(unshare --net --fork --kill-child)
	[ "$(id -u)" -eq 0 ] || netns=(unshare --user --map-root-user --net --fork --kill-child)
	"${netns[@]}" true 2>/dev/null || die "cannot create a network namespace (${netns[*]}): run as root or allow user namespaces"

	local t0=$SECONDS
	install_clis
	local t_install=$((SECONDS - t0))
	say "go build -o bin/switchyard ./cmd/switchyard"
	timeout 900 go build -o bin/switchyard ./cmd/switchyard
	local t_build=$((SECONDS - t0 - t_install))

	local runs
	runs=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-conformance-run.XXXXXX")
	local failed=() passed=() status
	for cli in "${clis[@]}"; do
		echo
		status=0
		timeout --kill-after=10 $((cli_timeout + 120)) "${netns[@]}" bash "$0" --in-netns "$cli" "$runs/$cli" || status=$?
		if [ "$status" -eq 0 ]; then
			passed+=("$cli")
		else
			[ "$status" -ne 124 ] || echo "  ERROR: timed out after $((cli_timeout + 120))s"
			failed+=("$cli")
			fail_tails "$cli" "$runs/$cli"
		fi
	done

	echo
	say "install ${t_install}s, build ${t_build}s, runs $((SECONDS - t0 - t_install - t_build))s, total $((SECONDS - t0))s"
	for cli in "${passed[@]}"; do echo "  PASS  $cli"; done
	for cli in "${failed[@]}"; do echo "  FAIL  $cli"; done
	if [ ${#failed[@]} -gt 0 ]; then
		say "logs, traces and CLI homes kept in $runs"
		exit 1
	fi
	if [ "${CONFORMANCE_KEEP:-0}" = 1 ]; then
		say "run folder kept: $runs"
	else
		rm -rf "$runs"
	fi
}

if [ "${1:-}" = "--in-netns" ]; then
	in_netns "$2" "$3"
else
	main "$@"
fi
