#!/usr/bin/env bash
# Dashboards proven to load as far as a checker can (dashboards/README.md says exactly what this
# proves): builds the checker (build.sh, with its mutation tests), then strict-parses every
# dashboards/**/*.json and parses every InfluxQL query in them. One closing PASS/FAIL line.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
if ! bin=$(bash "$repo/tests/dashboards-check/build.sh" | tail -n 1) || [ ! -x "$bin" ]; then
  echo "dashboards check: FAIL (the checker did not build; see above)"
  exit 1
fi
if "$bin" "$repo/dashboards"; then
  echo "dashboards check: PASS"
else
  echo "dashboards check: FAIL (see the FAIL lines above)"
  exit 1
fi
