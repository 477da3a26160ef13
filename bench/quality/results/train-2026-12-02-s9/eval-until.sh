#!/bin/sh
# eval.sh MODEL SET, stopped at $UNTIL (UTC HH:MM:SS) at the latest (a re-run skips done rollouts)
cd /work/s9/sft9
now=$(date -u +%s); end=$(date -u -d "$UNTIL" +%s)
left=$((end - now)); [ $left -gt 1380 ] && left=1380
[ $left -lt 120 ] && { echo "eval $2 skipped $(date -u +%T): only $left s left" >> eval.log; exit 0; }
LIMIT=$left exec ./eval.sh "$@"
