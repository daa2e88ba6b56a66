#!/usr/bin/env bash
# The whole train DAG on a lent GPU machine (one H200 is plenty), tiny policy: validate data ->
# Best-of-N on the base policy served by vLLM (the serve stage) -> verl training (colocated,
# vLLM rollout, FSDP2 actor; 2 steps, a checkpoint at step 2) -> the checkpoint merged by verl's
# model merger, served by vLLM and evaluated on 4 held-out micro-swe tasks -> MLflow. Finishes in
# under 8 minutes or is killed at VERL_DAG_LIMIT_S; prints exactly one summary line:
#
#   verl_dag: OK stages=validate,best_of_n,train,evaluate,log wall_s=... kept=... pass@1=... served=base,verl-step-2 log=...
#   verl_dag: FAIL rc=1 wall_s=... last_error="..." log=...
#   verl_dag: SKIP <what is missing>
#
# Needs one Python with torch (CUDA) and, beyond what the H200 image has (torch, transformers):
#   vllm (CUDA build; its own dependencies), verl==0.9.1 (no extras), ray, prefect, mlflow, and
#   agent-rl's own dependencies (the 70 distributions of device-wheels.txt cover the embedded
#   run; fastapi, uvicorn, httpx, swebench, datasets, ... are among them). The serve stage runs
#   vLLM with this same Python (serve.python). vLLM's CUDA wheel alone is several hundred MB, far
#   over one device call's 64 MiB: like rl_gain_gpu.sh's bundle it must travel in parts
#   (pack.sh/stage.sh). This list was not measured on a device (none was lent to the session
#   that wrote the script); the script checks each module and prints SKIP naming the first one
#   missing.
#
#   AGENT_RL_PYTHON=/path/to/python bash bench/gpu/verl_dag_smoke.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
PY=${AGENT_RL_PYTHON:-python}
LIMIT=${VERL_DAG_LIMIT_S:-470}
OUT=${VERL_DAG_DIR:-$(mktemp -d /tmp/verl-dag.XXXXXX)}
LOG="$OUT/dag.log"

summary() { echo "verl_dag: $*"; }

source bench/gpu/require.sh
require "$PY" vllm verl ray prefect mlflow uni_agent_core

started=$(date +%s)
# Its own session, so a timeout kills verl's and the servers' children too; then stop the Ray
# daemons verl started, so a rerun finds the GPU free.
setsid timeout --kill-after=20 "$LIMIT" env PREFECT_HOME="$OUT/prefect" "$PY" - "$OUT" "$PY" "$PWD" \
  >"$LOG" 2>&1 <<'EOF' &
import json
import os
import sys

out, python, root = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, root)
os.chdir(out)
from flows.train import train  # noqa: E402

overrides = [
    f"tracking.tracking_uri=sqlite:///{out}/mlruns.db",
    "tasks.n=4",
    "curriculum.best_of_n=2",
    "eval.enabled=true",
    "eval.max_tasks=4",
    "eval.k=1",
    "trainer.total_steps=2",
    "trainer.checkpoint_interval=2",
    f"serve.python={python}",
    'serve.extra_args=["--gpu-memory-utilization", "0.3"]',
]
recipe = os.path.join(root, "recipes", "tiny-verl-gpu.yaml")
result = train(recipe=recipe, overrides=overrides)
print("DAG_RESULT " + json.dumps(result, default=str))
EOF
launcher=$!
wait "$launcher"
rc=$?
kill -- -"$launcher" 2>/dev/null
"$PY" -m ray.scripts.scripts stop --force >/dev/null 2>&1 || ray stop --force >/dev/null 2>&1
wall=$(( $(date +%s) - started ))

result=$(sed -n 's/^DAG_RESULT //p' "$LOG" | tail -n 1)
if [[ $rc -eq 0 && -n $result ]]; then
  line=$("$PY" - "$result" "$OUT" <<'EOF'
import json, sys
result, out = json.loads(sys.argv[1]), sys.argv[2]
difficulty = json.load(open(f"{out}/runs/tiny-verl-gpu/curriculum/difficulty.json"))
served = sorted({v for k, v in result["served"].items() if k.endswith(".label")})
print(f"stages=validate,best_of_n,train,evaluate,log kept={len(difficulty['kept_ids'])} "
      f"pass@1={result['eval']['eval/pass@1']:.3f} served={','.join(served)}")
EOF
)
  summary "OK $line wall_s=$wall log=$LOG"
  exit 0
fi
reason=$([[ $rc -eq 124 || $rc -eq 137 ]] && echo "timeout ${LIMIT}s" || echo "rc=$rc")
error=$(grep -E 'Error|error:|Traceback' "$LOG" | tail -n 1 | tr '"' "'" | cut -c1-200)
summary "FAIL $reason wall_s=$wall last_error=\"$error\" log=$LOG"
exit 1
