#!/usr/bin/env bash
# On the lent machine: keeps the .gpu/part-NN this call carried (bench/gpu/pack.sh) under
# $AGENT_RL_GPU_STAGE (default /tmp/agent-rl-gpu), and once every part of MANIFEST is there,
# checks the bundle's sha256, installs its wheels into $AGENT_RL_GPU_STAGE/site, unpacks its
# .debs under $AGENT_RL_GPU_STAGE/root and writes $AGENT_RL_GPU_STAGE/env.sh, which the GPU
# checks source: the site first on PYTHONPATH, and the staged bubblewrap on PATH when the machine
# has none and the staged one can make a sandbox there. Prints one line: "stage: K/N parts" or
# "stage: complete (M wheels in DIR; bwrap ...)". Exits 1 on a bad bundle.
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=${AGENT_RL_GPU_STAGE:-/tmp/agent-rl-gpu}
PY=${AGENT_RL_PYTHON:-python3}
mkdir -p "$stage/parts"
[[ -f .gpu/MANIFEST ]] || { echo "stage: no .gpu/MANIFEST carried (run bench/gpu/pack.sh here)"; exit 1; }
cp .gpu/MANIFEST "$stage/MANIFEST"
cp .gpu/part-* "$stage/parts/" 2>/dev/null || true
if [[ -f "$stage/site/.complete" ]]; then
  echo "stage: complete ($(ls "$stage/wheels" | wc -l) wheels in $stage/site; $(cat "$stage/bwrap"))"
  exit 0
fi
# shellcheck disable=SC1091
source "$stage/MANIFEST"
have=$(ls "$stage/parts" | wc -l)
if (( have < parts )); then
  echo "stage: $have/$parts parts"
  exit 0
fi
cat "$stage"/parts/part-* >"$stage/bundle.tar"
if [[ $(sha256sum "$stage/bundle.tar" | cut -d' ' -f1) != "$sha256" ]]; then
  echo "stage: bundle sha256 mismatch (parts from different packs?); rerun pack.sh and stage again"
  exit 1
fi
tar -C "$stage" -xf "$stage/bundle.tar" && rm "$stage/bundle.tar"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$stage/site" "$stage"/wheels/*.whl
for deb in "$stage"/debs/*.deb; do
  if [[ -f $deb ]]; then dpkg -x "$deb" "$stage/root"; fi
done
{
  echo "export PYTHONPATH=\"$stage/site\${PYTHONPATH:+:\$PYTHONPATH}\""
  if command -v bwrap >/dev/null; then
    echo "bwrap: the machine's" >"$stage/bwrap"
  elif "$stage/root/usr/bin/bwrap" --ro-bind / / --unshare-all --die-with-parent true 2>"$stage/bwrap.err"; then
    echo "export PATH=\"$stage/root/usr/bin:\$PATH\""
    echo "bwrap: staged" >"$stage/bwrap"
  else
    echo "bwrap: none (the staged one failed: $(head -c 160 "$stage/bwrap.err"))" >"$stage/bwrap"
  fi
} >"$stage/env.sh"
touch "$stage/site/.complete"
echo "stage: complete ($(ls "$stage/wheels" | wc -l) wheels in $stage/site; $(cat "$stage/bwrap"))"
