#!/bin/sh
# the 1-minute load every minute, until killed
while true; do echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >> /work/s15/t/load.log; sleep 60; done
