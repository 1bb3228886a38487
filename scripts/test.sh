#!/usr/bin/env bash
# The test command (see README): checks that generated code is up to date, lints the
# protos, checks formatting, then vets and tests every module of the workspace with the
# race detector, and runs the tests that skip under -race once more without it. Every
# skipped test is listed with its reason, and counted in the summary. Every stage runs
# even after one fails; a summary closes the output and the exit status is non-zero if
# any stage failed.
#
# Environment:
#   SHORT=1   go test without -race, once (faster local iteration; CI runs the full suite)
#   SWITCHYARD_BROWSER_TEST=1  the console's headless-Chromium tests (consoletest) fail
#             instead of skipping without /usr/bin/chromium ($CHROMIUM); .ci/run sets it
#   CONSOLE_SCREENSHOTS=DIR    an absolute path: those tests save full-page PNGs there,
#             and a stage checks that they did
set -euo pipefail

cd "$(dirname "$0")/.."

results=()
failed=0
stage() { echo; echo "=== test.sh: $1"; }
record() { # record NAME STATUS
	if [ "$2" -eq 0 ]; then
		results+=("PASS  $1")
	else
		results+=("FAIL  $1")
		failed=$((failed + 1))
	fi
}

# 1. Pinned tools, installed only when missing (scripts/tools.sh puts them in ./bin).
stage "tools"
tools_ok=0
for tool in buf protoc-gen-go protoc-gen-go-grpc protoc-gen-grpc-gateway protoc-gen-openapiv2 grpcurl helm; do
	if [ ! -x "bin/$tool" ]; then
		echo "bin/$tool missing: running scripts/tools.sh"
		scripts/tools.sh || tools_ok=$?
		break
	fi
done
record "tools installed (bin/)" "$tools_ok"

# 2. gen/ is exactly what scripts/gen.sh makes from proto/.
stage "generated code is up to date (scripts/gen.sh)"
gen_ok=0
before=$(mktemp -d)
trap 'rm -rf "$before" "$before".*' EXIT
cp -a gen/. "$before/"
if scripts/gen.sh; then
	if ! diff -ru "$before" gen >"$before.diff" 2>&1; then
		echo "scripts/gen.sh changed gen/; commit the regenerated files. Diff (before → after):"
		head -n 200 "$before.diff"
		gen_ok=1
	fi
	# On a clean clone (CI) the regenerated tree must also match what is committed.
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		changes=$(git status --porcelain -- gen/)
		if [ -n "$changes" ]; then
			echo "gen/ differs from the committed tree:"
			echo "$changes"
			git --no-pager diff --stat -- gen/ || true
			if [ "${CI:-}" = true ]; then
				gen_ok=1
			else
				echo "(not failing outside CI: uncommitted work in progress)"
			fi
		fi
	fi
else
	gen_ok=1
fi
rm -f "$before.diff"
record "gen/ reproduced byte for byte" "$gen_ok"

# 3. Proto lint.
stage "buf lint"
lint_ok=0
bin/buf lint || lint_ok=$?
record "buf lint" "$lint_ok"

# 4. Formatting of hand-written Go (gen/ is the generators' business).
stage "gofmt"
fmt_ok=0
unformatted=$(find . -name '*.go' -not -path './gen/*' -not -path './.git/*' -not -path './bin/*' -not -path './dist/*' -print0 | xargs -0 -r gofmt -l)
if [ -n "$unformatted" ]; then
	echo "not gofmt-ed:"
	echo "$unformatted"
	fmt_ok=1
fi
record "gofmt" "$fmt_ok"

# 5. vet and test every workspace module, in one go command each so packages run in
#    parallel.
patterns=()
while IFS= read -r dir; do
	rel=$(realpath --relative-to=. "$dir")
	if [ "$rel" = . ]; then
		patterns+=("./...")
	else
		patterns+=("./$rel/...")
	fi
done < <(go list -m -f '{{.Dir}}')
echo
echo "modules: ${patterns[*]}"

stage "go vet"
vet_ok=0
go vet "${patterns[@]}" || vet_ok=$?
record "go vet (all modules)" "$vet_ok"

# go test -json through internal/testreport: plain go test's output, then every skipped
# test with its reason (the list also goes to a file, for the pass without -race).
report_ok=0
go build -o "$before.testreport" ./internal/testreport || report_ok=$?
record "internal/testreport builds" "$report_ok"
gotest() { # gotest SKIPPED-FILE GO-TEST-ARGS...
	local list=$1
	shift
	if [ "$report_ok" -ne 0 ]; then
		go test "$@"
		return
	fi
	go test -json "$@" | "$before.testreport" -skipped "$list"
}
skips() { [ -s "$1" ] && wc -l <"$1" | tr -d ' ' || echo 0; }

race=(-race)
if [ "${SHORT:-0}" = 1 ]; then
	race=()
	echo "SHORT=1: without -race"
fi
flags=("${race[@]}" -count=1)
stage "go test ${flags[*]}"
test_ok=0
gotest "$before.skipped" "${flags[@]}" "${patterns[@]}" || test_ok=$?
skipped=$(skips "$before.skipped")
if [ ${#race[@]} -eq 0 ]; then
	record "go test ${flags[*]} (all modules; $skipped skipped, listed above)" "$test_ok"
else
	record "go test ${flags[*]} (all modules; $skipped skipped under -race)" "$test_ok"

	# 5b. The tests that skipped under -race, once more without it: those that skip
	#     there because the race detector makes them minutes long and has nothing to
	#     find in them (single-goroutine cores) run now; the others skip again, and
	#     say why.
	stage "go test -count=1 (without -race): the tests that skipped under -race"
	norace_ok=0
	if [ "$skipped" -eq 0 ]; then
		echo "none skipped"
		: >"$before.skipped2"
	else
		pkgs=$(cut -f1 "$before.skipped" | sort -u | tr '\n' ' ')
		names=$(cut -f2 "$before.skipped" | cut -d/ -f1 | sort -u | paste -sd '|')
		# shellcheck disable=SC2086 # pkgs is a list of package paths
		gotest "$before.skipped2" -count=1 -run "^($names)\$" $pkgs || norace_ok=$?
	fi
	record "go test -count=1 of the tests skipped under -race ($(skips "$before.skipped2") skipped, listed above)" "$norace_ok"
fi

# 5c. The console's browser tests left their screenshots (CONSOLE_SCREENSHOTS): with
#     SWITCHYARD_BROWSER_TEST=1 none at all means they did not run.
if [ -n "${CONSOLE_SCREENSHOTS:-}" ]; then
	stage "console screenshots ($CONSOLE_SCREENSHOTS)"
	shots_ok=0
	shots=$(find "$CONSOLE_SCREENSHOTS" -name '*.png' 2>/dev/null | sort || true)
	if [ -n "$shots" ]; then
		echo "$shots"
	elif [ "${SWITCHYARD_BROWSER_TEST:-}" = 1 ]; then
		echo "no screenshots in $CONSOLE_SCREENSHOTS: the browser tests did not run"
		shots_ok=1
	fi
	record "console screenshots ($(printf '%s' "$shots" | grep -c . || true) PNG in $CONSOLE_SCREENSHOTS)" "$shots_ok"
fi

# 6. The Helm chart: helm lint (pinned, scripts/tools.sh) of the defaults and of every
#    example. Rendering and the cross-reference checks are deploy/'s go test (stage 5).
stage "helm lint"
helm_ok=0
for values in "" deploy/helm/switchyard/examples/*.yaml; do
	bin/helm lint --strict --kube-version 1.30.0 deploy/helm/switchyard ${values:+-f "$values"} || helm_ok=$?
done
record "helm lint (deploy/helm/switchyard, examples)" "$helm_ok"

echo
echo "=== test.sh summary"
for r in "${results[@]}"; do
	echo "  $r"
done
if [ "$failed" -ne 0 ]; then
	echo "test.sh: $failed stage(s) failed"
	exit 1
fi
echo "test.sh: all stages passed"
