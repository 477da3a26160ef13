#!/bin/bash
# the held-out split from main (src-final), in pieces, each under the model lock
export SRC=/work/s12/q/src-final
flock /work/s12/model.lock bash /work/s12/q/rw.sh final-code-a codeintel-001,codeintel-002,codeintel-003 420
flock /work/s12/model.lock bash /work/s12/q/rw.sh final-code-b codeintel-006,codeintel-007 420
flock /work/s12/model.lock bash /work/s12/q/rw.sh final-judge judge-002,judge-004 420
