#!/usr/bin/env bash
# The README's test command: installs the project with its test extra (CPU torch first), then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e '.[test]'
# The Redis store's tests run against a real redis-server.
command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server; }
python3 -m pytest -q -p no:cacheprovider "$@"
