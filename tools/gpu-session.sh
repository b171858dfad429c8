#!/usr/bin/env bash
# One GPU session in one call (what a lease of a few minutes allows):
#   1. machine facts and `tilerosetta doctor`
#   2. the conformance suite, one process per backend in parallel (correctness does not need a quiet GPU),
#      then the benchmark's own GPU tests alone (they measure ceilings)
#   3. tile-size sweeps that write the best configuration into tuned_configs.json ($SWEEPS)
#   4. the benchmark, which then uses the tuned table
# Usage: tools/gpu-session.sh OUTDIR   (needs gpu-bundle/ from `make gpu-bundle`)
# Env: BACKENDS (default: all that run), SUITE_K ("backend=pytest -k expr;..." to narrow a backend's suite),
#      ONLY_K (a pytest -k expr for every backend's suite, e.g. ONLY_K=add_rms_norm: one op everywhere),
#      SWEEPS ("backend:op:dtype:size[:where] ...", where = --where groups joined by '/'; check each on the CPU first:
#      `tilerosetta sweep --plan --backend B --op OP --dtype D --size N --where WHERE --max-configs 8`), MAX_CONFIGS (8),
#      AFTER_SWEEPS="cmd" (after the sweeps, on the table they wrote, into after-sweeps.log; T_AFTER, 120 s: e.g.
#      `python3 -m pytest -q shared_tests/test_tuned_conformance_gpu.py`, which then checks only the entries this
#      call's sweeps changed: TILEROSETTA_TUNED_SINCE is set to the table from before them),
#      PROBE=1 (tools/probe_tile_cpp.py after the suite; PROBE_ARGS), EXTRA="cmd" (run in the bundle's environment
#      after the suite, into extra.log; T_EXTRA, 120 s, e.g. a reproducer under repro/), SKIP_SELFTEST=1, BENCH_ARGS, SKIP_BENCH=1, SUITE_WORKERS (3),
#      SCALING=1 (`bench --scaling` after the bench, ~4 min; SCALING_ARGS e.g. "--budget-s 120"),
#      HOSTPROF=1 (tools/host_cost_profile.py: where each backend's per-call host time goes, ~20 s),
#      BENCH_LATEST=1 (this session's bench results become bench/results' newest for the later steps),
#      DECODEPROF=1 (tools/decode_profile.py: decode GEMV per contestant + where a decode step's GPU time goes,
#      ~3 min; DECODEPROF_ARGS e.g. "--stream-sweep --attention-sweep triton --backends triton,best", T_DECODEPROF (300 s)),
#      LLAMA=1 (tools/llama_gpu_check.py: the Llama model and the HF patch per backend against transformers fp32,
#      prefill + 32 teacher-forced decode steps, ~1-2 min; LLAMA_ARGS, T_LLAMA (180 s)),
#      E2E=1 (issue 14: `tilerosetta e2e` with every backend, best, transformers and torch.compile of it, 8
#      layers, ~6 min; leaves e2e-*.jsonl in OUTDIR; E2E_ARGS e.g. "--layers 4 --budget-s 200", T_E2E (420 s);
#      E2E_CHECK=1 also runs the HF agreement check first, as LLAMA=1 does). Each fits one 10-minute call:
#        SKIP_SUITE=1 SKIP_SELFTEST=1 SKIP_BENCH=1 LLAMA=1 tools/gpu-session.sh OUT   (~3-4 min)
#        SKIP_SUITE=1 SKIP_SELFTEST=1 SKIP_BENCH=1 E2E=1 tools/gpu-session.sh OUT     (~7-8 min)
#      per-step time limits T_SUITE, T_PROBE, T_SWEEPS, T_BENCH, T_SCALING (s).
#      SWEPT_TABLE=1: start from the tuned table an earlier call's sweeps wrote on this (still warm) machine: a call
#      re-copies the tracked tree, so the bench of a later call would otherwise run the committed table.
#      GPUS=all|N: the suite (the files in SHARD_SUITE, default conformance + random shapes + bad inputs) and
#      the benchmark sharded over those GPUs, one worker per GPU (`--gpus`, docs/MULTI_GPU.md), instead of one
#      process per backend; GPUS_COMPARE=1 runs each first on one GPU (--gpus 1) for the wall-time comparison.
#      Each run starts with empty JIT caches (Triton's and ~/.cache) so neither profits from the other's
#      compiles. Wall times in shard-walltime.txt; workers' files in shards.tar.gz.
#      Peers (issue 13): when gpu-peers/ parts were carried (tools/peers-bundle.sh), tools/gpu-peers-stage.sh
#      checks/unpacks them first and the peers' runtime goes on PYTHONPATH; PEERS_SMOKE=1 runs
#      tools/peers_smoke.py (T_SMOKE, 120 s) before the bench; SKIP_SUITE=1 skips the conformance suite.
#      The cute_dsl backend (issue 18) imports the same CuTe DSL runtime: once the peers are staged,
#      BACKENDS=cute_dsl TILEROSETTA_REQUIRE=cute_dsl runs its suite (a skip for a missing runtime fails).
#      Its attention: TILEROSETTA_CUTE_DSL_ATTENTION=simple (the wgmma kernel's simple form: PIPE=0, PACK=0)
#      or =simt (the SIMT kernel) for every call, to tell a fault of the default wgmma path from the rest.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?OUTDIR}
node_table=${TILEROSETTA_WORK:-/tmp/tilerosetta-node}/tuned_configs.json
before_sweeps=${TILEROSETTA_WORK:-/tmp/tilerosetta-node}/tuned_configs.before-sweeps.json
backends=${BACKENDS:-torch,cutile_py,triton,tile_cpp,cutile_rs}
mkdir -p "$out"
export LOGDIR="$out"
if [ "${SWEPT_TABLE:-0}" = 1 ]; then
  if [ -f "$node_table" ]; then cp "$node_table" python/tilerosetta/tuned_configs.json && echo "tuned table: $node_table (SWEPT_TABLE=1)"
  else echo "SWEPT_TABLE=1 but no $node_table (no sweep on this machine since it started): the committed table"; fi
fi
t0=$(date +%s)
stamp() { echo "== $1: $(( $(date +%s) - t0 )) s"; }
peers_site=${PEERS_SITE:-/tmp/peers-site}
if [ -d gpu-peers ] || [ -d "${PEERS_PARTS:-/tmp/peers-parts}" ]; then
  tools/gpu-peers-stage.sh | tee "$out/peers-stage.txt" | tail -2
fi
# also for a gpu-bundle/run.sh copied before it learnt this (it keeps an exported PYTHONPATH)
[ -f "$peers_site/.complete" ] && export PYTHONPATH="$peers_site:$peers_site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  echo "CUDA_HOME=${CUDA_HOME:-unset}"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  gpu-bundle/run.sh doctor
} > "$out/machine.txt" 2>&1
stamp "unpack+doctor"
shards=$(mktemp -d)
runs=${GPUS:-}; [ -n "${GPUS:-}" ] && [ "${GPUS_COMPARE:-0}" = 1 ] && runs="1 $GPUS"
fresh_caches() { local c; c=$(mktemp -d); export TRITON_CACHE_DIR=$c/triton XDG_CACHE_HOME=$c; }
suite=$(mktemp -d)
if [ "${SKIP_SUITE:-0}" = 1 ]; then
  echo "suite: skipped (SKIP_SUITE=1)" | tee "$out/suite-summary.txt"
elif [ -n "${GPUS:-}" ]; then
  # One worker per GPU, each on its share of backend x op groups (a fault still kills only its own worker).
  files=(${SHARD_SUITE:-shared_tests/test_conformance.py shared_tests/test_random_shapes.py shared_tests/test_bad_inputs.py})
  for g in $runs; do
    s=$(date +%s)
    (fresh_caches; timeout "${T_SUITE:-240}" gpu-bundle/run.sh shell python3 -m tilerosetta test --gpus "$g" \
       --backend "$backends" --suite "${files[0]}" --shard-dir "$suite/gpus-$g" -- -rs "${files[@]:1}" \
       > "$suite/test-gpus-$g.log" 2>&1)
    echo "suite --gpus $g ($backends): $(( $(date +%s) - s )) s wall: $(tail -1 "$suite/test-gpus-$g.log")" \
      | tee -a "$out/shard-walltime.txt" "$out/suite-summary.txt"
  done
else
  # One pytest process per backend, in parallel: a kernel fault (illegal address) leaves its process's CUDA
  # context unusable, so it must not share a process with another backend's cases. Tests that belong to no
  # backend run once, in the torch process.
  for b in ${backends//,/ }; do
    own=$(ls shared_tests/test_${b}_*.py 2>/dev/null | tr '\n' ' ')
    extra=""; [ "$b" = torch ] && extra=$(ls shared_tests/test_*.py | grep -v -e test_conformance -e test_random_shapes \
      -e test_bad_inputs -e test_bench_gpu -e test_cutile_py_ -e test_triton_ -e test_tile_cpp_ -e test_cutile_rs_ -e test_cute_dsl_ | tr '\n' ' ')
    k=""; for kv in ${SUITE_K:+${SUITE_K//;/ }}; do [ "${kv%%=*}" = "$b" ] && k="${kv#*=}"; done
    [ -n "${ONLY_K:-}" ] && k="${k:+($k) and }($ONLY_K)"
    # SIGINT first: pytest then stops like Ctrl-C and still prints what passed and failed so far (and the junit)
    (timeout -s INT -k 30 "${T_SUITE:-240}" gpu-bundle/run.sh shell python3 -m pytest -q -rs -p no:cacheprovider --backend "$b" ${k:+-k "$k"} \
       -n "${SUITE_WORKERS:-3}" --junitxml="$suite/junit-$b.xml" shared_tests/test_conformance.py \
       shared_tests/test_random_shapes.py shared_tests/test_bad_inputs.py $own $extra > "$suite/test-$b.log" 2>&1
     rc=$?; [ "$rc" = 124 ] && echo "TIMED OUT after ${T_SUITE:-240} s (T_SUITE): the counts above are of the tests that ran" >> "$suite/test-$b.log") &
  done
  wait
  for b in ${backends//,/ }; do echo "$b: $(tail -1 "$suite/test-$b.log")"; done | tee "$out/suite-summary.txt"
fi
tar -C "$suite" -czf "$out/suite.tar.gz" .
stamp "suite"
if [ "${SKIP_SELFTEST:-0}" != 1 ]; then
  timeout 120 gpu-bundle/run.sh shell python3 -m pytest shared_tests/test_bench_gpu.py -q -rs -p no:cacheprovider \
    > "$out/extra.log" 2>&1; tail -3 "$out/extra.log"
  stamp "bench self-tests"
fi
if [ -n "${EXTRA:-}" ]; then  # a command of our own (a reproducer), in the bundle's environment
  timeout "${T_EXTRA:-120}" gpu-bundle/run.sh shell bash -c "$EXTRA" >> "$out/extra.log" 2>&1; echo "extra: exit $?"
  tail -30 "$out/extra.log"
  stamp "extra"
fi
if [ "${PROBE:-0}" = 1 ]; then
  timeout "${T_PROBE:-150}" gpu-bundle/run.sh shell python3 tools/probe_tile_cpp.py --out "$out/probe.jsonl" \
    --max-seconds "$(( ${T_PROBE:-150} - 10 ))" ${PROBE_ARGS:-} > "$out/probe.log" 2>&1; echo "probe: exit $?"; tail -40 "$out/probe.log"
  stamp "probe"
fi
if [ -n "${SWEEPS:-}" ]; then
  sweeps=$(mktemp -d)
  mkdir -p "$(dirname "$node_table")" && cp python/tilerosetta/tuned_configs.json "$before_sweeps"
  end=$(( $(date +%s) + ${T_SWEEPS:-240} ))
  for s in $SWEEPS; do
    IFS=: read -r b op dt size where <<< "$s"
    wargs=(); [ -n "$where" ] && wargs=(--where "$where")  # the CLI splits its '/'-joined groups
    left=$(( end - $(date +%s) )); [ $left -gt 10 ] || { echo "sweep budget spent: skipped $s" | tee -a "$out/extra.log"; continue; }
    timeout $left gpu-bundle/run.sh shell python3 -m tilerosetta sweep --backend "$b" --op "$op" --dtype "$dt" \
      --size "$size" "${wargs[@]}" --max-configs "${MAX_CONFIGS:-8}" --write-best --out-dir "$sweeps" >> "$out/extra.log" 2>&1 \
      || echo "sweep $s: exit $?" | tee -a "$out/extra.log"
    grep "tuned_configs.json:" "$out/extra.log" | tail -1
  done
  cp python/tilerosetta/tuned_configs.json "$sweeps/"  # the table the sweeps wrote, inside the archive
  mkdir -p "$(dirname "$node_table")" && cp python/tilerosetta/tuned_configs.json "$node_table"  # for SWEPT_TABLE=1
  tar -C "$sweeps" -czf "$out/sweeps.tar.gz" .
  stamp "sweeps"
fi
if [ -n "${AFTER_SWEEPS:-}" ]; then  # a command on the table the sweeps just wrote (its tuned conformance)
  timeout "${T_AFTER:-120}" gpu-bundle/run.sh shell env TILEROSETTA_TUNED_SINCE="$before_sweeps" bash -c "$AFTER_SWEEPS" \
    > "$out/after-sweeps.log" 2>&1
  echo "after sweeps: exit $?"; tail -15 "$out/after-sweeps.log"
  stamp "after sweeps"
fi
if [ "${PEERS_SMOKE:-0}" = 1 ]; then
  timeout "${T_SMOKE:-120}" gpu-bundle/run.sh shell python3 tools/peers_smoke.py --max-seconds "$(( ${T_SMOKE:-120} - 15 ))" \
    --require "${PEERS_REQUIRE:-tilegym,torch_compile,liger,quack,fa4,sdpa_cudnn,sdpa_flash}" \
    > "$out/peers-smoke.log" 2>&1; echo "peers smoke: exit $?"; cat "$out/peers-smoke.log"
  stamp "peers smoke"
fi
if [ "${SKIP_BENCH:-0}" != 1 ] && [ -n "${GPUS:-}" ]; then
  for g in $runs; do
    s=$(date +%s)
    (fresh_caches; timeout "${T_BENCH:-240}" gpu-bundle/run.sh bench --out "$out" --gpus "$g" \
       --shard-dir "$shards/bench-gpus-$g" ${BENCH_ARGS:-} | tail -4)
    mv "$out/bench.log" "$out/bench-gpus-$g.log" 2>/dev/null
    echo "bench --gpus $g (${BENCH_ARGS:-}): $(( $(date +%s) - s )) s wall" | tee -a "$out/shard-walltime.txt"
  done
  tar -C "$shards" -czf "$out/shards.tar.gz" .
  stamp "bench"
elif [ "${SKIP_BENCH:-0}" != 1 ]; then
  timeout "${T_BENCH:-240}" gpu-bundle/run.sh bench --out "$out" ${BENCH_ARGS:-} | tail -8
  stamp "bench"
fi
if [ "${BENCH_LATEST:-0}" = 1 ]; then  # later steps (decode profile, Llama check, e2e's `best`) read this run
  newest=$(ls -t "$out"/[0-9]*Z-*.jsonl 2>/dev/null | head -1)
  [ -n "$newest" ] && cp "$newest" bench/results/ && echo "bench results for later steps: $(basename "$newest")"
fi
if [ -n "${BENCH2_ARGS:-}" ]; then  # a second, narrower benchmark run (its own results file)
  mv "$out/bench.log" "$out/bench-1.log" 2>/dev/null
  timeout "${T_BENCH2:-120}" gpu-bundle/run.sh bench --out "$out" $BENCH2_ARGS | tail -4
  stamp "bench 2"
fi
if [ "${SCALING:-0}" = 1 ]; then  # how cost grows with size: its own scaling-*.jsonl (bench --scaling, ~4 min)
  timeout "${T_SCALING:-330}" gpu-bundle/run.sh shell python3 -m tilerosetta bench --scaling --out "$out" \
    ${SCALING_ARGS:-} > "$out/scaling.log" 2>&1; echo "scaling: exit $?"; tail -4 "$out/scaling.log"
  stamp "scaling"
fi
if [ "${HOSTPROF:-0}" = 1 ]; then  # issue 14 item 7: validated/raw us per call and a cProfile per backend
  timeout 120 gpu-bundle/run.sh shell python3 tools/host_cost_profile.py "$out/host_cost_profile.json" \
    > "$out/hostprof.log" 2>&1; echo "host cost profile: exit $?"; grep "^==" "$out/hostprof.log"
  stamp "host cost profile"
fi
if [ "${DECODEPROF:-0}" = 1 ]; then  # issue 14 item 5: decode GEMVs per contestant, decode-step kernel profile
  timeout "${T_DECODEPROF:-300}" gpu-bundle/run.sh shell python3 tools/decode_profile.py "$out/decode_profile.json" \
    ${DECODEPROF_ARGS:-} > "$out/decodeprof.log" 2>&1; echo "decode profile: exit $?"; tail -5 "$out/decodeprof.log"
  stamp "decode profile"
fi
if [ "${LLAMA:-0}" = 1 ] || { [ "${E2E:-0}" = 1 ] && [ "${E2E_CHECK:-0}" = 1 ]; }; then
  # issue 14 item 4: the Llama model and the HF patch per backend vs transformers fp32 (~1-2 min)
  timeout "${T_LLAMA:-180}" gpu-bundle/run.sh shell python3 tools/llama_gpu_check.py "$out/llama_gpu_check.json" \
    --max-seconds "$(( ${T_LLAMA:-180} - 50 ))" ${LLAMA_ARGS:-} > "$out/llama.log" 2>&1; echo "llama check: exit $?"; tail -6 "$out/llama.log"
  stamp "llama"
fi
if [ "${E2E:-0}" = 1 ]; then  # issue 14 items 5-7: end to end per backend, best, HF, torch.compile (~6 min)
  # every row is flushed as it is written: a timeout loses only the scenario that was running
  timeout "${T_E2E:-420}" gpu-bundle/run.sh shell python3 -m tilerosetta e2e --out-dir "$out" ${E2E_ARGS:-} \
    > "$out/e2e.log" 2>&1; echo "e2e: exit $?"; grep -E "^(e2e ->|weight-streaming|host cost|results:)" "$out/e2e.log"
  grep -c '"status": "ok"' "$out"/e2e-*.jsonl 2>/dev/null | sed 's/^/ok rows: /'
  stamp "e2e"
fi
# The device tool returns at most 8 files from $OUT (run 9 lost its tuned_configs.json to that limit):
# keep the results files and archives, pack the logs into one.
( cd "$out" && logs=$(ls machine.txt suite-summary.txt extra.log probe.log probe.jsonl bench*.log scaling.log llama.log hostprof.log e2e.log shard-walltime.txt peers-*.txt peers-*.log 2>/dev/null || true) \
  && [ -n "$logs" ] && tar -czf logs.tar.gz $logs && rm -f $logs )
ls "$out"
