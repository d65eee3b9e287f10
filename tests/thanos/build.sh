#!/usr/bin/env bash
# Builds `thanos` (cmd/thanos, pinned by the wrapper module go.mod/go.sum beside this script) into
# a cache outside the repo keyed by version, and prints the binary's path on its last line.
# Idempotent and guarded by flock: concurrent callers wait for one build; a warm cache answers in
# well under a second. The Go module and build caches (GOPATH, GOCACHE) are kept, so a rebuild
# after a cache wipe takes seconds once the modules are downloaded (cold: about 1 min download,
# then 560 CPU-seconds of compile and link: 5 min on 2 idle cores, 10 min on a busy machine;
# docs/benchmarks.md, stop 50). Needs Go >= 1.21 on PATH (it fetches the go1.27.3 toolchain
# Thanos needs from the Go module proxy).
set -euo pipefail

THANOS_VERSION=v0.42.5
# Thanos v0.42.5 needs Go >= 1.26.10; the Go command downloads this toolchain once (~76 MB).
export GOTOOLCHAIN=go1.27.3

# Thanos's own release build (.promu.yml) uses these tags: `slicelabels` is required, since Thanos
# casts Prometheus labels to its own label slices (labelpb); without it every Store API Info call
# panics in gRPC's buffer pool on a garbage size. `-s -w` leave out the symbol table and DWARF,
# which only debuggers read: 11 % less build CPU (631 -> 560 s) and a 96 MB binary instead of 133.
# `-N -l` (no optimisation, no inlining) for every package: the tests send it a few hundred
# points, so nothing they check depends on the optimiser, and the build takes 35 % less CPU
# (521 -> 339 s cold; docs/benchmarks.md, stop 54).
# The flags are stamped beside the binary: a binary built with other flags is rebuilt.
TAGS=netgo,slicelabels
LDFLAGS="-s -w -X github.com/prometheus/common/version.Version=${THANOS_VERSION#v}"
GCFLAGS="all=-N -l"
FLAGS="-tags=$TAGS -ldflags=$LDFLAGS -gcflags=$GCFLAGS"

here=$(cd "$(dirname "$0")" && pwd)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/wattflip-tools/thanos-${THANOS_VERSION}"
bin="$cache/thanos"
stamp="$cache/thanos.flags"
built() { [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$FLAGS" ]; }

fail() {
  echo "tests/thanos/build.sh: $*" >&2
  exit 1
}

# The fast path needs no lock: the binary and its stamp are moved into place only once fully built.
if built; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  for candidate in /usr/local/go/bin/go /usr/lib/go/bin/go; do
    if [ -x "$candidate" ]; then PATH="$(dirname "$candidate"):$PATH"; break; fi
  done
fi
command -v go >/dev/null 2>&1 ||
  fail "no 'go' on PATH: install Go >= 1.21 (https://go.dev/dl/ or 'apt-get install -y golang-go'), then run again"
command -v flock >/dev/null 2>&1 || fail "no 'flock' on PATH: apt-get install -y util-linux"
mkdir -p "$cache" || fail "cannot create the cache directory $cache"

exec 9>"$cache/.lock"
flock 9
if ! built; then
  echo "tests/thanos/build.sh: building thanos ${THANOS_VERSION} into $cache (cold: about 340 CPU-seconds, 3-6 min on 2 cores)" >&2
  log="$cache/build.log"
  # -mod=readonly: go.mod/go.sum in the repo are the pinned truth; a build never rewrites them.
  if ! (cd "$here" && nice -n 5 go build -mod=readonly -trimpath -tags="$TAGS" -ldflags="$LDFLAGS" -gcflags="$GCFLAGS" -o "$bin.tmp" github.com/thanos-io/thanos/cmd/thanos) >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    rm -f "$bin.tmp"
    fail "go build of thanos ${THANOS_VERSION} failed (full log: $log). It needs the Go module proxy (proxy.golang.org or GOPROXY) reachable for the first build, and GOTOOLCHAIN=${GOTOOLCHAIN} downloadable; a go.sum mismatch means the wrapper module in $here must be re-tidied ('GOTOOLCHAIN=${GOTOOLCHAIN} go mod tidy' there)"
  fi
  "$bin.tmp" --version >/dev/null 2>&1 || fail "the built $bin.tmp does not run ('$bin.tmp --version' failed)"
  mv "$bin.tmp" "$bin"
  printf '%s\n' "$FLAGS" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
fi
echo "$bin"
