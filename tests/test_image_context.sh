#!/usr/bin/env bash
# The images' build stages see only what their Dockerfile COPYs into /src. This check rebuilds
# that view of the source tree for each Dockerfile under docker/, configures it as the Dockerfile
# does (CPU only) and asks ninja, without compiling (ninja -n), whether the targets the Dockerfile
# builds have every file they depend on. A file the build reads that no COPY brings (docs/openapi.json once)
# fails here in seconds instead of in the opt-in image builds (tests/test_containers.sh).
# It also reads what the stages install: the build stage has python3 (the configure step
# requires it), and a worker stage labelled org.onebit.python=yes (the Python front end, the
# value for onebitd --k8s-image-python) installs python3, python3-torch and python3-numpy and
# copies the onebit package built by the onebit_py target, whose files the configured tree has
# or ninja would make; a worker without it is labelled no.
# usage: test_image_context.sh SOURCE_DIR
set -u
SRC=$1
command -v ninja > /dev/null || { echo "FAILED: ninja is needed (scripts/install-deps.sh installs ninja-build)"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "[ PASSED ] $1"; }
bad() { failed=$((failed + 1)); echo "[ FAILED ] $1"; [ -n "${2:-}" ] && echo "$2" | tail -15; }

# The sources a Dockerfile copies to /src: "COPY a b /src/" and "COPY dir /src/dir" lines.
copies() {
  awk '$1 == "COPY" && $2 !~ /^--/ && $NF ~ /^\/src\// { for (i = 2; i < NF; i++) print $i }' "$1"
}
# The targets its build stage asks for (cmake --build ... --target a b c).
targets() {
  tr '\\' '\n' < "$1" | sed -n 's/.*cmake --build .*--target \([A-Za-z0-9_ -]*\).*/\1/p' | head -1
}
# Copies what the Dockerfile lists (minus the paths in $2..) into a fresh tree, configures it and
# dry-runs ninja on its targets; prints ninja's complaints.
dry_build() {
  local df=$1 tree=$TMP/ctx-$RANDOM
  shift
  mkdir -p "$tree"
  while read -r p; do
    local skip=0 x
    for x in "$@"; do [ "$p" = "$x" ] && skip=1; done
    [ $skip -eq 1 ] && continue
    [ -e "$SRC/$p" ] || { echo "COPY of a missing path: $p"; return 1; }
    mkdir -p "$tree/$(dirname "$p")"
    cp -a "$SRC/$p" "$tree/$p"
  done < <(copies "$df")
  cmake -S "$tree" -B "$tree/_build" -G Ninja -DONEBIT_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=Release > "$tree/configure.log" 2>&1 || { tail -20 "$tree/configure.log"; return 1; }
  # shellcheck disable=SC2046 # the target list is words
  ninja -n -C "$tree/_build" $(targets "$df") > "$tree/ninja.log" 2>&1 ||
    { grep -m3 -e "error" "$tree/ninja.log"; return 1; }
  # What a stage copies from /build/python/onebit: the package's modules (configured) and the
  # binding (built by onebit_py).
  if grep -q "/build/python/onebit" "$df"; then
    local f
    for f in __init__.py _lib.py torch.py; do
      [ -f "$tree/_build/python/onebit/$f" ] || { echo "no python/onebit/$f in the configured tree"; return 1; }
    done
    grep -q "python/onebit/libonebit_py.so" "$tree/ninja.log" ||
      { echo "ninja does not make python/onebit/libonebit_py.so for: $(targets "$df")"; return 1; }
  fi
}
# The lines of the stage FROM ... AS $2 (to the next FROM), backslash continuations joined.
stage() {
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$1" | awk -v s="$2" '$1 == "FROM" { on = ($NF == s) } on'
}
# The Python front end as a worker stage declares it: "yes", "no" or "" (no label).
python_label() { stage "$1" "$2" | sed -n 's/.*org\.onebit\.python="\([a-z]*\)".*/\1/p' | head -1; }

for df in "$SRC/docker/Dockerfile" "$SRC/docker/worker-cuda.Dockerfile"; do
  name=${df#"$SRC/"}
  t=$(targets "$df")
  if [ -z "$t" ] || [ -z "$(copies "$df")" ]; then
    bad "$name: its COPY lines and build targets are readable" "targets='$t'"
    continue
  fi
  if out=$(dry_build "$df" 2>&1); then
    ok "$name: what it copies to /src builds $t"
  else
    bad "$name: what it copies to /src builds $t" "$out"
  fi
done
# The build stages' configure step finds python3 (tests/python.cmake requires it).
for df in "$SRC/docker/Dockerfile" "$SRC/docker/worker-cuda.Dockerfile"; do
  name=${df#"$SRC/"}
  if stage "$df" build | grep "apt-get install" | grep -qw python3; then
    ok "$name: the build stage installs python3 for the configure step"
  else
    bad "$name: the build stage installs python3 for the configure step" "$(stage "$df" build | grep "apt-get install")"
  fi
done
# The worker stages' Python front end: labelled yes or no, and yes only with what it needs.
front_end() { # DOCKERFILE STAGE WANT
  local df=$1 st=$2 want=$3 name=${1#"$SRC/"} label lines
  label=$(python_label "$df" "$st")
  lines=$(stage "$df" "$st")
  if [ "$label" != "$want" ]; then
    bad "$name ($st): org.onebit.python=$want" "label '$label'"
  elif [ "$want" = no ]; then
    ok "$name ($st): org.onebit.python=no"
  elif echo "$lines" | grep "apt-get install" | grep -w python3 | grep -w python3-torch | grep -qw python3-numpy &&
    echo "$lines" | grep -q "COPY --from=build /out/python/onebit /usr/lib/python3/dist-packages/onebit" &&
    stage "$df" build | grep -q "cp -r /build/python/onebit /out/python/" &&
    echo "$lines" | grep -q "import numpy, onebit, onebit.torch"; then
    ok "$name ($st): org.onebit.python=yes, with python3, python3-torch, python3-numpy and the onebit package (imported at build)"
  else
    bad "$name ($st): org.onebit.python=yes, with python3, python3-torch, python3-numpy and the onebit package (imported at build)" "$lines"
  fi
}
front_end "$SRC/docker/Dockerfile" worker yes
front_end "$SRC/docker/worker-cuda.Dockerfile" worker-cuda no
# The check can fail: the first Dockerfile's context without docs/openapi.json, which onebitd
# embeds, must not build.
if out=$(dry_build "$SRC/docker/Dockerfile" docs/openapi.json 2>&1); then
  bad "a context without docs/openapi.json is refused" "ninja -n succeeded"
else
  check_msg=$(echo "$out" | grep -c "openapi.json")
  if [ "$check_msg" -gt 0 ]; then ok "a context without docs/openapi.json is refused"; else bad "a context without docs/openapi.json is refused" "$out"; fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
