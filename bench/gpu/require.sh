# Sourced by the GPU checks: `require PYTHON MODULE...` ends the calling script with one SKIP line
# (through the caller's `summary` function) unless PYTHON sees a CUDA device and imports every
# MODULE, and bubblewrap is installed (the recipes' sandboxes need it). What bench/gpu/stage.sh
# staged counts (its env.sh is sourced first).
require() {
  local python=$1 module
  shift
  local env=${AGENT_RL_GPU_STAGE:-/tmp/agent-rl-gpu}/env.sh
  # shellcheck disable=SC1090
  if [[ -f $env ]]; then source "$env"; fi  # stage.sh: the staged site, bubblewrap
  if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    summary "SKIP no CUDA device visible to $python"
    exit 0
  fi
  for module in "$@"; do
    if ! "$python" -c "import $module" 2>/dev/null; then
      summary "SKIP python module $module is not importable by $python"
      exit 0
    fi
  done
  if ! command -v bwrap >/dev/null; then
    summary "SKIP bubblewrap (bwrap) is not installed; the recipe's sandboxes need it"
    exit 0
  fi
}
