#!/bin/sh
# run one SFT piece that stops at $UNTIL (UTC HH:MM:SS today) at the latest, and <= 1320 s
cd /work/s9/sft9
now=$(date -u +%s); end=$(date -u -d "$UNTIL" +%s)
left=$((end - now)); [ $left -gt 1320 ] && left=1320
[ $left -lt 240 ] && { echo "sft skipped $(date -u +%T): only $left s left" >> sft.log; exit 0; }
LIMIT=$left exec ./sft.sh
