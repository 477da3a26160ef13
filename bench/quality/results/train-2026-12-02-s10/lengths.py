"""Token lengths of the SFT samples (tokenizer of the cached dequantised base) and what a cap keeps."""

import glob
import json
import sys

from transformers import AutoTokenizer

from rlmd.train.sft import length_report

tok = AutoTokenizer.from_pretrained(glob.glob("home/cache/train-base/*/")[0])
rows = [json.loads(x) for x in open(sys.argv[1])]
for cap in (1024, 2048):
    r = length_report(tok, rows, cap)
    rep = [ok for ok, s in zip(r["kept"], rows, strict=False) if s.get("repair")]
    print(
        cap,
        "kept",
        sum(r["kept"]),
        "of",
        len(rows),
        "by turn",
        r["by_turn"],
        "answering",
        r["answering"],
        "repairs kept",
        sum(rep),
        "of",
        len(rep),
    )
print({k: v for k, v in r.items() if k != "kept"})
