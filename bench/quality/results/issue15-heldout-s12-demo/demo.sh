#!/bin/bash
# the README's demo question (scripts/demo.sh's rlmd run), under the model lock, with $SRC's code
cd ${SRC:?}
export PYTHONPATH=$PWD:$PWD/tui
CODEBASE="$(/work/main/.venv/bin/python -c 'import asyncio, os; print(os.path.dirname(asyncio.__file__))')"
QUESTION="In which file of this codebase is the class StreamReader defined? Answer with the file's relative path."
uptime
date -u
time /work/main/.venv/bin/python -m rlmd.cli run "$QUESTION" --context "$CODEBASE" --model qwen2.5-coder-1.5b --threads ${THREADS:-2} --max-iterations 6
echo "exit $?"
uptime
date -u
