#!/usr/bin/env bash
# verl smoke check for a lent GPU machine (one H200 is plenty): the `tiny` policy, 3 steps of
# colocated async through UniAgentLoop (ReAct in bubblewrap sandboxes on micro-swe L0 tasks),
# vLLM rollout, FSDP2 actor, a checkpoint at step 3. Finishes in well under 8 minutes or is
# killed at VERL_SMOKE_LIMIT_S; prints exactly one summary line:
#
#   verl_smoke: OK steps=3 wall_s=... score_mean=... response_len_mean=... checkpoint=yes log=...
#   verl_smoke: FAIL rc=1 steps=0 wall_s=40 last_error="..." log=...
#   verl_smoke: SKIP <what is missing>
#
# Needs a Python with torch (CUDA), verl 0.9.1, vllm, ray and agent-rl installed, and bubblewrap:
#   AGENT_RL_PYTHON=/path/to/python bash bench/gpu/verl_smoke.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
PY=${AGENT_RL_PYTHON:-python}
LIMIT=${VERL_SMOKE_LIMIT_S:-450}
OUT=${VERL_SMOKE_DIR:-$(mktemp -d /tmp/verl-smoke.XXXXXX)}
LOG="$OUT/verl.log"

summary() { echo "verl_smoke: $*"; }

source bench/gpu/require.sh
require "$PY" verl vllm ray uni_agent_core

started=$(date +%s)
# Its own session, so a timeout kills verl's child processes too; then stop the Ray daemons it
# started, so a rerun finds the GPU free.
setsid timeout --kill-after=20 "$LIMIT" "$PY" -m uni_agent_core.cli verl launch \
  --recipe recipes/tiny-verl-gpu.yaml --run-dir "$OUT/run" >"$LOG" 2>&1 &
launcher=$!
wait "$launcher"
rc=$?
kill -- -"$launcher" 2>/dev/null
"$PY" -m ray.scripts.scripts stop --force >/dev/null 2>&1 || ray stop --force >/dev/null 2>&1
wall=$(( $(date +%s) - started ))

# verl's console logger prints one "step:N - key:value - ..." line per training step, from the
# TaskRunner actor (Ray prefixes it with "(TaskRunnerV1 pid=...) ").
pattern='(^|\) )step:[0-9]+ '
steps=$(grep -cE "$pattern" "$LOG" || true)
last=$(grep -E "$pattern" "$LOG" | tail -n 1)
metric() { sed -nE "s/.*$1:([-0-9.e+]+).*/\\1/p" <<<"$last" | head -n 1; }
score=$(metric 'critic/score/mean')
length=$(metric 'response_length/mean')
checkpoint=no
if ls -d "$OUT"/run/verl/checkpoints/global_step_* >/dev/null 2>&1; then checkpoint=yes; fi

if [[ $rc -eq 0 && $steps -ge 3 && $checkpoint == yes ]]; then
  summary "OK steps=$steps wall_s=$wall score_mean=${score:-n/a} response_len_mean=${length:-n/a} checkpoint=$checkpoint log=$LOG"
  exit 0
fi
reason=$([[ $rc -eq 124 || $rc -eq 137 ]] && echo "timeout ${LIMIT}s" || echo "rc=$rc")
error=$(grep -E 'Error|error:|Traceback' "$LOG" | tail -n 1 | tr '"' "'" | cut -c1-200)
summary "FAIL $reason steps=$steps wall_s=$wall checkpoint=$checkpoint last_error=\"$error\" log=$LOG"
exit 1
