#!/bin/sh
# The fleet test's guest scenario, run by /init on every guest. Each step prints
# `WF-STEP <name>` before and `WF-STEP-RC <name> <exit code>` after, and the host test asserts
# the exact exit codes from the serial log (a refused power-state change must exit 1, for one).
# Everything the agent measures goes to the host's collector (WF_COLLECTOR) and from there to
# InfluxDB, where the host asserts the values.
. /etc/wattflip/guest.env
cfg=/etc/wattflip/agent.toml
# nvme-cli 2.3 groups numbers by locale (docs/sources-and-drives.md §6.1); the agent sets LC_ALL=C itself too.
export LC_ALL=C RUST_LOG=info NO_COLOR=1
# Piping through cat keeps the console from being a terminal (no progress bars in the log);
# pipefail keeps the command's own exit code.
set -o pipefail

step() {
  name=$1
  shift
  echo "WF-STEP $name: $*"
  "$@" 2>&1 | cat
  echo "WF-STEP-RC $name $?"
}

# 1. What the agent sees: sysfs block device, nvme-cli and smartctl identity, power states.
step inventory wattflip-agent inventory --config "$cfg"
# 2. Temperatures from hwmon (every sampling tick) and nvme-cli + smartctl (every smart_interval),
#    SMART, and the inventory in the Hello.
step temperatures wattflip-agent run --config "$cfg" --samples "$WF_SAMPLES"
# 3. A quick Granularity probe (SR, RR, SW, RW) on the raw namespace; consent for this serial.
step probe wattflip-agent probe --quick --target /dev/nvme0n1 --destroy-consent "$WF_SERIAL" \
  --collector "$WF_COLLECTOR" --config "$cfg" --out /tmp/probe
# 4. A power-state change: QEMU refuses set-feature 02h (0x410e); the agent records it and fails.
step governor wattflip-agent governor set --device /dev/nvme0 --state 0 --config "$cfg" \
  --collector "$WF_COLLECTOR" --out /tmp/governor
#    The original state is intact.
step power-state-after nvme get-feature /dev/nvme0 --feature-id=2
# 5. Temperature threshold 319 K (45.85 °C) under the drive's constant 323 K: critical warning bit 1.
step threshold nvme set-feature /dev/nvme0 --feature-id=4 --value=0x13f
step warning wattflip-agent run --config "$cfg" --samples "$WF_SAMPLES"

# Second scenario (one guest): the host sets smart_critical_warning through QMP while this run
# goes on, as soon as it sees the run's first SMART poll in InfluxDB; the agent must report the new
# warning at its next poll. A bounded run (not SIGTERM, which stops without waiting for the last
# acknowledgement) so every batch is acknowledged and the exit code is exact.
if [ "$WF_SCENARIO" = qmp ]; then
  step live wattflip-agent run --config "$cfg" --samples "$WF_LIVE_SAMPLES"
fi
exit 0
