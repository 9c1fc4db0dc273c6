#!/usr/bin/env bash
# A separate environment for side-by-side benchmarks: the peers (pinned) plus this project.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v uv >/dev/null || python -m pip install --quiet uv
uv venv -q benchmarks/.venv-peers --python 3.12
VIRTUAL_ENV=benchmarks/.venv-peers uv pip install -q "litellm==1.110.2" "any-llm-sdk==1.40.2" \
    "martian-linguafranca==0.3.15" orjson pydantic openai anthropic psutil -e .
echo "peers ready: benchmarks/.venv-peers/bin/python benchmarks/stream.py"
