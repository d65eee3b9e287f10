#!/usr/bin/env bash
# Real-run test of deploy/ansible (issues 9, 31).
#
#  1. ansible-lint (production profile, offline) and ansible-playbook --syntax-check;
#     the Debian packages, two versions from one glibc-2.28 build (tests/package/build.sh);
#  2. four hosts on this machine: network namespaces node1..node3 (agents) and collector1
#     (collector, InfluxDB, Grafana provisioning) on 10.213.57.0/24, bridged in a private switch
#     namespace; each runs its own sshd inside its own mount namespace with a private tmpfs over
#     the install root and overlays over /etc, /usr and /var, so every host has its own
#     filesystem view and its own dpkg database;
#  3. site.yml over SSH against them: packages (apt `deb:`), configs, certificates from a
#     private CA, the drive-commands drop-in where the config enables drive commands;
#  4. checks on what landed: key modes and owners, certificate identities, the CA key only on
#     the controller, `systemd-analyze verify` (any stderr fails) and the security scores;
#  5. starts InfluxDB, the collector and every agent inside their hosts exactly as the installed
#     units' ExecStart, User and Group say (the agents for a few samples only) and queries
#     InfluxDB for every agent id: the data went agent -> collector over mutual TLS -> InfluxDB;
#  6. per-host agent configs with [[probes]] rendered from the inventory (render.yml): jitter,
#     and drive-serial consent from each host's host_vars only;
#  7. a second site.yml run must report changed=0 everywhere;
#  8. one host's label changed in the inventory: a third run changes that host's config only and
#     notifies its restart handler only, and a fourth run changes nothing;
#  9. with the collector stopped and batches in every agent's spool, a fifth run upgrades every
#     host to the second package version (agents two at a time): the spools come through byte for
#     byte and, once the collector is back, every agent's ledger equals its points in InfluxDB.
# Nothing leaves the namespaces (no default route in them); everything is removed at the end,
# also on failure. Needs root (namespaces, mounts). Prints one PASS/FAIL line; exits non-zero on
# failure.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
here=$repo/tests/ansible
deploy=$repo/deploy/ansible
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
started=$(date +%s)
net=10.213.57
ansible_pin=(ansible==12.3.0 ansible-lint==26.10.1)
# Ansible's venv lives in the tool cache (outside the repository, like the packages' build), one
# per pin set, so a fresh clone does not reinstall it (pip of the pins took about a minute).
tool_cache=${XDG_CACHE_HOME:-$HOME/.cache}
venv=$tool_cache/wattflip-tools/ansible-venv-$(printf '%s\n' "${ansible_pin[@]}" | sha256sum | cut -c1-16)
agents=(node1 node2 node3)
hosts=(node1 node2 node3 collector1)
declare -A addr=([node1]=$net.1 [node2]=$net.2 [node3]=$net.3 [collector1]=$net.10)

failures=()
step() { printf '\n== %s (at %ss)\n' "$*" "$(($(date +%s) - started))"; } # with the seconds since the start
fail() { echo "FAIL: $*" >&2; failures+=("$*"); }
die() {
  fail "$*"
  exit 1
}

if [ "$(id -u)" -ne 0 ]; then
  echo "tests/ansible/run.sh: needs root (network namespaces and tmpfs mounts); run it as root or with sudo" >&2
  echo "ansible real-run test: FAIL (not root)"
  exit 1
fi

# --- what the test needs, from Debian and PyPI --------------------------------------------
packages=()
[ -x /usr/sbin/sshd ] || packages+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || packages+=(openssh-client)
command -v ip >/dev/null 2>&1 || packages+=(iproute2)
command -v nsenter >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1 || packages+=(util-linux)
command -v influxd >/dev/null 2>&1 || packages+=(influxdb)
command -v systemd-analyze >/dev/null 2>&1 || packages+=(systemd)
command -v curl >/dev/null 2>&1 || packages+=(curl)
command -v objcopy >/dev/null 2>&1 || packages+=(binutils)
command -v flock >/dev/null 2>&1 || packages+=(util-linux)
/usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || packages+=(python3-venv)
# The managed hosts make their keys and CSRs with Debian's python3 (community.crypto).
/usr/bin/python3 -c 'import cryptography' >/dev/null 2>&1 || packages+=(python3-cryptography)
if ((${#packages[@]})); then
  echo "tests/ansible/run.sh: installing ${packages[*]}"
  apt-get update -qq
  # policy-rc.d or no systemd keeps the packages' own services (sshd, influxdb) from starting.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
fi
mkdir -p "$(dirname "$venv")"
exec 8>"$venv.lock" # one install at a time; a later run waits for it
flock -w 900 8 || { echo "tests/ansible/run.sh: waited 15 min for $venv.lock" >&2; exit 1; }
if ! "$venv/bin/ansible-playbook" --version >/dev/null 2>&1 || ! "$venv/bin/ansible-lint" --version >/dev/null 2>&1; then
  echo "tests/ansible/run.sh: installing ${ansible_pin[*]} into $venv"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${ansible_pin[@]}"
fi
exec 8>&-
export PATH=$venv/bin:$PATH

# --- one run at a time: the subnet and its route in the root namespace are fixed ------------
mkdir -p "$target"
exec 9>"$target/ansible-test.lock"
flock -w 900 9 || die "another tests/ansible/run.sh holds $target/ansible-test.lock for 15 min"

work=$(mktemp -d /tmp/wattflip-ansible.XXXXXX)
chmod 0711 "$work" # the services run as a service user and must reach the install root below it
root=$work/root          # the install root; a private tmpfs on every host
tag=wfa$$                # names of this run's namespaces and links
sw=$tag-sw
declare -A sshd_pid=()
service_pids=()

cleanup() {
  local rc=$?
  set +e
  for p in "${service_pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${service_pids[@]}"; do wait "$p" 2>/dev/null; done
  # Ansible's SSH master connections (ControlPersist) would keep sessions open in the hosts.
  for s in "$work"/cp-*; do [ -S "$s" ] && ssh -o ControlPath="$s" -O exit wattflip-test 2>/dev/null; done
  # Everything still running inside this run's namespaces was started by this run: sshd, its
  # sessions, services. Stop it so no process outlives the test (and no tmpfs stays mounted).
  for sig in TERM KILL; do
    for h in "${hosts[@]}"; do
      ip netns pids "$tag-$h" 2>/dev/null | xargs -r kill -s "$sig" 2>/dev/null
    done
    for h in "${hosts[@]}"; do [ -n "${sshd_pid[$h]:-}" ] && wait "${sshd_pid[$h]}" 2>/dev/null; done
    sleep 0.3
  done
  # Deleting the namespaces removes their veths, the bridge, the controller's link and its route;
  # the tmpfs mounts go with the last process of each mount namespace.
  for h in "${hosts[@]}"; do ip netns del "$tag-$h" 2>/dev/null; done
  ip netns del "$sw" 2>/dev/null
  ip link del "$tag" 2>/dev/null
  # The logs (playbook runs with task timings, services, systemd-analyze) outlive the run.
  rm -rf "$target/ansible-test-logs"
  cp -r "$work/logs" "$target/ansible-test-logs" 2>/dev/null && echo "logs: $target/ansible-test-logs"
  rm -rf "$work"
  local secs=$(($(date +%s) - started))
  if [ "$rc" -eq 0 ] && ((${#failures[@]} == 0)); then
    echo "ansible real-run test: PASS (${#hosts[@]} hosts, ${secs}s)"
  else
    echo "ansible real-run test: FAIL (${#failures[@]} check(s): ${failures[*]:-exit $rc}; ${secs}s)"
    [ "$rc" -ne 0 ] || rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$work/logs" "$root" "$work/render"
# Nothing of Ansible lands in the home directory: its state, temp files (also for tasks on the
# controller) and caches stay in the work directory.
# (The packages' build keeps its tools and target dir in the real tool cache: saved above.)
export ANSIBLE_HOME=$work/ansible-home ANSIBLE_LOCAL_TEMP=$work/ansible-home/tmp XDG_CACHE_HOME=$work/cache
export ANSIBLE_REMOTE_TEMP=$work/ansible-home/remote-tmp
export ANSIBLE_CONFIG=$deploy/ansible.cfg ANSIBLE_ROLES_PATH=$deploy/roles ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1
export ANSIBLE_DISPLAY_SKIPPED_HOSTS=true
# Per-task timings in the logs: where the wall time goes.
export ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks

# --- 1. lint and syntax ---------------------------------------------------------------------
step "ansible-lint --offline --profile production"
(cd "$deploy" && ansible-lint --offline --profile production --nocolor) >"$work/logs/lint.log" 2>&1 \
  || { cat "$work/logs/lint.log"; fail "ansible-lint"; }
tail -n 1 "$work/logs/lint.log"
step "ansible-playbook --syntax-check"
ansible-playbook -i "$deploy/inventory/example.ini" --syntax-check "$deploy/site.yml" >/dev/null || fail "syntax-check site.yml"
ansible-playbook -i "$here/inventory/hosts.ini" --syntax-check "$here/render.yml" >/dev/null || fail "syntax-check render.yml"
ansible-inventory -i "$deploy/inventory/example.ini" --graph >/dev/null || fail "example inventory"
# Consent to destroy a drive's data is per host: a serial in group_vars or an inventory file
# would consent for every host of the group.
if grep -rn 'destroy_consent' "$deploy/group_vars" "$deploy/inventory" "$here/inventory/hosts.ini" \
  | grep -v '^\S*:[0-9]*:\s*#'; then
  fail "destroy_consent outside host_vars"
fi
((${#failures[@]} == 0)) || exit 1

# --- packages: tests/package/build.sh (glibc 2.28, two versions from one build) ---------------
step "packages"
built=$(XDG_CACHE_HOME=$tool_cache bash "$repo/tests/package/build.sh") || die "tests/package/build.sh failed (above)"
mkdir -p "$work/debs"
cp "$(tail -n 1 <<<"$built")"/v1/*.deb "$(tail -n 1 <<<"$built")"/v2/*.deb "$work/debs/"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n 1)
v1=$version-1
v2=$version-2
ls "$work/debs"

# --- 2. the hosts ---------------------------------------------------------------------------
step "hosts: ${hosts[*]} on $net.0/24"
if [ -n "$(ip route show "$net.0/24")" ] || grep -q " $net\." <(ip -o addr show); then
  die "$net.0/24 is already in use on this machine; change \`net\` in tests/ansible/run.sh"
fi
mkdir -p /run/sshd # sshd refuses to start without its privilege separation directory
ssh-keygen -q -t ed25519 -N '' -C wattflip-ansible-test -f "$work/client_key"
: >"$work/known_hosts"
ip netns add "$sw"
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
# The controller's leg into the switch: a /24 on this side, so the controller reaches every host.
ip link add "$tag" type veth peer name ctl netns "$sw"
ip -n "$sw" link set ctl master br0 up
ip addr add "$net.254/24" dev "$tag"
ip link set "$tag" up
for h in "${hosts[@]}"; do
  ns=$tag-$h
  mkdir -p "$work/$h"
  ip netns add "$ns"
  ip -n "$sw" link add "$h" type veth peer name eth0 netns "$ns"
  ip -n "$sw" link set "$h" master br0 up
  ip -n "$ns" addr add "${addr[$h]}/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ssh-keygen -q -t ed25519 -N '' -C "$h" -f "$work/$h/host_key"
  echo "${addr[$h]} $(cut -d' ' -f1,2 "$work/$h/host_key.pub")" >>"$work/known_hosts"
  cat >"$work/$h/sshd_config" <<EOF
ListenAddress ${addr[$h]}:22
HostKey $work/$h/host_key
PidFile $work/$h/sshd.pid
AuthorizedKeysFile $work/client_key.pub
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
Subsystem sftp internal-sftp
EOF
  # `ip netns exec` gives sshd its own mount namespace; what is mounted there is seen by this
  # sshd and everything it starts (Ansible's modules, and the services below) only: a tmpfs over
  # the install root of the influxdb and grafana roles, and overlays (upper layer on a tmpfs)
  # over /etc, /usr and /var, so each host has its own dpkg database and the packages' files,
  # service user (the package's useradd) and state land in that host only, never on this machine.
  mkdir -p "$work/$h/ovl"
  ip netns exec "$ns" sh -c "mount -t tmpfs -o mode=0755,size=1g $tag-$h '$root' \
    && mount -t tmpfs -o mode=0755,size=1g $tag-$h-ovl '$work/$h/ovl' \
    && for d in etc usr var; do mkdir '$work/$h/ovl/'\$d.up '$work/$h/ovl/'\$d.wk \
      && mount -t overlay $tag-$h-\$d -o lowerdir=/\$d,upperdir='$work/$h/ovl/'\$d.up,workdir='$work/$h/ovl/'\$d.wk /\$d || exit 1; done \
    && { getent group grafana >/dev/null || groupadd --system grafana; } \
    && exec /usr/sbin/sshd -D -e -f '$work/$h/sshd_config'" \
    >"$work/logs/sshd-$h.log" 2>&1 9>&- &
  sshd_pid[$h]=$!
done
for h in "${hosts[@]}"; do
  for _ in $(seq 100); do
    timeout 1 bash -c "exec 3<>/dev/tcp/${addr[$h]}/22" 2>/dev/null && continue 2
    kill -0 "${sshd_pid[$h]}" 2>/dev/null || die "sshd of $h exited: $(cat "$work/logs/sshd-$h.log")"
    sleep 0.1
  done
  die "sshd of $h does not listen on ${addr[$h]}:22"
done

# Runs a command inside host $1's namespaces (its network and its private install root).
on() {
  local h=$1
  shift
  nsenter -t "${sshd_pid[$h]}" -m -n -- "$@"
}

# Settings of this run: everything under the per-host tmpfs, no systemd, InfluxDB on the
# collector host's address.
dashboards_src=$repo/dashboards
compgen -G "$dashboards_src/*.json" >/dev/null || dashboards_src=$here/fixtures/dashboards
cat >"$work/vars.yml" <<EOF
ansible_user: root
ansible_become: false
ansible_python_interpreter: /usr/bin/python3
ansible_ssh_private_key_file: $work/client_key
ansible_ssh_common_args: >-
  -o UserKnownHostsFile=$work/known_hosts -o StrictHostKeyChecking=yes
  -o ControlMaster=auto -o ControlPersist=60s -o ControlPath=$work/cp-%C
ansible_remote_tmp: $root/.ansible/tmp
wattflip_root: $root
wattflip_manage_services: false
# The packages of tests/package/build.sh: the first version, then the upgrade (step 9).
wattflip_package_dir: $work/debs
wattflip_package_version: $v1
wattflip_pki_dir: $work/pki
# Two agents, then one: the rolling update runs in two batches.
wattflip_agent_serial: 2
wattflip_agent_sampling_interval: 200ms
# RAPL counters of a two-socket fixture: the namespaces have no powercap of their own.
wattflip_agent_sysfs_root: $repo/tests/fixtures/sysfs/two-sockets/sys
wattflip_agent_hwmon: false
influxdb_install_package: false
influxdb_http_bind_address: ${addr[collector1]}:8086
grafana_install_package: false
grafana_group: grafana
grafana_dashboards_src: $dashboards_src
EOF

# --- 3. the deployment ----------------------------------------------------------------------
playbook() { # [more ansible-playbook args] (without the lock's fd 9: SSH masters outlive a playbook)
  ansible-playbook -i "$here/inventory/hosts.ini" "$@" -e "@$work/vars.yml" "$deploy/site.yml" 9>&-
}
recap_ok() { # log, what: every host ok, none failed or unreachable (and changed=0 if asked)
  local log=$1 want_unchanged=$2 line h n=0
  for h in localhost "${hosts[@]}"; do
    line=$(grep -E "^$h +:" "$log" | tail -n 1) || { fail "no recap line for $h"; continue; }
    n=$((n + 1))
    echo "$line" | grep -qE 'unreachable=0 +failed=0' || fail "$h: $line"
    if [ "$want_unchanged" = yes ]; then echo "$line" | grep -q 'changed=0 ' || fail "not idempotent: $line"; fi
  done
}
step "site.yml, first run"
t0=$(date +%s)
playbook >"$work/logs/site-1.log" 2>&1 || {
  grep -E 'fatal|FAILED|ERROR|msg' "$work/logs/site-1.log" | head -n 30 >&2
  die "site.yml failed (first run)"
}
sed -n '/PLAY RECAP/,$p' "$work/logs/site-1.log"
echo "first run: $(($(date +%s) - t0))s"
recap_ok "$work/logs/site-1.log" no
batches=$(grep -c '^PLAY \[Agents, a batch at a time\]' "$work/logs/site-1.log" || true)
[ "$batches" -eq 2 ] || fail "rolling update: $batches agent batches, expected 2 (serial 2 of 3 agents)"
grep -q 'RUNNING HANDLER \[wattflip_agent : Restart wattflip-agent\]' "$work/logs/site-1.log" \
  || fail "the agent's restart handler was not notified by the first install"
grep -q 'RUNNING HANDLER \[wattflip_collector : Restart wattflip-collector\]' "$work/logs/site-1.log" \
  || fail "the collector's restart handler was not notified by the first install"

# --- 4. what landed -------------------------------------------------------------------------
step "files, modes, certificates, units"
expect_stat() { # host path "mode user group"
  local got
  got=$(on "$1" stat -c '%a %U %G' "$2" 2>&1) || { fail "$1: $2 missing"; return; }
  [ "$got" = "$3" ] || fail "$1: $2 is $got, expected $3"
}
san_of() { on "$1" openssl x509 -noout -ext subjectAltName -in "$2" | tail -n +2 | tr -d ' '; }
for h in "${agents[@]}"; do
  d=/etc/wattflip
  expect_stat "$h" "$d/agent.key" "600 wattflip wattflip"
  expect_stat "$h" "$d/agent.toml" "640 root wattflip"
  expect_stat "$h" "$d" "750 root wattflip"
  expect_stat "$h" /var/lib/wattflip-agent "750 wattflip wattflip"
  [ "$(on "$h" dpkg-query -W -f '${Status} ${Version}' wattflip-agent)" = "install ok installed $v1" ] \
    || fail "$h: wattflip-agent $v1 is not installed: $(on "$h" dpkg-query -W -f '${Status} ${Version}' wattflip-agent 2>&1)"
  [ "$(san_of "$h" "$d/agent.pem")" = "DNS:$h" ] || fail "$h: agent certificate SAN is $(san_of "$h" "$d/agent.pem"), expected DNS:$h"
  on "$h" openssl verify -CAfile "$d/ca.pem" "$d/agent.pem" >/dev/null || fail "$h: agent certificate does not verify against ca.pem"
  grep -q "^agent_id = \"$h\"" <(on "$h" cat "$d/agent.toml") || fail "$h: agent_id is not $h"
  # The governor's restore state must be writable under ProtectSystem=strict: inside the unit's
  # StateDirectory (under the install root here), not the agent's default /var/lib/wattflip.
  state=$(on "$h" sed -n 's/^StateDirectory=//p' /usr/lib/systemd/system/wattflip-agent.service)
  got=$(on "$h" sed -n '/^\[drives\]/,/^\[/s/^state_dir = //p' "$d/agent.toml")
  [ "$state" = wattflip-agent ] && [ "$got" = "\"/var/lib/$state/governor\"" ] \
    || fail "$h: [drives] state_dir is ${got:-unset}, expected \"/var/lib/$state/governor\" (StateDirectory=$state)"
  # Drive commands (CAP_SYS_ADMIN, the package's drop-in) exactly where the config enables them:
  # node1 and node3 have a probe on a block device (host_vars), node2 none.
  want=true
  [ "$h" = node2 ] && want=false
  grep -q "^nvme_cli = $want\$" <(on "$h" cat "$d/agent.toml") || fail "$h: nvme_cli is not $want in its config"
  dropin=/etc/systemd/system/wattflip-agent.service.d/drive-commands.conf
  if [ "$want" = true ]; then
    [ "$(on "$h" readlink "$dropin")" = /usr/share/wattflip-agent/drive-commands.conf ] || fail "$h: no drive-commands drop-in"
  else
    on "$h" test ! -e "$dropin" || fail "$h: a drive-commands drop-in without drive commands in the config"
  fi
done
grep -q '^rack = "r2"' <(on node3 cat /etc/wattflip/agent.toml) || fail "node3: rack label from the inventory missing"
grep -q '^role = "metadata"' <(on node3 cat /etc/wattflip/agent.toml) || fail "node3: role label from the inventory missing"
d=/etc/wattflip
expect_stat collector1 "$d/collector.key" "600 wattflip wattflip"
expect_stat collector1 "$d/collector.toml" "640 root wattflip"
[ "$(san_of collector1 "$d/collector.pem")" = "DNS:collector1,IPAddress:${addr[collector1]}" ] \
  || fail "collector1: server certificate SAN is $(san_of collector1 "$d/collector.pem")"
for h in "${hosts[@]}"; do
  found=$(on "$h" find "$root" /etc/wattflip -name 'ca.key' -o -name '*.csr' | head -n 3)
  [ -z "$found" ] || fail "$h: CA key or CSR on a managed host: $found"
done
[ "$(stat -c '%a' "$work/pki/ca.key")" = 600 ] || fail "controller: ca.key is not mode 0600"
[ "$(stat -c '%a' "$work/pki")" = 700 ] || fail "controller: the CA directory is not mode 0700"
# Each host saw only its own tmpfs: node2 has no collector, the collector no agent.
on node2 test ! -e /etc/wattflip/collector.toml || fail "node2 sees the collector's files: hosts are not private"
on collector1 test ! -e /etc/wattflip/agent.toml || fail "collector1 sees an agent's files: hosts are not private"
# Nothing was installed on this machine itself.
{ [ ! -e /etc/wattflip ] && ! dpkg-query -W wattflip-agent >/dev/null 2>&1; } || fail "the packages reached this machine"
ndash=$(find "$dashboards_src" -maxdepth 1 -name '*.json' | wc -l)
ngot=$(on collector1 find "$root/var/lib/grafana/dashboards/wattflip" -name '*.json' | wc -l)
[ "$ndash" = "$ngot" ] || fail "grafana: $ngot dashboards provisioned, $ndash in $dashboards_src"
# The provisioning files are the repository's dashboards/provisioning ones, compared as YAML, with
# exactly this deployment's values replaced: the datasource's url (the influxdb host), database,
# time interval (the agents' sampling interval) and no credentials (none set here); the
# provider's path under the install root.
for f in datasources dashboards; do
  on collector1 cat "$root/etc/grafana/provisioning/$f/wattflip.yaml" >"$work/logs/grafana-$f.yaml" \
    || fail "grafana: $f provisioning file missing"
done
"$venv/bin/python3" - "$repo/dashboards/provisioning" "$work/logs" "http://${addr[collector1]}:8086" "$root" <<'EOF' \
  || fail "grafana: provisioning differs from dashboards/provisioning"
import sys, yaml, pathlib
src, logs, url, root = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4]
load = lambda p: yaml.safe_load(p.read_text())
want = load(src / "datasources/wattflip.yaml")
ds = want["datasources"][0]
ds.pop("user", None)
ds.pop("secureJsonData", None)
ds["url"] = url
ds["jsonData"].update(dbName="wattflip", timeInterval="200ms")
bad = []
if load(logs / "grafana-datasources.yaml") != want:
    bad.append(f"datasource: {load(logs / 'grafana-datasources.yaml')} != {want}")
if ds["uid"] != "wattflip-influx":
    bad.append(f"datasource uid {ds['uid']}, the dashboards use wattflip-influx")
want = load(src / "dashboards/wattflip.yaml")
want["providers"][0]["options"]["path"] = f"{root}/var/lib/grafana/dashboards/wattflip"
if load(logs / "grafana-dashboards.yaml") != want:
    bad.append(f"provider: {load(logs / 'grafana-dashboards.yaml')} != {want}")
for b in bad:
    print("FAIL:", b, file=sys.stderr)
print("grafana: provisioning = dashboards/provisioning with this deployment's url, database, interval, path", "wrong" if bad else "ok")
sys.exit(1 if bad else 0)
EOF

# systemd-analyze inside the host (the units name binaries under its private root). verify only
# warns about unknown keys and bad values (exit 0), so any output on stderr fails.
declare -A score=()
for u in node1:wattflip-agent collector1:wattflip-collector; do
  h=${u%%:*} unit=/usr/lib/systemd/system/${u#*:}.service
  if ! on "$h" systemd-analyze verify "$unit" >"$work/logs/verify-${u#*:}.out" 2>"$work/logs/verify-${u#*:}.err" \
    || [ -s "$work/logs/verify-${u#*:}.err" ]; then
    cat "$work/logs/verify-${u#*:}.err" >&2
    fail "systemd-analyze verify ${u#*:}.service"
  fi
  on "$h" systemd-analyze security --offline=true --no-pager "$unit" >"$work/logs/security-${u#*:}.log" 2>&1 || true
  score[${u#*:}]=$(grep -oE 'Overall exposure level for [^:]*: [0-9.]+ [A-Z]+' "$work/logs/security-${u#*:}.log" | sed 's/.*: //')
  echo "${u#*:}.service: systemd-analyze security --offline=true: ${score[${u#*:}]:-none}"
done
# Regressions in hardening fail the test (docs/deployment.md records the scores).
for u in wattflip-agent:3.0 wattflip-collector:2.0; do
  s=${score[${u%%:*}]:-}
  [ -n "$s" ] || { fail "no security score for ${u%%:*}"; continue; }
  awk -v s="${s%% *}" -v m="${u#*:}" 'BEGIN { exit !(s <= m) }' || fail "${u%%:*}: exposure ${s} above ${u#*:}"
done
# node1's unit with the drive-commands drop-in, as systemd merges them.
on node1 cat /usr/lib/systemd/system/wattflip-agent.service "$dropin" >"$work/logs/agent-unit-node1.txt"
grep -q '^DeviceAllow=char-nvme rw$' "$work/logs/agent-unit-node1.txt" || fail "node1: no DeviceAllow for NVMe with drive commands"
grep -q '^AmbientCapabilities=CAP_SYS_ADMIN' "$work/logs/agent-unit-node1.txt" || fail "node1: no CAP_SYS_ADMIN with drive commands"
on node2 grep -qE '^[A-Za-z]+=.*CAP_SYS_ADMIN' /usr/lib/systemd/system/wattflip-agent.service && fail "agent unit: CAP_SYS_ADMIN without drive commands"
on node1 grep -q '^PrivateDevices' /usr/lib/systemd/system/wattflip-agent.service && fail "agent unit: PrivateDevices hides /dev/nvme*"

# --- 5. the services, as their units start them ---------------------------------------------
step "InfluxDB, collector and agents, started as the units say"
unit_value() { on "$1" sed -n "s/^$3=//p" "/usr/lib/systemd/system/$2.service" | tail -n 1; }
unit_cmd() { # host unit: sets `cmd` to the unit's ExecStart run as its User and Group in the host
  local h=$1 unit=$2 exec user group
  exec=$(unit_value "$h" "$unit" ExecStart)
  user=$(unit_value "$h" "$unit" User)
  group=$(unit_value "$h" "$unit" Group)
  [ -n "$exec" ] && [ -n "$user" ] && [ -n "$group" ] || die "$h: $unit.service lacks ExecStart, User or Group"
  # ExecStart is a command line: split into words as systemd does (no quoting in these units).
  read -r -a cmd <<<"$exec"
  cmd=(nsenter -t "${sshd_pid[$h]}" -m -n -- setpriv --reuid="$user" --regid="$group" --clear-groups --inh-caps=-all -- "${cmd[@]}")
}
# InfluxDB's own unit comes with Debian's package; as it does: influxd -config, as influxdb.
nsenter -t "${sshd_pid[collector1]}" -m -n -- setpriv --reuid=influxdb --regid=influxdb --clear-groups -- \
  influxd -config "$root/etc/influxdb/influxdb.conf" >"$work/logs/influxd.log" 2>&1 9>&- &
service_pids+=($!)
influx=http://${addr[collector1]}:8086
for _ in $(seq 150); do
  curl -fsS "$influx/ping" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "$influx/ping" >/dev/null 2>&1 || die "influxd (role config) did not answer on $influx/ping"
unit_cmd collector1 wattflip-collector
echo "collector1: ${cmd[*]}"
collector_cmd=("${cmd[@]}")
RUST_LOG=info "${cmd[@]}" >"$work/logs/collector.log" 2>&1 9>&- &
collector_pid=$!
service_pids+=($!)
# Ready when it says so (a TCP probe would be logged as a refused TLS handshake).
plain() { sed 's/\x1b\[[0-9;]*m//g' "$@"; } # the services' logs without colour codes
for _ in $(seq 150); do
  grep -q 'collector serving listen=' <(plain "$work/logs/collector.log") && break
  sleep 0.2
done
grep -q 'collector serving listen=0.0.0.0:50051 tls="mutual"' <(plain "$work/logs/collector.log") \
  || die "the collector is not serving mutual TLS on :50051: $(plain "$work/logs/collector.log" | tail -n 3)"
declare -A agent_pid=()
for h in "${agents[@]}"; do
  unit_cmd "$h" wattflip-agent
  echo "$h: ${cmd[*]} --samples 15"
  # A short run: 15 samples, then the agent exits once all of them are acknowledged.
  # With the ledger lines (one per batch stored in the spool; step 9 adds them up).
  RUST_LOG=info,wattflip::ledger=debug timeout 90 "${cmd[@]}" --samples 15 >"$work/logs/agent-$h.log" 2>&1 9>&- &
  agent_pid[$h]=$!
done
for h in "${agents[@]}"; do
  if wait "${agent_pid[$h]}"; then
    tail -n 1 "$work/logs/agent-$h.log"
  else
    tail -n 5 "$work/logs/agent-$h.log" >&2
    fail "agent $h did not finish with every batch acknowledged"
  fi
done
query() {
  curl -fsS -G "$influx/query" --data-urlencode db=wattflip --data-urlencode "q=$1" |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)["results"][0]; print(r["series"][0]["values"][0][1] if "series" in r else 0)'
}
for h in "${agents[@]}"; do
  n=$(query "SELECT count(watts) FROM power WHERE host = '$h' AND time > now() - 10m") || n=error
  [ "$n" != error ] && [ "$n" -gt 0 ] || fail "InfluxDB has no power samples from agent $h ($n)"
  labels=$(query "SELECT count(watts) FROM power WHERE host = '$h' AND site = 'testlab' AND rack =~ /^r[12]$/ AND time > now() - 10m") || labels=0
  [ "$labels" = "$n" ] || fail "agent $h: $labels of $n samples carry the inventory labels"
  echo "InfluxDB: $n power samples from $h"
done
# Refused handshakes, streams or writes are logged as warnings or errors (an agent that exits
# after its last acknowledgement ends its stream at INFO level).
bad=$(plain "$work/logs/collector.log" | grep -E '^\S+ +(WARN|ERROR) ' | head -n 5 || true)
if [ -n "$bad" ]; then
  echo "$bad" >&2
  fail "the collector logged warnings or errors"
fi

# The identity is the certificate's: node1's certificate claiming to be node2 is refused.
on node1 sh -c "sed -e 's/^agent_id = .*/agent_id = \"node2\"/' -e 's|^dir = .*|dir = \"$root/forged-spool\"|' \
  /etc/wattflip/agent.toml >'$root/forged.toml' && chmod 0644 '$root/forged.toml' && mkdir -m 0777 '$root/forged-spool'"
unit_cmd node1 wattflip-agent
for i in "${!cmd[@]}"; do [ "${cmd[$i]}" != /etc/wattflip/agent.toml ] || cmd[i]=$root/forged.toml; done
if timeout 8 "${cmd[@]}" --samples 2 >"$work/logs/agent-forged.log" 2>&1 9>&-; then
  fail "an agent claiming another agent's id with its own certificate was accepted"
elif ! grep -q "hello.agent_id: \`node2\` is not the agent id of the client certificate (\`node1\`)" <(plain "$work/logs/collector.log"); then
  fail "the collector did not refuse node1's certificate claiming node2"
else
  echo "collector: refused node1's certificate claiming to be node2"
fi

# --- 6. per-host probe schedules and consent ------------------------------------------------
step "render.yml: [[probes]] and consent per host"
ansible-playbook -i "$here/inventory/hosts.ini" -e "@$deploy/group_vars/all.yml" -e "@$deploy/group_vars/agents.yml" \
  -e "render_dir=$work/render render_group=root" -c local "$here/render.yml" >"$work/logs/render.log" 2>&1 \
  || { tail -n 20 "$work/logs/render.log" >&2; fail "render.yml"; }
/usr/bin/python3 - "$work/render" <<'EOF' || fail "rendered probe schedules"
import sys, tomllib, pathlib
d = pathlib.Path(sys.argv[1])
cfg = {h: tomllib.loads((d / f"{h}.toml").read_text()) for h in ("node1", "node2", "node3")}
consent = {"node1": ["WFTEST-NODE1-A", "WFTEST-NODE1-B"], "node2": [], "node3": ["WFTEST-NODE3-A"]}
own = {"node1": "weekly-nvme1", "node3": "weekly-nvme2"}
bad = []
for h, c in cfg.items():
    probes = {p["name"]: p for p in c.get("probes", [])}
    group = probes.get("nightly-granularity")
    if not group or group["jitter"] != "20m" or group["schedule"] != "0 30 2 * * *":
        bad.append(f"{h}: the group_vars probe with jitter 20m is missing or wrong: {group}")
    elif "destroy_consent" in group:
        bad.append(f"{h}: a scratch-file probe carries destroy_consent")
    if h in own:
        p = probes.get(own[h])
        if not p or p.get("destroy_consent") != consent[h] or not p["target"].startswith("/dev/"):
            bad.append(f"{h}: host probe {own[h]} lacks this host's consent {consent[h]}: {p}")
    elif len(probes) != 1:
        bad.append(f"{h}: expected only the group probe, got {sorted(probes)}")
    text = (d / f"{h}.toml").read_text()
    for other, serials in consent.items():
        if other != h and any(s in text for s in serials):
            bad.append(f"{h}: carries {other}'s drive serials")
    if c["labels"].get("site") != "testlab":
        bad.append(f"{h}: labels {c['labels']}")
for b in bad:
    print("FAIL:", b, file=sys.stderr)
print(f"rendered {len(cfg)} agent configs: probes, jitter and consent per host", "wrong" if bad else "ok")
sys.exit(1 if bad else 0)
EOF

# --- 7. idempotence -------------------------------------------------------------------------
step "site.yml, second run (idempotence)"
t0=$(date +%s)
playbook >"$work/logs/site-2.log" 2>&1 || {
  grep -E 'fatal|FAILED|ERROR' "$work/logs/site-2.log" | head -n 20 >&2
  die "site.yml failed (second run)"
}
sed -n '/PLAY RECAP/,$p' "$work/logs/site-2.log"
echo "second run: $(($(date +%s) - t0))s"
recap_ok "$work/logs/site-2.log" yes
if grep -E '^changed:' "$work/logs/site-2.log" >&2; then fail "second run changed something"; fi
if grep -E '^RUNNING HANDLER' "$work/logs/site-2.log" >&2; then fail "second run notified a handler"; fi

# --- 8. a change on one host restarts that host only ----------------------------------------
# The test runs no systemd (wattflip_manage_services: false), so the agent's handlers skip the
# systemd restart and print which host needs one: that line is the observable restart.
step "site.yml, third run: node2's role label changed"
# A later inventory source overrides node2's `role` alone; hosts.ini and its host_vars stay as is.
printf '[agents]\nnode2 role=archive\n' >"$work/node2-role.ini"
playbook -i "$work/node2-role.ini" >"$work/logs/site-3.log" 2>&1 || {
  grep -E 'fatal|FAILED|ERROR' "$work/logs/site-3.log" | head -n 20 >&2
  die "site.yml failed (third run)"
}
sed -n '/PLAY RECAP/,$p' "$work/logs/site-3.log"
recap_ok "$work/logs/site-3.log" no
for h in localhost "${hosts[@]}"; do
  want=0
  [ "$h" = node2 ] && want=1
  grep -qE "^$h +: ok=[0-9]+ +changed=$want " "$work/logs/site-3.log" \
    || fail "third run: $h should have changed=$want: $(grep -E "^$h +:" "$work/logs/site-3.log")"
done
# Each `changed:` with the task it belongs to: only node2's config.
changes=$(awk '/^TASK \[/ { sub(/ \*+$/, ""); task = $0 } /^changed: / { print task " " $1 " " $2 }' "$work/logs/site-3.log")
[ "$changes" = "TASK [wattflip_agent : Install the agent configuration (checked by the agent itself before it is replaced)] changed: [node2]" ] \
  || fail "third run: expected only node2's agent config to change, got: ${changes:-nothing}"
# Each handler result with its handler: node2's, and no other host's or service's.
handled=$(awk '/^RUNNING HANDLER \[/ { sub(/ \*+$/, ""); h = $0; next } /^(TASK|PLAY)/ { h = "" }
  h != "" && /^(ok|changed|skipping|fatal): \[/ { print h " " $1 " " $2 }' "$work/logs/site-3.log")
want_handled="RUNNING HANDLER [wattflip_agent : Restart wattflip-agent] skipping: [node2]
RUNNING HANDLER [wattflip_agent : Report the restart wattflip-agent needs] ok: [node2]"
[ "$handled" = "$want_handled" ] || fail "third run: handlers expected for node2 only:
$want_handled
got:
${handled:-none}"
grep -q '"msg": "wattflip-agent.service on node2 needs a restart to apply the change' "$work/logs/site-3.log" \
  || fail "third run: the handler did not report node2's pending restart"
grep -q '^role = "archive"' <(on node2 cat /etc/wattflip/agent.toml) || fail "node2: the changed role label is not in its config"
grep -q '^role = "storage"' <(on node1 cat /etc/wattflip/agent.toml) || fail "node1: its role label changed"
grep -q '^role = "metadata"' <(on node3 cat /etc/wattflip/agent.toml) || fail "node3: its role label changed"

step "site.yml, fourth run: the change is in place"
playbook -i "$work/node2-role.ini" >"$work/logs/site-4.log" 2>&1 || {
  grep -E 'fatal|FAILED|ERROR' "$work/logs/site-4.log" | head -n 20 >&2
  die "site.yml failed (fourth run)"
}
sed -n '/PLAY RECAP/,$p' "$work/logs/site-4.log"
recap_ok "$work/logs/site-4.log" yes
if grep -E '^(changed:|RUNNING HANDLER)' "$work/logs/site-4.log" >&2; then fail "fourth run changed something or notified a handler"; fi

# --- 9. a rolling upgrade keeps every agent's spooled data ----------------------------------
# The collector goes away; each agent samples, stores in its spool what it cannot send, and is
# stopped with SIGTERM (as the package's prerm stops it). site.yml then upgrades every host to the
# second package version, two agents at a time. The spools must come through byte for byte, and
# once the collector is back every batch of every agent's ledger (the `wattflip::ledger` line
# written when a batch is stored) must be in InfluxDB: sum of the ledgers' power points = count
# of power points per host.
step "site.yml, fifth run: rolling upgrade to $v2 with data in the spools"
kill "$collector_pid"
wait "$collector_pid" 2>/dev/null || true
for h in "${agents[@]}"; do
  unit_cmd "$h" wattflip-agent
  RUST_LOG=info,wattflip::ledger=debug timeout -s TERM 5 "${cmd[@]}" --samples 10 >"$work/logs/agent-$h-spooled.log" 2>&1 9>&- &
  agent_pid[$h]=$!
done
spool_sums() { # the spool's files and their hashes (a missing spool is a difference, not an abort)
  on "$1" sh -c 'cd /var/lib/wattflip-agent/spool 2>/dev/null || { echo "no spool directory"; exit 0; }
    find . -type f ! -name lock -print0 | sort -z | xargs -0 -r sha256sum'
}
for h in "${agents[@]}"; do
  wait "${agent_pid[$h]}" || true
  n=$(plain "$work/logs/agent-$h-spooled.log" | grep -c 'wattflip::ledger.*stored' || true)
  [ "$n" -gt 0 ] || fail "$h: nothing stored while the collector was away: $(tail -n 3 "$work/logs/agent-$h-spooled.log")"
  spool_sums "$h" >"$work/logs/spool-$h.before"
  [ -s "$work/logs/spool-$h.before" ] || fail "$h: its spool is empty while the collector is away"
  echo "$h: $n batches stored while the collector was away; spool: $(wc -l <"$work/logs/spool-$h.before") file(s)"
done
# (vars.yml comes last on playbook's command line, so the new version goes into it.)
sed -i "s/^wattflip_package_version: .*/wattflip_package_version: $v2/" "$work/vars.yml"
playbook >"$work/logs/site-5.log" 2>&1 || {
  grep -E 'fatal|FAILED|ERROR' "$work/logs/site-5.log" | head -n 20 >&2
  die "site.yml failed (fifth run, upgrade to $v2)"
}
sed -n '/PLAY RECAP/,$p' "$work/logs/site-5.log"
recap_ok "$work/logs/site-5.log" no
batches=$(grep -c '^PLAY \[Agents, a batch at a time\]' "$work/logs/site-5.log" || true)
[ "$batches" -eq 2 ] || fail "upgrade: $batches agent batches, expected 2"
for h in "${agents[@]}" collector1; do
  p=wattflip-agent
  [ "$h" = collector1 ] && p=wattflip-collector
  got=$(on "$h" dpkg-query -W -f '${Status} ${Version}' "$p" 2>&1)
  [ "$got" = "install ok installed $v2" ] || fail "$h: $p after the upgrade: $got"
done
for h in "${agents[@]}"; do
  spool_sums "$h" >"$work/logs/spool-$h.after"
  cmp -s "$work/logs/spool-$h.before" "$work/logs/spool-$h.after" \
    || fail "$h: the upgrade changed its spool: $(diff "$work/logs/spool-$h.before" "$work/logs/spool-$h.after" | head -n 5)"
done
step "after the upgrade: the spools drain, nothing lost"
RUST_LOG=info "${collector_cmd[@]}" >"$work/logs/collector-2.log" 2>&1 9>&- &
service_pids+=($!)
for _ in $(seq 150); do
  grep -q 'collector serving listen=' <(plain "$work/logs/collector-2.log") && break
  sleep 0.2
done
grep -q 'collector serving listen=' <(plain "$work/logs/collector-2.log") || die "the collector did not come back: $(plain "$work/logs/collector-2.log" | tail -n 3)"
for h in "${agents[@]}"; do
  unit_cmd "$h" wattflip-agent
  RUST_LOG=info,wattflip::ledger=debug timeout 90 "${cmd[@]}" --samples 5 >"$work/logs/agent-$h-drained.log" 2>&1 9>&- &
  agent_pid[$h]=$!
done
for h in "${agents[@]}"; do
  wait "${agent_pid[$h]}" || fail "agent $h ($v2) did not finish with every batch acknowledged: $(tail -n 3 "$work/logs/agent-$h-drained.log")"
  ledger=$(cat "$work/logs/agent-$h.log" "$work/logs/agent-$h-spooled.log" "$work/logs/agent-$h-drained.log" | plain |
    grep 'wattflip::ledger.*stored' | sed -n 's/.* power=\([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}')
  stored=$(query "SELECT count(watts) FROM power WHERE host = '$h'") || stored=error
  [ "$ledger" -gt 0 ] && [ "$stored" = "$ledger" ] \
    || fail "$h: InfluxDB has $stored power points, its ledgers $ledger (first run, spooled across the upgrade, after it)"
  echo "$h: ledger $ledger power points over three runs and an upgrade = InfluxDB $stored"
done

((${#failures[@]} == 0))
