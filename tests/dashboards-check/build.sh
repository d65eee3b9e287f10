#!/usr/bin/env bash
# Builds the dashboard checker (this directory's Go module: grafana-foundation-sdk v0.0.22 and
# influxdata/influxql, pinned in go.mod/go.sum) into a cache outside the repository, keyed by a
# hash of its sources, and runs its mutation tests once per build. Idempotent; two callers wait
# for one build (flock). Prints the binary's path on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v go >/dev/null 2>&1; then
  echo "tests/dashboards-check/build.sh: no \`go\` on PATH; install Go >= 1.24 (https://go.dev/dl/ or Debian's golang-go from bookworm-backports) and run again" >&2
  exit 1
fi
key=$(cd "$here" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/wattflip-tools/dashboards-check-$key
bin=$cache/dashboards-check
mkdir -p "$cache"
exec 8>"$cache.lock"
flock -w 600 8 || { echo "tests/dashboards-check/build.sh: waited 10 min for $cache.lock" >&2; exit 1; }
if [ ! -x "$bin" ]; then
  # The module cache and build cache stay where Go keeps them (GOPATH, GOCACHE): later builds
  # take seconds. -buildvcs=false: the module is inside the repository's git work tree.
  if ! (cd "$here" && go test -buildvcs=false -count=1 . >"$cache/test.log" 2>&1); then
    cat "$cache/test.log" >&2
    echo "tests/dashboards-check/build.sh: the checker's own tests failed (above); the module proxy (proxy.golang.org) must be reachable on a first build" >&2
    exit 1
  fi
  if ! (cd "$here" && go build -buildvcs=false -o "$bin.tmp" . 2>"$cache/build.log"); then
    cat "$cache/build.log" >&2
    echo "tests/dashboards-check/build.sh: go build failed (above)" >&2
    exit 1
  fi
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
