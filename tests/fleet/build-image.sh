#!/usr/bin/env bash
# Builds the fleet test's guest image from this machine's own packages: Debian's kernel and its
# nvme + NIC modules, busybox (static), nvme-cli, smartctl, blkid and the wattflip-agent binary with the
# shared libraries ldd lists, plus tests/fleet/init and tests/fleet/scenario.sh.
#
#   tests/fleet/build-image.sh OUTDIR AGENT_BINARY
#
# Prints two lines, `KERNEL=<path>` and `INITRD=<path>`. The initramfs is cached in
# OUTDIR/<hash>/ keyed by a hash of every input (file contents, this script, the kernel release), so
# an unchanged agent boots from the cache; older images in OUTDIR are removed. Per-guest settings
# are not in it: the test appends a second small cpio (see tests/fleet/README.md).
#
# Environment: WATTFLIP_FLEET_KVER picks the kernel release (default: the newest one that has both
# /boot/vmlinuz-KVER and /lib/modules/KVER).
set -euo pipefail

die() { echo "build-image.sh: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: build-image.sh OUTDIR AGENT_BINARY"
outdir=$1
agent=$2
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$agent" ] || die "agent binary $agent is missing or not executable; build it with: cargo build -p wattflip-agent"

# --- inputs -----------------------------------------------------------------------------------
if [ -n "${WATTFLIP_FLEET_KVER:-}" ]; then
  kver=$WATTFLIP_FLEET_KVER
else
  kver=""
  for k in $(ls -1 /lib/modules 2>/dev/null | sort -V); do
    [ -f "/boot/vmlinuz-$k" ] && kver=$k
  done
fi
[ -n "$kver" ] || die "no kernel with both /boot/vmlinuz-KVER and /lib/modules/KVER; install Debian's linux-image-amd64 (bash tests/run.sh does)"
kernel=/boot/vmlinuz-$kver
[ -e "$kernel" ] || die "$kernel is missing; install linux-image-$kver (or pick another release with WATTFLIP_FLEET_KVER)"
[ -r "$kernel" ] || die "$kernel is not readable (Debian installs it mode 0600: run as root, or chmod a+r it)"
[ -d "/lib/modules/$kver" ] || die "/lib/modules/$kver is missing; install linux-image-$kver"

need_cmd() { command -v "$1" >/dev/null 2>&1 || die "$1 not found: $2"; }
need_cmd modprobe "install kmod"
need_cmd ldd "install libc-bin"
need_cmd gzip "install gzip"
need_cmd sha256sum "install coreutils"
busybox=""
for b in /bin/busybox /usr/bin/busybox; do
  # Only a static busybox runs in the guest without libraries.
  if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then busybox=$b; break; fi
done
[ -n "$busybox" ] || die "no static busybox in /bin or /usr/bin; install busybox-static"
nvme=$(command -v nvme 2>/dev/null || true)
[ -n "$nvme" ] || die "nvme not found; install nvme-cli"
smartctl=$(command -v smartctl 2>/dev/null || true)
[ -n "$smartctl" ] || die "smartctl not found; install smartmontools"
# The probe checks a device for signatures with libblkid's blkid before it writes (issue 16).
blkid=$(command -v blkid 2>/dev/null || { [ -x /sbin/blkid ] && echo /sbin/blkid; } || true)
[ -n "$blkid" ] || die "blkid not found; install util-linux"

# Kernel modules in load order: nvme (with crc-t10dif, crc64-rocksoft, t10-pi, nvme-core) and the
# NIC QEMU's user networking is given (-nic user,model=e1000). `modprobe --show-depends` prints
# `insmod PATH` lines in dependency order, repeating shared dependencies; keep the first of each.
modules=()
for m in nvme e1000; do
  deps=$(modprobe -S "$kver" --show-depends "$m" 2>&1) || die "modprobe -S $kver --show-depends $m failed: $deps"
  while read -r word path _; do
    [ "$word" = insmod ] || continue
    case " ${modules[*]:-} " in *" $path "*) continue ;; esac
    modules+=("$path")
  done <<<"$deps"
done
[ ${#modules[@]} -gt 0 ] || die "modprobe found no module files for nvme/e1000 in /lib/modules/$kver"

# Shared libraries and the dynamic loader of every dynamic binary (absolute paths from ldd).
libs_of() {
  ldd "$1" | awk '/=> \// { print $3 } /^[[:space:]]*\/[^ ]+ \(/ { print $1 }'
}
libs=()
for b in "$nvme" "$smartctl" "$blkid" "$agent"; do
  while read -r l; do
    [ -n "$l" ] || continue
    case " ${libs[*]:-} " in *" $l "*) continue ;; esac
    libs+=("$l")
  done < <(libs_of "$b")
done

inputs=("$0" "$here/init" "$here/scenario.sh" "$kernel" "$busybox" "$nvme" "$smartctl" "$blkid" "$agent" "${modules[@]}" "${libs[@]}")
hash=$( { echo "kver=$kver"; printf '%s\n' "${inputs[@]}"; cat "${inputs[@]}"; } | sha256sum | cut -c1-16)
dest=$outdir/$hash

if [ -f "$dest/initramfs.cpio.gz" ]; then
  echo "KERNEL=$kernel"
  echo "INITRD=$dest/initramfs.cpio.gz"
  exit 0
fi

# --- build ------------------------------------------------------------------------------------
mkdir -p "$outdir"
# Several test processes may build at once: one builds, the others wait and take its result.
exec 9>"$outdir/.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if [ -f "$dest/initramfs.cpio.gz" ]; then
  echo "KERNEL=$kernel"
  echo "INITRD=$dest/initramfs.cpio.gz"
  exit 0
fi
stage=$(mktemp -d "$outdir/.stage-XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/root
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc/wattflip,proc,sys,dev,tmp,run,var/lib/wattflip,root}

install_file() { # SRC DEST-IN-IMAGE [mode]
  mkdir -p "$root$(dirname "$2")"
  cp -L "$1" "$root$2"
  chmod "${3:-0755}" "$root$2"
}

install_file "$busybox" /bin/busybox
install_file "$nvme" /usr/sbin/nvme
install_file "$smartctl" /usr/sbin/smartctl
install_file "$blkid" /usr/sbin/blkid
# Debug builds carry hundreds of MB of debug info; the guest needs none of it.
if command -v strip >/dev/null 2>&1; then
  strip --strip-debug -o "$root/usr/bin/wattflip-agent" "$agent"
  chmod 0755 "$root/usr/bin/wattflip-agent"
else
  install_file "$agent" /usr/bin/wattflip-agent
fi
for l in "${libs[@]}"; do install_file "$l" "$l"; done

: >"$root/etc/modules.order"
for m in "${modules[@]}"; do
  rel=${m#/lib/modules/$kver/}
  case $m in
    *.ko) install_file "$m" "/lib/modules/$kver/$rel" 0644 ;;
    *.ko.xz) mkdir -p "$root/lib/modules/$kver/$(dirname "$rel")"; xz -dc "$m" >"$root/lib/modules/$kver/${rel%.xz}"; rel=${rel%.xz} ;;
    *.ko.zst) mkdir -p "$root/lib/modules/$kver/$(dirname "$rel")"; zstd -qdc "$m" >"$root/lib/modules/$kver/${rel%.zst}"; rel=${rel%.zst} ;;
    *.ko.gz) mkdir -p "$root/lib/modules/$kver/$(dirname "$rel")"; gzip -dc "$m" >"$root/lib/modules/$kver/${rel%.gz}"; rel=${rel%.gz} ;;
    *) die "unknown module file type: $m" ;;
  esac
  echo "/lib/modules/$kver/$rel" >>"$root/etc/modules.order"
done

install_file "$here/init" /init
install_file "$here/scenario.sh" /scenario.sh
echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"
echo "root:x:0:" >"$root/etc/group"
echo "$kver" >"$root/etc/wattflip/kernel-release"

# newc cpio, owned by root whatever the builder's uid, gzip -1: decompression time in the TCG
# guest matters more than a few MB.
(cd "$root" && find . | LC_ALL=C sort | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) | gzip -1 >"$stage/initramfs.cpio.gz"
mkdir -p "$stage/out"
mv "$stage/initramfs.cpio.gz" "$stage/out/"
printf '%s\n' "${inputs[@]}" >"$stage/out/inputs.txt"
# Only the newest image is worth keeping: every agent rebuild makes a new one.
find "$outdir" -mindepth 1 -maxdepth 1 -type d ! -name '.stage-*' -exec rm -rf {} +
mv "$stage/out" "$dest"
echo "KERNEL=$kernel"
echo "INITRD=$dest/initramfs.cpio.gz"
