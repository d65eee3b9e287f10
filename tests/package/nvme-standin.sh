#!/bin/sh
# A stand-in for nvme-cli inside the package test's Debian 11 root: one controller, /dev/nvme0,
# whose id-ctrl is a real capture (README.md) and whose Power Management feature (FID 02h) is
# kept in a file, so a restore is observable. Output lines as nvme-cli 2.x prints them
# (`nvme version`, `get-feature` text; see agent/drives/src/nvme_cli/feature.rs). Every call
# is appended to $dir/calls. Anything else is refused.
dir=/var/lib/wftest-nvme
echo "$*" >>"$dir/calls"
case "$1 $2 $3" in
"version  ") echo "nvme version 2.3" ;;
"id-ctrl /dev/nvme0 -o") cat "$dir/id-ctrl.json" ;;
"get-feature /dev/nvme0 --feature-id=2") printf 'get-feature:0x02 (Power Management), Current value:0x%08x\n' "$(cat "$dir/fid02")" ;;
"set-feature /dev/nvme0 --feature-id=2")
  v=${4#--value=}
  echo "$v" >"$dir/fid02"
  printf 'set-feature:0x02 (Power Management), value:0x%08x, cdw12:0x00000000, save:0\n' "$v"
  ;;
*)
  echo "nvme stand-in: \`$*\` is not supported" >&2
  exit 1
  ;;
esac
