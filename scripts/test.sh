#!/usr/bin/env bash
# The test command (see README): checks that generated code is up to date, lints the
# protos, checks formatting, then vets and tests every module of the workspace with the
# race detector. Every stage runs even after one fails; a summary closes the output and
# the exit status is non-zero if any stage failed.
#
# Environment:
#   SHORT=1   go test without -race (faster local iteration; CI runs the full suite)
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
trap 'rm -rf "$before"' EXIT
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

race=(-race)
if [ "${SHORT:-0}" = 1 ]; then
	race=()
	echo "SHORT=1: without -race"
fi
flags=("${race[@]}" -count=1)
stage "go test ${flags[*]}"
test_ok=0
go test "${flags[@]}" "${patterns[@]}" || test_ok=$?
record "go test ${flags[*]} (all modules)" "$test_ok"

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
