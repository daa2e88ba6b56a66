#!/usr/bin/env bash
# bench/rl_gain.py on one CUDA device: SmolLM2-135M-Instruct, HFEngine and the embedded trainer
# on the GPU, the rest of the stack (gateway, ReAct harness, sandboxes, hidden tests) on the
# host's cores. More tasks and steps than the CPU run (--train-tasks 64, 96 held-out, 20 steps
# of 8 tasks x 8 samples). Killed at RL_GAIN_GPU_LIMIT_S (default 470 s, inside the issue's 8
# minutes); prints exactly one summary line:
#
#   rl_gain_gpu: OK base=0.042 warm=0.310 after=0.450 rl_delta=+14.0 ci=[+6.2,+21.9] rl_min=3.1 total_min=7.2 met=yes work=...
#   rl_gain_gpu: FAIL rc=124 phase="RL" last="[rl] step 12/20 ..." work=...
#   rl_gain_gpu: SKIP <what is missing>
#
# On the lent H200, the packages its image lacks come staged by bench/gpu/stage.sh (see
# bench/gpu/pack.sh). Here, RL_GAIN_GPU_SMOKE=1 runs the same script on the CPU with the tiny
# policy, 2 tasks and 1 step, to check the script itself:
#
#   RL_GAIN_GPU_SMOKE=1 AGENT_RL_PYTHON=.venv/bin/python bash bench/gpu/rl_gain_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
PY=${AGENT_RL_PYTHON:-python3}
LIMIT=${RL_GAIN_GPU_LIMIT_S:-470}
STAGE=${AGENT_RL_GPU_STAGE:-/tmp/agent-rl-gpu}
WORK=${RL_GAIN_GPU_WORK:-$(mktemp -d /tmp/rl-gain-gpu.XXXXXX)}
LOG="$WORK/rl_gain.log"
mkdir -p "$WORK"
summary() { echo "rl_gain_gpu: $*"; }

if [[ -f "$STAGE/site/.complete" ]]; then
  export PYTHONPATH="$STAGE/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

if [[ ${RL_GAIN_GPU_SMOKE:-0} == 1 ]]; then
  device=cpu
  policy=tiny
  sizes=(--train-tasks 2 --eval-tasks 2 --base-tasks 1 --sft-epochs 1 --steps 1
         --eval-concurrency 2 --set trainer.batch_size=2 --set trainer.group_size=2)
else
  device=cuda
  policy=smollm2-135m
  sizes=(--train-tasks 64 --eval-tasks 96 --base-tasks 24 --sft-epochs 3 --steps 20
         --eval-concurrency 32 --set trainer.batch_size=8 --set trainer.group_size=8
         --set engine.max_batch_size=64 --set trainer.backend.micro_batch_tokens=16384)
  if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null
  then
    summary "SKIP no CUDA device visible to $PY"
    exit 0
  fi
fi
for module in uni_agent_core verl fastapi uvicorn swebench; do
  if ! "$PY" -c "import $module" 2>/dev/null; then
    summary "SKIP python module $module is not importable by $PY (stage the bundle: bench/gpu/pack.sh)"
    exit 0
  fi
done

started=$(date +%s)
if ! "$PY" -m uni_agent_core.cli models prepare "$policy" >"$WORK/prepare.log" 2>&1; then
  summary "FAIL rc=1 phase=\"models prepare $policy\" last=\"$(tail -n 1 "$WORK/prepare.log")\" work=$WORK"
  exit 0
fi
# Its own session, so that a timeout also ends the sandboxes the run started.
setsid timeout --kill-after=15 "$LIMIT" "$PY" bench/rl_gain.py --levels L0 "${sizes[@]}" \
  --set "policy.name=$policy" --set "policy.dtype=bfloat16" --set "engine.device=$device" \
  --set "trainer.backend.device=$device" --work "$WORK/run" --json "$WORK/figures.json" \
  >"$LOG" 2>&1 &
runner=$!
wait "$runner"
rc=$?
kill -- -"$runner" 2>/dev/null
total=$(( $(date +%s) - started ))

if [[ $rc -ne 0 || ! -f "$WORK/figures.json" ]]; then
  phase=$(grep -oE '^\[(base|warm-start|after-rl|rl)\]' "$LOG" | tail -n 1)
  last=$(grep -vE '^\s*$' "$LOG" | tail -n 1 | tr '"' "'" | cut -c1-160)
  summary "FAIL rc=$rc wall_s=$total phase=\"${phase:-start}\" last=\"$last\" work=$WORK"
  exit 0
fi
"$PY" - "$WORK/figures.json" "$total" "$WORK" <<'PY'
import json, sys
figures, total, work = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
rate, (low, high) = figures["solve_rate"], figures["rl_delta_interval"]
print(
    f"rl_gain_gpu: OK base={rate['base']:.3f} warm={rate['warm start']:.3f} "
    f"after={rate['after RL']:.3f} rl_delta={figures['rl_delta'] * 100:+.1f} "
    f"ci=[{low * 100:+.1f},{high * 100:+.1f}] rl_min={figures['minutes']['RL']:.1f} "
    f"total_min={total / 60:.1f} met={'yes' if figures['met'] else 'no'} work={work}"
)
PY
