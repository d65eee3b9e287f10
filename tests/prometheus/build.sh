#!/usr/bin/env bash
# Builds the Prometheus server the OTLP end-to-end tests send to (issue 28) and its promtool (the
# recording rules check, issue 30), once per version, into a cache outside the repo: ${XDG_CACHE_HOME:-$HOME/.cache}/wattflip-tools/prometheus-<ver>/.
# Idempotent and guarded by flock, so concurrent test binaries wait for one build. The Go module
# and build caches (GOPATH, GOCACHE) are left in place so a rebuild takes seconds.
# Prints the server's path on its last line (promtool is beside it); on failure says what failed
# and what to install.
# To move to another Prometheus: change PROMETHEUS_VERSION (a Go module version, v0.3xx.y).
set -euo pipefail
version="${PROMETHEUS_VERSION:-v0.316.0}"
# remove_all_sd leaves out every service-discovery plugin (plugins/*.go: Kubernetes, the clouds,
# Consul, ...): the tests configure no scrape job at all (OTLP in, rules and promtool only), and
# the two builds take half the CPU (603 s against 1,214 s cold; docs/benchmarks.md, stop 50).
# `-s -w` leave out the symbol table and DWARF, which only debuggers read: 562 s, and 52 MB
# binaries instead of 75. `-N -l` (no optimisation, no inlining) for every package: the tests
# send a few hundred points, and Thanos's build took 35 % less CPU with them (stop 54). The flags
# are stamped beside the binaries: binaries built with other flags are rebuilt.
TAGS=remove_all_sd
LDFLAGS="-s -w"
GCFLAGS="all=-N -l"
FLAGS="-tags=$TAGS -ldflags=$LDFLAGS -gcflags=$GCFLAGS"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/wattflip-tools/prometheus-${version}"
bin="$cache/bin/prometheus"
promtool="$cache/bin/promtool"
stamp="$cache/build.flags"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1 && [ -x "$promtool" ] && "$promtool" --version >/dev/null 2>&1 &&
  [ "$(cat "$stamp" 2>/dev/null)" = "$FLAGS" ]; then
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
echo "tests/prometheus/build.sh: building prometheus and promtool ${version} with $(go version) (cold, both: about 370 CPU-seconds, 3-6 min on 2 cores)" >&2
log="$cache/build.log"
: >"$log"
# GOBIN puts only these binaries in the cache (GOPATH and GOCACHE stay where they are, for the next build).
for cmd in prometheus promtool; do
  if ! GOBIN="$cache/bin" go install -tags="$TAGS" -ldflags="$LDFLAGS" -gcflags="$GCFLAGS" "github.com/prometheus/prometheus/cmd/${cmd}@${version}" >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "tests/prometheus/build.sh: 'go install -tags=$TAGS -ldflags=\"$LDFLAGS\" -gcflags=\"$GCFLAGS\" github.com/prometheus/prometheus/cmd/${cmd}@${version}' failed (log: $log); it needs network access to proxy.golang.org (or GOPROXY) and Go >= 1.24" >&2
    exit 1
  fi
  if ! "$cache/bin/$cmd" --version >/dev/null 2>&1; then
    echo "tests/prometheus/build.sh: built $cache/bin/$cmd but it does not run ('$cache/bin/$cmd --version' failed)" >&2
    exit 1
  fi
done
printf '%s\n' "$FLAGS" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
echo "$bin"
