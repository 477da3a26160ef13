#!/bin/sh
# issue 13, session 15 (run.sh runs it after sft.sh, stopped by timeout at 06:55): wait for the coordinator's
# CI to finish (/work/s15/ci/done) or 07:05 at the latest, then mark the machine busy
# (/work/s15/eval.running), convert the adapter and run the held-out eval (eval.sh, deadline 07:35),
# and clear the mark.
D=$(dirname "$(readlink -f "$0")")
T=/work/s15/t
cd $T
echo "chain start $(date -u +%H:%M:%S) $(uptime)" >> chain.log
LATEST=$(date -u -d "today 07:05" +%s)
# the final CI starts about 06:35; a done file from an earlier CI run (06:10) does not count
CI_FROM=$(date -u -d "today 06:30" +%s)
ci_done() { [ -e /work/s15/ci/done ] && [ "$(stat -c %Y /work/s15/ci/done)" -ge "$CI_FROM" ]; }
while ! ci_done && [ "$(date -u +%s)" -lt "$LATEST" ]; do sleep 10; done
echo "ci done: $(ci_done && echo yes || echo no) $(date -u +%H:%M:%S)" >> chain.log
touch /work/s15/eval.running
sh "$D/eval.sh" "$(date -u -d 'today 07:35' +%s)"
rm -f /work/s15/eval.running
echo "chain end $(date -u +%H:%M:%S) $(uptime)" >> chain.log
