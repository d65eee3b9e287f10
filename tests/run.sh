#!/usr/bin/env bash
# Runs every test of the workspace. Installs what the tests need when it is missing (Debian
# packages), then `cargo test`; the end-to-end tests start their own private influxd on free
# loopback ports with temp data dirs and stop it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=()
command -v influxd >/dev/null 2>&1 || packages+=(influxdb)
command -v setpriv >/dev/null 2>&1 || packages+=(util-linux)
command -v losetup >/dev/null 2>&1 || packages+=(mount)
command -v mkfs.ext4 >/dev/null 2>&1 || packages+=(e2fsprogs)
if ((${#packages[@]})); then
  echo "tests/run.sh: installing ${packages[*]}"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  # The package's own service is not wanted: the tests start private servers.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${packages[@]}" >/dev/null
fi

cargo build --workspace --bins --locked
cargo test --workspace --locked "$@"

# The Ansible deployment, really run over SSH against namespace hosts on this machine (root).
bash tests/ansible/run.sh
