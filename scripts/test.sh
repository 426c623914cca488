#!/usr/bin/env bash
# test.sh is Tidemark's test command (docs/testing.md; CI runs it through
# .ci/run): it installs the test dependencies (scripts/deps.sh), then fails
# on any file gofmt would change, on any `go vet` finding, and on any failing
# test of `go test -race ./...`, of short fuzzing runs of package bearer, of
# the benchmark module's smoke test and of the deployment files' checks
# (deploy/check).
#
# It exports TIDEMARK_CACHE (the absolute directory deps.sh installed into),
# which internal/testenv reads to find Node.js 22 and the npm packages, and
# puts that Node.js first on PATH.
set -euo pipefail

root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
cd "$root"
start=$SECONDS

"$root/scripts/deps.sh"

export TIDEMARK_CACHE=${TIDEMARK_CACHE:-$root/.cache}
export PATH=$TIDEMARK_CACHE/npm/node_modules/.bin:$PATH

echo "test: gofmt -l"
# Tracked and new (not ignored) Go files, so .cache/ and node_modules/ are skipped.
# A tracked file deleted in the work tree is left out.
gofiles=()
while IFS= read -r f; do
	[[ -e $f ]] && gofiles+=("$f")
done < <(git ls-files --cached --others --exclude-standard -- '*.go')
unformatted=$(gofmt -l "${gofiles[@]}")
if [[ -n $unformatted ]]; then
	echo "test: these files are not gofmt-formatted (run gofmt -w on them):" >&2
	echo "$unformatted" >&2
	exit 1
fi

echo "test: go vet ./..."
go vet ./...

echo "test: go test -race -count=1 -timeout 15m ./..."
go test -race -count=1 -timeout 15m ./...

# The fuzz targets of package bearer (the Authorization header, the
# authorization server's metadata, introspection answers: what a network
# peer writes) run briefly beyond their seed corpus, one at a time (go test
# fuzzes one target per run): about 20 s in all. The budget is a count of
# executions, not a duration: Go 1.26's coordinator can report its own
# -fuzztime deadline as a failure when the workers are starved
# (go.dev/issue/75804, fixed in Go 1.27).
for target in $(go test -list '^Fuzz' ./bearer | grep '^Fuzz'); do
	echo "test: go test -run '^\$' -fuzz '^$target\$' -fuzztime 40000x ./bearer"
	go test -run '^$' -fuzz "^$target\$" -fuzztime 40000x ./bearer
done

# The benchmark program is a module of its own (so the peers' dependencies
# stay out of Tidemark's); its smoke test runs it against Tidemark and the
# bare net/http ceiling in --quick mode.
echo "test: (cd bench && go vet ./... && go test -count=1 ./...)"
(cd bench && go vet ./... && go test -count=1 -timeout 5m ./...)

# The deployment files' checks are a module of their own as well (so the
# BuildKit, compose and Kubernetes parsers stay out of Tidemark's
# dependencies): they parse the Dockerfile, deploy/compose and
# deploy/kubernetes, build the binary as the Dockerfile does, and run it
# with each deployment's arguments.
echo "test: (cd deploy/check && go vet ./... && go test -count=1 ./...)"
(cd deploy/check && go vet ./... && go test -count=1 -timeout 10m ./...)

echo "test: all checks passed in $((SECONDS - start))s"
