#!/usr/bin/env bash
# The README's test command: installs the project with its test extra (CPU torch first), then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e '.[test]'
python3 -m pytest -q -p no:cacheprovider "$@"
