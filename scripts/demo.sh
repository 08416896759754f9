#!/usr/bin/env bash
# The README's main command: installs the project (CPU torch first), builds the demo model once, serves it offline
# with the Responses API and answers one real request through the openai SDK.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e .
transformers responses demo --once "$@"
