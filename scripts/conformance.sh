#!/usr/bin/env bash
# Runs the SPEC §10 conformance checks for the sections anchordb implements.
# Prefers the shared copy (../shared/conformance/cli.sh, kept by the spec's
# owners); falls back to the copy vendored beside this script.
set -euo pipefail
cd "$(dirname "$0")/.."
SECTIONS=${CONFORMANCE_SECTIONS:-"core verify merge admission outbox"}
script=../shared/conformance/cli.sh
[ -f "$script" ] || script=scripts/conformance-cli.sh
# shellcheck disable=SC2086
bash "$script" $SECTIONS
