#!/usr/bin/env bash
# The CPU worker image's runtime, without a container engine: a Debian root file system made by
# mmdebstrap with the packages docker/Dockerfile's worker stage installs (the Debian packages of
# onebit-worker's and libonebit_py.so's shared libraries, found as its build stage finds them,
# and the packages its apt-get line names), this build's onebit-worker and onebit package put
# where the stage COPYs them, and the onebit user. In it, as that user:
#   - python3 imports numpy, onebit and onebit.torch from / (no PYTHONPATH);
#   - mpirun -np 2 onebit-worker runs a program job (tests/python/train_small.py on
#     onebit.torch): exit 0, its checkpoint under ONEBIT_CHECKPOINT_DIR, its output written;
#   - no compiler is installed.
# Opt-in (root, mmdebstrap, a Debian mirror; a few minutes): ONEBIT_ROOTFS_TEST=1, else skipped
# (exit 77). ONEBIT_DEBIAN_MIRROR picks the mirror [http://deb.debian.org/debian].
# usage: test_worker_rootfs.sh SOURCE_DIR ONEBIT_WORKER PYTHON_PACKAGE_DIR
set -u
SRC=$1 WORKER=$2 PYPKG=$3
if [ "${ONEBIT_ROOTFS_TEST:-0}" != 1 ]; then
  echo "SKIPPED: set ONEBIT_ROOTFS_TEST=1 to build the worker's root file system and run in it"
  exit 77
fi
[ "$(id -u)" -eq 0 ] || { echo "FAILED: needs root (mmdebstrap --mode=root, chroot, mount)"; exit 1; }
command -v mmdebstrap > /dev/null || { echo "FAILED: needs mmdebstrap (apt-get install mmdebstrap)"; exit 1; }
[ -f "$PYPKG/onebit/libonebit_py.so" ] || { echo "FAILED: no $PYPKG/onebit/libonebit_py.so (build onebit_py)"; exit 1; }
TMP=$(mktemp -d)
R=$TMP/root
cleanup() {
  for m in "$R/dev/shm" "$R/dev" "$R/proc"; do mountpoint -q "$m" 2> /dev/null && umount "$m"; done
  rm -rf "$TMP"
}
trap cleanup EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "[ PASSED ] $1"; }
bad() { failed=$((failed + 1)); echo "[ FAILED ] $1: $2"; }
check() { if eval "$2"; then ok "$1"; else bad "$1" "${3:-}"; fi; }

DF=$SRC/docker/Dockerfile
# The worker stage, backslash continuations joined.
stage=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$DF" | awk '$1 == "FROM" { on = ($NF == "worker") } on')
# What its apt-get line names besides the runtime list, and where it puts the package.
named=$(echo "$stage" | grep -m1 "apt-get install" | sed 's/.*--no-install-recommends//; s/&&.*//; s/\$(cat [^)]*)//')
dest=$(echo "$stage" | awk '$1 == "COPY" && $3 == "/out/python/onebit" { print $4 }')
runtime=$(for b in "$WORKER" "$PYPKG/onebit/libonebit_py.so"; do ldd "$b"; done | awk '/=> \//{print $3}' |
  sort -u | xargs -r -n1 readlink -f | xargs -r dpkg -S 2> /dev/null | cut -d: -f1 | sort -u)
pkgs=$(echo $runtime $named | tr ' ' ',')
check "the worker stage names python3, python3-torch, python3-numpy and where the package goes" '[[ ",$pkgs," == *,python3,* && ",$pkgs," == *,python3-torch,* && ",$pkgs," == *,python3-numpy,* ]] && [ -n "$dest" ]' "$pkgs -> $dest"
# --no-install-recommends, as the stage's apt-get.
if ! mmdebstrap --mode=root --variant=minbase --aptopt='APT::Install-Recommends "false"' \
  --include="$pkgs" bookworm "$R" \
  "${ONEBIT_DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$TMP/mmdebstrap.log" 2>&1; then
  tail -20 "$TMP/mmdebstrap.log"
  echo "FAILED: mmdebstrap"
  exit 1
fi
install -m 0755 "$WORKER" "$R/usr/local/bin/onebit-worker"
mkdir -p "$R$(dirname "$dest")" "$R/opt/prog" "$R/var/lib/onebit/checkpoints"
cp -r "$PYPKG/onebit" "$R$dest"
rm -rf "$R$dest/__pycache__"
cp "$SRC/tests/python/train_small.py" "$R/opt/prog/"
chroot "$R" sh -c 'useradd --uid 1000 --create-home --shell /bin/bash onebit && chown -R onebit:onebit /var/lib/onebit'
chroot "$R" python3 -m compileall -q "$dest"
out=$(cd / && chroot "$R" runuser -u onebit -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/onebit \
  python3 -c 'import numpy, onebit, onebit.torch, platform, torch; print("python", platform.python_version(), "torch", torch.__version__, "numpy", numpy.__version__, "onebit", onebit.version(), onebit.__file__)' 2>&1)
check "python3 imports numpy, onebit and onebit.torch as the onebit user, from $dest" 'echo "$out" | grep -q "onebit .* $dest/__init__.py$"' "$out"
echo "$out"
mount -t proc proc "$R/proc" && mount --bind /dev "$R/dev" && mount --bind /dev/shm "$R/dev/shm"
printf '{"program":{"entrypoint":"train_small.py","workdir":"/opt/prog","args":["--steps","30","--out","/tmp/out.f32"]},"steps":30}\n' > "$R/tmp/spec.json"
out=$(cd / && timeout 300 chroot "$R" runuser -u onebit -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/onebit \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader \
  mpirun -np 2 --bind-to none --tag-output onebit-worker --spec /tmp/spec.json --format json \
  --job-id job-000001 --checkpoint-dir /var/lib/onebit/checkpoints 2>&1); rc=$?
check "mpirun -np 2 onebit-worker runs the program job: exit 0, its checkpoint and output written" '[ $rc -eq 0 ] && [ -d "$R/var/lib/onebit/checkpoints/job-000001/step-00000025" ] && [ -s "$R/tmp/out.f32" ] && echo "$out" | grep -q "\"event\":\"summary\",\"steps\":30"' "rc=$rc $(echo "$out" | tail -15)"
check "no compiler in the runtime" '[ ! -e "$R/usr/bin/gcc" ] && [ ! -e "$R/usr/bin/cc" ] && [ ! -e "$R/usr/bin/cmake" ]' "$(ls -d "$R"/usr/bin/*gcc* "$R"/usr/bin/cc "$R"/usr/bin/cmake 2> /dev/null)"
echo "root file system: $(du -sh "$R" | cut -f1)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
