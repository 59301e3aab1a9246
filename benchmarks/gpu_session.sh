#!/usr/bin/env bash
# One GPU session's runs (issue 19), in the order that keeps the timings clean: the benchmarks
# first, alone on the device; then the correctness runs side by side (the GPU suite, the nightly
# verify split by record, the host-sync survey). Logs go to $OUT/logs.tgz, a summary to stdout.
#
#   OUT=/tmp/gpu bash benchmarks/gpu_session.sh [STAGE ...]
#
# STAGE: sweep, report, bench, profile, pytest, verify, checks, deltas, probe (default: all, in that order; the first
# three alone on the device, the last three side by side). Each stage has its own
# time limit (seconds, *_LIMIT variables) so that the whole run ends inside one device call.
set -u
OUT=${OUT:-/tmp/gpu-session}
LOG=$(mktemp -d)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-python3}
STAGES=${*:-report bench profile pytest verify probe}
JOBS=${JOBS:-10}
has() { [[ " $STAGES " == *" $1 "* ]]; }
mkdir -p "$OUT"
save() { tar czf "$OUT/logs.tgz" -C "$LOG" . 2>/dev/null; }  # after each stage: a kill keeps them

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  $PY -c "import sys, torch, triton, transformers, hypothesis, tensordict, batchproof
print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__,
      'transformers', transformers.__version__, 'hypothesis', hypothesis.__version__,
      'tensordict', tensordict.__version__, 'batchproof', batchproof.__file__)
print(torch.cuda.get_device_name(), torch.cuda.get_device_properties(0))"
} > "$LOG/env.txt" 2>&1
cat "$LOG/env.txt"

if has bench; then
  timeout "${BENCH_LIMIT:-150}" $PY -m batchproof bench --device cuda --scale h100 \
    --json "$LOG/bench_h100.json" > "$LOG/bench_h100.txt" 2>&1
  echo "bench rc=$?"; save
fi
if has sweep; then
  timeout "${SWEEP_LIMIT:-150}" $PY benchmarks/gpu_profile.py --sweep ${SWEEP_ARGS:-} > "$LOG/sweep.txt" 2>&1
  echo "sweep rc=$?"; save
fi
if has profile; then
  timeout "${PROFILE_LIMIT:-150}" $PY benchmarks/gpu_profile.py ${PROFILE_ARGS:-} > "$LOG/profile.txt" 2>&1
  echo "profile rc=$?"; save
fi
if has report; then
  timeout "${REPORT_LIMIT:-200}" $PY benchmarks/gpu_report.py --out "$LOG" ${REPORT_ARGS:-} \
    > "$LOG/report.txt" 2>&1
  echo "report rc=$?"; save
fi

pids=()
if has pytest; then
  ( timeout "${PYTEST_LIMIT:-420}" $PY -m pytest -m gpu -n ${PYTEST_WORKERS:-6} -p no:cacheprovider -q -rfE ${PYTEST_K:+-k "$PYTEST_K"} \
      --junitxml="$LOG/pytest_gpu.xml" tests/test_host_reads.py tests/test_cp.py \
      tests/test_cli.py tests/test_registry.py tests/test_nesting.py \
      tests/test_balance.py tests/test_varlen.py tests/test_sft.py tests/test_trainer.py \
      tests/test_pipeline.py tests/test_packaging.py > "$LOG/pytest_gpu.txt" 2>&1
    echo "pytest rc=$?" >> "$LOG/pytest_gpu.txt" ) &
  pids+=($!)
fi
if has verify; then
  records=$($PY -c "from batchproof import registry
print(' '.join(i.name for i in registry.all_ops() if 'cuda' in i.devices))")
  ( for r in $records; do echo "$r"; done | xargs -P "$JOBS" -I{} sh -c \
      "timeout ${VERIFY_LIMIT:-400} $PY -m batchproof verify --device cuda --profile nightly \
         --op {} --json $LOG/verify_{}.json > $LOG/verify_{}.txt 2>&1; \
       echo \"rc=\$?\" >> $LOG/verify_{}.txt" ) &
  pids+=($!)
fi
if has checks; then  # the records too long for one process: a process per check
  ( timeout "${CHECKS_LIMIT:-500}" $PY benchmarks/gpu_verify_checks.py "$LOG/checks" \
      ${RECORDS:-} --jobs "${JOBS:-16}" --limit "${CHECK_LIMIT:-450}" > "$LOG/checks.txt" 2>&1
    echo "checks rc=$?" >> "$LOG/checks.txt" ) &
  pids+=($!)
fi
if has deltas; then  # the |Δ| table alone, beside the correctness runs (no timing in it)
  ( timeout "${REPORT_LIMIT:-200}" $PY benchmarks/gpu_report.py --out "$LOG/deltas" \
      ${REPORT_ARGS:-} > "$LOG/deltas.txt" 2>&1; echo "deltas rc=$?" >> "$LOG/deltas.txt" ) &
  pids+=($!)
fi
if has probe; then
  ( timeout "${PROBE_LIMIT:-300}" $PY benchmarks/gpu_sync_probe.py > "$LOG/sync_probe.txt" 2>&1
    echo "probe rc=$?" >> "$LOG/sync_probe.txt" ) &
  pids+=($!)
fi
for pid in "${pids[@]}"; do wait "$pid"; done

save
echo "=== bench";   grep -E "impl|floor|bandwidth|Error|error" "$LOG/bench_h100.txt" 2>/dev/null | head -40
echo "=== report";  tail -n 60 "$LOG/report.txt" 2>/dev/null
echo "=== sweep";   grep -v Warning "$LOG/sweep.txt" 2>/dev/null | grep -E "^(===|  BLOCK)"
echo "=== profile"; grep -E "^(===|---)" "$LOG/profile.txt" 2>/dev/null
echo "=== pytest";  tail -n 25 "$LOG/pytest_gpu.txt" 2>/dev/null
echo "=== verify";  for f in "$LOG"/verify_*.txt; do
  [ -e "$f" ] && echo "$(basename "$f" .txt): $(grep -E 'checks (passed|failed)|checks? .*in [0-9.]+s|rc=' "$f" | tr '\n' ' ')"
done
echo "=== checks";  cat "$LOG/checks.txt" 2>/dev/null
echo "=== deltas";  grep -E "^\| (llama|qwen)|rc=" "$LOG/deltas.txt" 2>/dev/null
echo "=== probe";   tail -n 40 "$LOG/sync_probe.txt" 2>/dev/null
