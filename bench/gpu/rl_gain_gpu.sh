#!/usr/bin/env bash
# bench/rl_gain.py on one CUDA device: SmolLM2-135M-Instruct, HFEngine and the embedded trainer
# on the GPU, the rest of the stack (gateway, ReAct harness, sandboxes, hidden tests) on the
# host's cores. More tasks and steps than the CPU run (--train-tasks 64, 96 held-out, up to 20
# steps of 8 tasks x 8 samples). RL gets what RL_GAIN_GPU_LIMIT_S (default 470 s, inside the
# issue's 8 minutes) leaves after the evaluations, less a reserve for the one after it
# (rl_gain.py --time-budget-s), so that the run ends with a before -> after; it is killed at
# the limit all the same. Prints exactly one summary line:
#
#   rl_gain_gpu: OK base=0.042 warm=0.310 after=0.450 rl_delta=+14.0 ci=[+6.2,+21.9] steps=20 rollout_tok_s=... train_tok_s=... rl_min=3.1 total_min=7.2 met=yes work=...
#   rl_gain_gpu: FAIL rc=124 phase="RL" last="[rl] step 12/20 ..." known="base=... warm=..." work=...
#   rl_gain_gpu: SKIP <what is missing>
#
# RL_GAIN_GPU_QUICK=1 runs the device path at the smoke's size (SmolLM2 on CUDA, 4 tasks, 2 steps;
# about a minute): a first check of a fresh device before the full run.
#
# RL_GAIN_GPU_KEEP=DIR copies the log, figures.json, the RL steps' metrics.jsonl and curves.png
# there (a lent machine's output folder).
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

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# shellcheck disable=SC1091
[[ -f "$STAGE/env.sh" ]] && source "$STAGE/env.sh"  # stage.sh: the staged site, bubblewrap

keep() {
  [[ -n ${RL_GAIN_GPU_KEEP:-} ]] || return 0
  mkdir -p "$RL_GAIN_GPU_KEEP"
  local file
  for file in "$LOG" "$WORK/prepare.log" "$WORK/figures.json" "$WORK/run/rl/metrics.jsonl" \
      "$WORK/run/curves.png"; do
    [[ -f $file ]] && cp "$file" "$RL_GAIN_GPU_KEEP/"
  done
  return 0
}

if [[ ${RL_GAIN_GPU_QUICK:-0} == 1 ]]; then
  device=cuda
  policy=smollm2-135m
  sizes=(--train-tasks 4 --eval-tasks 4 --base-tasks 2 --sft-epochs 1 --steps 2
         --eval-concurrency 4 --set trainer.batch_size=2 --set trainer.group_size=4)
elif [[ ${RL_GAIN_GPU_SMOKE:-0} == 1 ]]; then
  device=cpu
  policy=tiny
  sizes=(--train-tasks 2 --eval-tasks 2 --base-tasks 1 --sft-epochs 1 --steps 1
         --eval-concurrency 2 --set trainer.batch_size=2 --set trainer.group_size=2)
else
  device=cuda
  policy=smollm2-135m
  sizes=(--train-tasks 64 --eval-tasks 96 --base-tasks 24 --sft-epochs 3 --steps 20
         --eval-concurrency 96 --set trainer.batch_size=8 --set trainer.group_size=8
         --set engine.max_batch_size=96 --set trainer.backend.micro_batch_tokens=16384)
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
  keep
  summary "FAIL rc=1 phase=\"models prepare $policy\" last=\"$(tail -n 1 "$WORK/prepare.log")\" work=$WORK"
  exit 0
fi
left=$(( LIMIT - ($(date +%s) - started) ))
# Its own session, so that a timeout also ends the sandboxes the run started. The run's own
# budget stops 25 s short of the kill: the after-RL evaluation's reserve is an estimate.
setsid timeout --kill-after=15 "$left" "$PY" bench/rl_gain.py --levels L0 "${sizes[@]}" \
  --set "policy.name=$policy" --set "policy.dtype=bfloat16" --set "engine.device=$device" \
  --set "trainer.backend.device=$device" --work "$WORK/run" --json "$WORK/figures.json" \
  --time-budget-s $(( left - 25 )) >"$LOG" 2>&1 &
runner=$!
wait "$runner"
rc=$?
kill -- -"$runner" 2>/dev/null
total=$(( $(date +%s) - started ))
keep

complete=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("complete", False))' \
  "$WORK/figures.json" 2>/dev/null)
if [[ $rc -ne 0 || $complete != True ]]; then
  phase=$(grep -oE '^\[(base|warm-start|after-rl|rl)\]' "$LOG" | tail -n 1)
  last=$(grep -vE '^\s*$' "$LOG" | tail -n 1 | tr '"' "'" | cut -c1-160)
  known=$("$PY" -c 'import json, sys
rates = json.load(open(sys.argv[1]))["solve_rate"]
print(" ".join("%s=%.3f" % (name.replace(" ", "_"), rate) for name, rate in rates.items()))' \
    "$WORK/figures.json" 2>/dev/null)
  summary "FAIL rc=$rc wall_s=$total phase=\"${phase:-start}\" last=\"$last\" known=\"$known\" work=$WORK"
  exit 0
fi
"$PY" - "$WORK/figures.json" "$total" "$WORK" <<'PY'
import json, sys
figures, total, work = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
rate, (low, high), rl = figures["solve_rate"], figures["rl_delta_interval"], figures["rl"]
print(
    f"rl_gain_gpu: OK base={rate['base']:.3f} warm={rate['warm start']:.3f} "
    f"after={rate['after RL']:.3f} rl_delta={figures['rl_delta'] * 100:+.1f} "
    f"ci=[{low * 100:+.1f},{high * 100:+.1f}] steps={rl['steps']} "
    f"rollout_tok_s={rl['rollout_tokens_per_s']:.0f} train_tok_s={rl['trained_tokens_per_s']:.0f} "
    f"rl_min={figures['minutes']['RL']:.1f} total_min={total / 60:.1f} "
    f"met={'yes' if figures['met'] else 'no'} work={work}"
)
PY
