#!/usr/bin/env bash
# Runs the command-line conformance checks (docs/CONTRACT.md §10) for the
# sections anchordb implements. Prefers a copy kept beside the repository
# (../shared/conformance/cli.sh), which may be newer; falls back to the copy
# vendored beside this script.
set -euo pipefail
cd "$(dirname "$0")/.."
SECTIONS=${CONFORMANCE_SECTIONS:-"core verify merge admission outbox"}
script=../shared/conformance/cli.sh
[ -f "$script" ] || script=scripts/conformance-cli.sh
# shellcheck disable=SC2086
bash "$script" $SECTIONS
