#!/usr/bin/env bash
# Builds the Prometheus server the OTLP end-to-end tests send to (issue 28), once per version, into
# a cache outside the repo: ${XDG_CACHE_HOME:-$HOME/.cache}/wattflip-tools/prometheus-<ver>/.
# Idempotent and guarded by flock, so concurrent test binaries wait for one build. The Go module
# and build caches (GOPATH, GOCACHE) are left in place so a rebuild takes seconds.
# Prints the binary's path on its last line; on failure says what failed and what to install.
# To move to another Prometheus: change PROMETHEUS_VERSION (a Go module version, v0.3xx.y).
set -euo pipefail
version="${PROMETHEUS_VERSION:-v0.316.0}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/wattflip-tools/prometheus-${version}"
bin="$cache/bin/prometheus"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  for candidate in /usr/local/go/bin/go /usr/lib/go/bin/go; do
    if [ -x "$candidate" ]; then PATH="$(dirname "$candidate"):$PATH"; break; fi
  done
fi
if ! command -v go >/dev/null 2>&1; then
  echo "tests/prometheus/build.sh: no Go toolchain; install Go >= 1.24 (https://go.dev/dl/ or apt-get install golang-go) and run again" >&2
  exit 1
fi
echo "tests/prometheus/build.sh: building prometheus ${version} with $(go version) (about 4 min cold)" >&2
log="$cache/build.log"
# GOBIN puts only this binary in the cache (GOPATH and GOCACHE stay where they are, for the next build).
if ! GOBIN="$cache/bin" go install "github.com/prometheus/prometheus/cmd/prometheus@${version}" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  echo "tests/prometheus/build.sh: 'go install github.com/prometheus/prometheus/cmd/prometheus@${version}' failed (log: $log); it needs network access to proxy.golang.org (or GOPROXY) and Go >= 1.24" >&2
  exit 1
fi
if ! "$bin" --version >/dev/null 2>&1; then
  echo "tests/prometheus/build.sh: built $bin but it does not run ('$bin --version' failed)" >&2
  exit 1
fi
echo "$bin"
