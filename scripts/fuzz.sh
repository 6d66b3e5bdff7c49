#!/usr/bin/env bash
# `make fuzz`: runs every fuzz target (tests/fuzz/README.md) for SECONDS
# each: FUZZ_DIR SECONDS [TARGET...]. Each target's corpus lives in
# FUZZ_DIR/fuzz-corpus/<target> and grows from run to run; it starts from the
# seeds the target writes at start-up, the stored corpus tests/fuzz/corpus/
# <target>, and for the importers ONNX's node-test models and dtcc's
# .onnxtext lit inputs (as training graphs for the training target).
# Findings land in FUZZ_DIR/crashes/<target>/; each run's log in
# FUZZ_DIR/fuzz-<target>.log, and a summary line per target at the end.
set -uo pipefail
DIR=$1
SECONDS_TO_RUN=$2
shift 2
TARGETS=${*:-onnx onnxtext train program checkpoint data plan}
NODE_TESTS=/usr/share/libonnx-testdata/data/node
export PATH=/usr/lib/llvm-22/bin:$PATH

initial_corpus() {
  local t=$1 out=$2
  case $t in
    onnx)
      for d in "$NODE_TESTS"/*/; do
        cp "$d/model.onnx" "$out/$(basename "$d").onnx"
      done ;;
    onnxtext)
      local split=$DIR/split
      mkdir -p "$split"
      find tests/lit -name '*.test' -exec sh -c \
        'split-file "$1" "$2/$(basename "$1" .test)" 2>/dev/null || true' _ {} "$split" \;
      find "$split" -name '*.onnxtext' -exec cp {} "$out/" \; ;;
    train)
      # Node tests as training graphs, each under one of the target's
      # configurations (the input's first byte).
      /usr/bin/python3 - "$NODE_TESTS" "$out" <<'PY'
import os, sys, tempfile
sys.path.insert(0, "tests/lit/Inputs")
import node_test_as_training as convert
nodes, out = sys.argv[1:]
tmp = os.path.join(tempfile.mkdtemp(), "model.onnx")
k = 0
for name in sorted(os.listdir(nodes)):
    d = os.path.join(nodes, name)
    if not os.path.exists(os.path.join(d, "test_data_set_0", "input_0.pb")):
        continue
    try:
        convert.main(d, tmp)
    except Exception:
        continue
    with open(tmp, "rb") as f, open(os.path.join(out, name), "wb") as g:
        g.write(bytes([k % 14]) + f.read())
    k += 1
PY
      ;;
  esac
}

summary=()
for t in $TARGETS; do
  bin=$DIR/bin/dtcc-fuzz-$t
  corpus=$DIR/fuzz-corpus/$t
  mkdir -p "$corpus" "$DIR/crashes/$t" "$DIR/fuzz-seeds/$t"
  if [ -z "$(ls -A "$corpus")" ]; then
    echo "fuzz: $t: building the initial corpus"
    initial_corpus "$t" "$corpus"
  fi
  dirs=("$corpus" "$DIR/fuzz-seeds/$t")
  [ -d "tests/fuzz/corpus/$t" ] && dirs+=("tests/fuzz/corpus/$t")
  echo "fuzz: $t: $SECONDS_TO_RUN s from $(ls "$corpus" | wc -l) corpus inputs"
  # -fork=1 with -ignore_*: a finding is saved and the run goes on for the
  # whole time.
  DTCC_FUZZ_SEEDS=$DIR/fuzz-seeds/$t "$bin" "${dirs[@]}" \
    -max_total_time="$SECONDS_TO_RUN" -artifact_prefix="$DIR/crashes/$t/" \
    -timeout=60 -rss_limit_mb=4096 -max_len=65536 -close_fd_mask=3 \
    -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    >"$DIR/fuzz-$t.log" 2>&1
  rc=$?
  last=$(grep -aE '^#[0-9]+' "$DIR/fuzz-$t.log" | tail -1)
  runs=$(echo "$last" | sed -n 's/^#\([0-9]*\).*/\1/p')
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | cut -d' ' -f2)
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | cut -d' ' -f2)
  crashes=$(ls "$DIR/crashes/$t" | wc -l)
  line="$t: exit $rc, ${runs:-?} executions, cov ${cov:-?}, ft ${ft:-?}, corpus $(ls "$corpus" | wc -l) files, $crashes finding files"
  echo "fuzz: $line"
  grep -aE 'FINDING|ERROR: |SUMMARY' "$DIR/fuzz-$t.log" | sort | uniq -c | head -10
  summary+=("$line")
done
echo "fuzz: summary"
printf '  %s\n' "${summary[@]}"
