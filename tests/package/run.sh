#!/usr/bin/env bash
# Package test (issue 31): the Debian packages of wattflip-agent and wattflip-collector on
# Debian 11.
#
#  1. tools (tools.sh: cargo-zigbuild + ziglang, cargo-deb 3.x, a debootstrap bullseye root, all
#     cached outside the repository);
#  2. one build linked for glibc 2.28 (cargo zigbuild, target x86_64-unknown-linux-gnu.2.28) in
#     the test's cheaper profile, package-test (WATTFLIP_PACKAGE_PROFILE=dist: the shipped one;
#     build.sh), in a target dir in the same cache, so later runs rebuild only what changed;
#     `objdump -T`: no symbol version above GLIBC_2.28;
#  3. two package versions from those same binaries (`cargo deb --no-build`, the second with
#     `--deb-version`); their files, conffiles, units (`systemd-analyze verify`, any stderr fails)
#     and the systemd snippets cargo-deb generated (the agent is stopped before an upgrade and
#     started after it only if enabled; never enabled by the package);
#  4. in a throwaway copy of the bullseye root (proc and a read-only sys mounted): `dpkg -i` of the
#     first version, the service user, modes, `wattflip-collector --version`, `wattflip-agent
#     inventory` and `probe --quick`;
#  5. drive commands enabled in the conffile (a stand-in nvme-cli serving a real id-ctrl capture)
#     and a guard state file present, as a SIGKILLed agent leaves it with the drive in PS2; upgrade
#     to the second version: the state file, the drive's state and the changed conffile survive
#     the upgrade, and the new agent's start (the same recover_records `run` calls first) puts PS0
#     back and removes the file;
#  6. `dpkg -r` keeps the spool and `dpkg -P` deletes it.
# Needs root (chroot, mounts). Prints one PASS/FAIL line; exits non-zero on failure.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
here=$repo/tests/package
started=$(date +%s)
glibc=2.28
failures=()
step() { printf '\n== %s\n' "$*"; }
fail() {
  echo "FAIL: $*" >&2
  failures+=("$*")
}
die() {
  fail "$*"
  exit 1
}

if [ "$(id -u)" -ne 0 ]; then
  echo "tests/package/run.sh: needs root (chroot and mounts); run it as root or with sudo" >&2
  echo "package test: FAIL (not root)"
  exit 1
fi

work=$(mktemp -d /tmp/wattflip-package.XXXXXX)
root=$work/root
mounted=()
cleanup() {
  local rc=$?
  set +e
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}"; done
  # Never delete through a mount that is still there (proc, sys of this machine).
  if grep -qF " $work/" /proc/mounts; then
    echo "tests/package/run.sh: $work still has mounts; left in place" >&2
  else
    rm -rf "$work"
  fi
  local secs=$(($(date +%s) - started))
  if [ "$rc" -eq 0 ] && ((${#failures[@]} == 0)); then
    echo "package test: PASS (glibc <= $glibc, dpkg -i and upgrade on Debian 11, ${secs}s)"
  else
    echo "package test: FAIL (${#failures[@]} check(s): ${failures[*]:-exit $rc}; ${secs}s)"
    [ "$rc" -ne 0 ] || rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1.-3. tools, the build for glibc 2.28, two package versions ----------------------------
step "tests/package/build.sh"
command -v systemd-analyze >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
built=$(bash "$here/build.sh") || die "tests/package/build.sh failed (above)"
bullseye=$(sed -n 's/^bullseye=//p' <<<"$built")
debs=$(tail -n 1 <<<"$built")
bindir=$(sed -n 's/^bindir=//p' <<<"$built")
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n 1)
v1=$version-1
v2=$version-2
cp -r "$debs/v1" "$debs/v2" "$work/"
ls -l "$work"/v1/*.deb "$work"/v2/*.deb
agent_deb=$(ls "$work"/v1/wattflip-agent_*.deb)
collector_deb=$(ls "$work"/v1/wattflip-collector_*.deb)
# Files and conffiles.
contents() { dpkg-deb -c "$1" | awk '{print $1 " " $2 " " $6}' | sed 's#\./#/#'; }
for want in "-rwxr-xr-x 0/0 /usr/bin/wattflip-agent" "-rw-r----- 0/0 /etc/wattflip/agent.toml" \
  "-rw-r--r-- 0/0 /usr/share/wattflip-agent/drive-commands.conf" "systemd/system/wattflip-agent.service"; do
  grep -qF -- "$want" <(contents "$agent_deb") || fail "agent package: no \`$want\`"
done
for want in "-rwxr-xr-x 0/0 /usr/bin/wattflip-collector" "-rw-r----- 0/0 /etc/wattflip/collector.toml" \
  "systemd/system/wattflip-collector.service"; do
  grep -qF -- "$want" <(contents "$collector_deb") || fail "collector package: no \`$want\`"
done
for p in agent collector; do
  deb=$(ls "$work"/v1/wattflip-${p}_*.deb)
  mkdir -p "$work/control-$p"
  dpkg-deb -e "$deb" "$work/control-$p"
  [ "$(cat "$work/control-$p/conffiles")" = "/etc/wattflip/$p.toml" ] \
    || fail "$p: conffiles are \`$(tr '\n' ' ' <"$work/control-$p/conffiles")\`, expected /etc/wattflip/$p.toml"
  # The glibc the binaries were linked for, not the build machine's (dpkg-shlibdeps would say 2.34).
  [ "$(dpkg-deb -f "$deb" Depends)" = "libc6 (>= $glibc), passwd" ] || fail "$p: Depends is \`$(dpkg-deb -f "$deb" Depends)\`"
  echo "$p: Depends: $(dpkg-deb -f "$deb" Depends)"
done
# The systemd snippets: never enabled by the package; the agent stopped in prerm on upgrade too
# (its SIGTERM restores guarded power states before the new files land) and started in postinst
# (deb-systemd-invoke starts only enabled units); the collector restarted after an upgrade.
c=$work/control-agent
# (postinst-systemd-dont-enable: enable only if it was enabled before, i.e. on an upgrade)
grep -q "if deb-systemd-helper debian-installed wattflip-agent.service; then" "$c/postinst" \
  && ! grep -q "Enables the unit on first installation" "$c/postinst" || fail "agent postinst: the package enables the unit"
[ "$(grep -c 'deb-systemd-invoke start wattflip-agent.service' "$c/postinst")" = 1 ] || fail "agent postinst: not one start after configure"
grep -qE 'deb-systemd-invoke (restart|try-restart)' "$c/postinst" && fail "agent postinst: restarts instead of stop + start"
grep -q "deb-systemd-invoke stop wattflip-agent.service" "$c/prerm" || fail "agent prerm: does not stop the agent"
grep -q '"\$1" = remove' "$c/prerm" && fail "agent prerm: stops only on remove, not before an upgrade"
grep -q "_dh_action=restart" "$work/control-collector/postinst" || fail "collector postinst: no restart after an upgrade"
# Units, as systemd reads them (ExecStart pointed at the built binaries: /usr/bin has none here).
for u in agent/wattflip-agent collector/wattflip-collector; do
  unit=$work/${u#*/}.service
  sed "s#^ExecStart=/usr/bin/#ExecStart=$bindir/#" "$repo/debian/$u.service" >"$unit"
  if ! systemd-analyze verify "$unit" >"$work/verify.out" 2>"$work/verify.err" || [ -s "$work/verify.err" ]; then
    cat "$work/verify.err" >&2
    fail "systemd-analyze verify ${u#*/}.service"
  fi
  score=$(systemd-analyze security --offline=true --no-pager "$unit" 2>&1 | grep -oE 'Overall exposure level for [^:]*: [0-9.]+' | sed 's/.*: //')
  echo "${u#*/}.service: exposure $score"
done

# --- 4. Debian 11: install ------------------------------------------------------------------
step "dpkg -i $v1 in a copy of $bullseye"
cp -a "$bullseye" "$root"
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount --bind /sys "$root/sys" && mounted+=("$root/sys") && mount -o remount,bind,ro "$root/sys"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"; }
grep -q '^11\.' "$root/etc/debian_version" || die "$bullseye is not Debian 11: $(cat "$root/etc/debian_version")"
cp "$work"/v1/*.deb "$work"/v2/*.deb "$root/var/tmp/"
# shellcheck disable=SC2046 # the two file names
in_root dpkg -i $(cd "$root" && ls var/tmp/wattflip-*_"$v1"_*.deb | sed 's#^#/#') >"$work/dpkg-1.log" 2>&1 \
  || { cat "$work/dpkg-1.log" >&2; die "dpkg -i $v1 failed in Debian 11"; }
for p in wattflip-agent wattflip-collector; do
  [ "$(in_root dpkg-query -W -f '${Status} ${Version}' "$p")" = "install ok installed $v1" ] \
    || fail "$p is not installed at $v1: $(in_root dpkg-query -W -f '${Status} ${Version}' "$p")"
done
in_root getent passwd wattflip | grep -q ':/nonexistent:/usr/sbin/nologin$' || fail "no system user wattflip"
[ "$(in_root stat -c '%U:%G %a' /etc/wattflip)" = "root:wattflip 750" ] || fail "/etc/wattflip is $(in_root stat -c '%U:%G %a' /etc/wattflip)"
for f in agent collector; do
  [ "$(in_root stat -c '%U:%G %a' /etc/wattflip/$f.toml)" = "root:wattflip 640" ] || fail "/etc/wattflip/$f.toml is $(in_root stat -c '%U:%G %a' /etc/wattflip/$f.toml)"
done
out=$(in_root wattflip-collector --version) || fail "wattflip-collector --version failed on Debian 11"
[ "$out" = "wattflip-collector $version" ] || fail "wattflip-collector --version printed \`$out\`"
echo "$out"
in_root wattflip-agent inventory >"$work/inventory.txt" 2>&1 || { cat "$work/inventory.txt" >&2; fail "wattflip-agent inventory failed on Debian 11"; }
head -n 5 "$work/inventory.txt"
# A probe on a file in the root (the main disk: direct IO works there, not on tmpfs).
in_root wattflip-agent probe --quick --target /var/tmp/wftest-scratch.dat --size 64MiB --out /var/tmp/wftest-probe \
  >"$work/probe.txt" 2>&1 || { tail -n 20 "$work/probe.txt" >&2; fail "wattflip-agent probe --quick failed on Debian 11"; }
grep -E '^12 runs \(0 unsupported\)' "$work/probe.txt" || fail "probe --quick: not 12 runs: $(tail -n 3 "$work/probe.txt")"
[ -s "$root/var/tmp/wftest-probe/report.json" ] || fail "probe --quick wrote no report.json"
rm -f "$root/var/tmp/wftest-scratch.dat"

# --- 5. upgrade with a guarded NVMe power state ---------------------------------------------
step "upgrade to $v2 with a guard state file present"
# Drive commands enabled by the operator (a changed conffile), with a test certificate so the
# config is complete; nvme-cli is the stand-in.
s=/var/lib/wftest-nvme
mkdir -p "$root$s"
install -m 0755 "$here/nvme-standin.sh" "$root/usr/local/sbin/nvme"
cp "$repo/tests/fixtures/captures/nvme-cli/ironic-python-agent-1.x-id-ctrl-wdc-sn730.json" "$root$s/id-ctrl.json"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=wftest-node \
  -addext subjectAltName=DNS:wftest-node -keyout "$root/etc/wattflip/agent.key" -out "$root/etc/wattflip/agent.pem" 2>/dev/null \
  || die "openssl could not make the test certificate"
cp "$root/etc/wattflip/agent.pem" "$root/etc/wattflip/ca.pem"
sed -i -e 's/^agent_id = .*/agent_id = "wftest-node"/' \
  -e 's#^nvme_cli = false#nvme_cli = true\nnvme_path = "/usr/local/sbin/nvme"#' "$root/etc/wattflip/agent.toml"
grep -q '^nvme_cli = true' "$root/etc/wattflip/agent.toml" || die "could not enable nvme_cli in the conffile"
# What a sweep leaves when SIGKILL ends it in PS2: the drive in PS2 and the guard's state file
# (agent/drives/src/restore.rs StateRecord; serial of the captured controller; its owner gone).
echo 2 >"$root$s/fid02"
gov=/var/lib/wattflip-agent/governor
state=$gov/wattflip-governor-nvme0-fid02.json
mkdir -p "$root$gov"
cat >"$root$state" <<'EOF'
{"format": 1, "device": "/dev/nvme0", "serial": "1951B3444502", "feature_id": 2, "original_value": 0, "original_state": 0, "created_unix_s": 1700000000, "pid": 4194000, "pid_start_ticks": 0}
EOF
mkdir -p "$root/var/lib/wattflip-agent/spool" && echo kept >"$root/var/lib/wattflip-agent/spool/wftest-batch"
: >"$root$s/calls"
# shellcheck disable=SC2046
in_root dpkg -i --force-confold $(cd "$root" && ls var/tmp/wattflip-*_"$v2"_*.deb | sed 's#^#/#') >"$work/dpkg-2.log" 2>&1 \
  || { cat "$work/dpkg-2.log" >&2; die "upgrade to $v2 failed"; }
for p in wattflip-agent wattflip-collector; do
  [ "$(in_root dpkg-query -W -f '${Version}' "$p")" = "$v2" ] || fail "$p not upgraded to $v2"
done
[ -f "$root$state" ] || fail "the upgrade removed the guard state file"
[ -f "$root/var/lib/wattflip-agent/spool/wftest-batch" ] || fail "the upgrade deleted the spool"
[ "$(cat "$root$s/fid02")" = 2 ] || fail "the drive's state changed during the upgrade: $(cat "$root$s/fid02")"
[ ! -s "$root$s/calls" ] || fail "the upgrade ran nvme-cli: $(cat "$root$s/calls")"
grep -q '^nvme_cli = true' "$root/etc/wattflip/agent.toml" || fail "the upgrade replaced the changed conffile"
# The new agent starts (postinst starts an enabled unit; `run` and every governor command call
# recover_records first): the original PS0 comes back, verified, and the state file goes.
in_root wattflip-agent governor show --device /dev/nvme0 --config /etc/wattflip/agent.toml --out /var/tmp/wftest-gov \
  >"$work/governor.txt" 2>&1 || { cat "$work/governor.txt" >&2; fail "the upgraded agent's governor show failed"; }
grep -o 'recovered after an unclean exit from [^ ]* (original state written back and verified)' "$work/governor.txt" \
  || fail "the upgraded agent did not report the restore: $(tail -n 5 "$work/governor.txt")"
[ "$(cat "$root$s/fid02")" = 0 ] || fail "the drive is in PS$(cat "$root$s/fid02") after the new agent started, not the original PS0"
[ ! -e "$root$state" ] || fail "the state file is still there after the restore"
grep -qx 'set-feature /dev/nvme0 --feature-id=2 --value=0' "$root$s/calls" || fail "no set-feature of the original value: $(cat "$root$s/calls")"
echo "restored: PS$(cat "$root$s/fid02"), state file removed"

# --- 6. remove keeps the spool, purge deletes it --------------------------------------------
step "dpkg -r, dpkg -P"
in_root dpkg -r wattflip-agent >"$work/dpkg-r.log" 2>&1 || { cat "$work/dpkg-r.log" >&2; fail "dpkg -r failed"; }
[ -f "$root/var/lib/wattflip-agent/spool/wftest-batch" ] || fail "dpkg -r deleted the spool"
[ -f "$root/etc/wattflip/agent.toml" ] || fail "dpkg -r deleted the conffile"
in_root dpkg -P wattflip-agent >"$work/dpkg-p.log" 2>&1 || { cat "$work/dpkg-p.log" >&2; fail "dpkg -P failed"; }
[ ! -e "$root/var/lib/wattflip-agent" ] || fail "dpkg -P left $(find "$root/var/lib/wattflip-agent" | head -n 3)"
[ ! -e "$root/etc/wattflip/agent.toml" ] || fail "dpkg -P left the conffile"
[ -f "$root/etc/wattflip/collector.toml" ] || fail "purging the agent removed the collector's config"

((${#failures[@]} == 0))
