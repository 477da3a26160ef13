#!/usr/bin/env bash
# The main job, on a fresh machine: install rlmd and the local Qwen2.5-Coder-1.5B model, ask a
# question about a real codebase (this Python's own asyncio package), show the trajectory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh local
export PATH="$(pwd)/.venv/bin:$PATH"
MODEL="${RLMD_DEMO_MODEL:-qwen2.5-coder-1.5b}"
rlmd models pull "$MODEL" >/dev/null
CODEBASE="$(.venv/bin/python -c 'import asyncio, os; print(os.path.dirname(asyncio.__file__))')"
QUESTION="In which file of this codebase is the class StreamReader defined? Answer with the file's relative path."
echo "== rlmd run over $CODEBASE with $MODEL ==" >&2
set +e
rlmd run "$QUESTION" --context "$CODEBASE" --model "$MODEL" --threads "${RLMD_THREADS:-2}" --max-iterations 6
status=$?
set -e
echo "== check (grep): $(cd "$CODEBASE" && grep -l '^class StreamReader\b' ./*.py | sed 's|^\./||') ==" >&2
echo "== the recorded trajectory ==" >&2
rlmd show last
exit $status
