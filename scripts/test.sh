#!/usr/bin/env bash
# The README's test command: installs the project with its test extra (CPU torch first), then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e '.[test]'
python3 -m pip install -q 'openai-agents>=0.24' 'langchain-openai>=1.8'  # real clients (tests/test_clients.py)
# The [structured] extra without the ~1 GB of triton its wheel requires but does not use on the CPU (docs/structured.md).
python3 -m pip install -q --no-deps 'xgrammar>=0.2.9,<0.3' && python3 -m pip install -q 'apache-tvm-ffi>=0.1.11'
# The Redis store's tests run against a real redis-server.
command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server; }
# The Vercel AI SDK at the versions tests/node/package-lock.json pins (tests/test_clients_node.py; node >= 20).
npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
python3 -m pytest -q -p no:cacheprovider "$@"
