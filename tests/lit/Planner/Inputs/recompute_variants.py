"""Writes the plan variants of plan_recompute_layers.test.

  recompute_variants.py [--fused] PLAN.json OUTDIR K...

For each K: OUTDIR/file-K.json, PLAN.json recomputing the first K layers
(priced with the model file, compiled whole), and OUTDIR/zoo-K.json, the
same plan of the zoo model the file holds (priced from the layer-scaled
compiles). The file's attention cores have dropout, so neither fuses them:
the two compile the same layers.
"""
import json
import os
import sys

args = sys.argv[1:]
# --fused: a model without dropout (Llama's), whose attention cores both
# fuse (a file as dtcc compile does, the zoo model as flash attention).
fused = args[:1] == ["--fused"]
if fused:
    args = args[1:]
plan_path, out = args[0], args[1]
with open(plan_path) as f:
    saved = json.load(f)
for k in map(int, args[2:]):
    saved["plan"]["recompute"] = "full"
    saved["plan"]["recomputeLayers"] = k
    with open(os.path.join(out, f"file-{k}.json"), "w") as f:
        json.dump(saved, f)
    zoo = json.loads(json.dumps(saved))
    if fused:
        zoo["model"].update(flashAttention=True, fusedSoftmax=False)
    else:
        zoo["model"].update(name="gpt", dropout=True, flashAttention=False,
                            fusedSoftmax=False)
    with open(os.path.join(out, f"zoo-{k}.json"), "w") as f:
        json.dump(zoo, f)
