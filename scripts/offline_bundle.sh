#!/usr/bin/env bash
# Build, on a machine with a package registry, what a GPU machine without one needs to run collbench
# and its GPU check (scripts/gpu_check.sh --bundle DIR): collbench as a wheel and every dependency
# except torch (the image's own torch is used), plus pytest for tests/gpu. Ray Core only (no
# dashboard): Ray's Java, RLlib, LLM and libraries on top of Ray Core are left out, native code is stripped (scripts/repack_wheels.py),
# and all wheels go into one solid xz archive, DIR/collbench-offline-pyXY.tar.xz. Beside it,
# DIR/collbench-offline-pyXY.json records what it was built for and from: the target, the commit,
# and the digest of the sources (scripts/bundle_plan.py source), which gpu_check.sh compares with
# the tree it runs before it installs anything (a bundle built before the last change is refused).
#
#     scripts/offline_bundle.sh DIR [--python 3.12] [--glibc 2.35] [--image FILE] [--max-mib 50]
#
# --python X.Y downloads wheels for that interpreter (CPython, manylinux x86_64) rather than this
# one; --glibc the target's C library (default 2.35: Ubuntu 22.04 and newer, Debian 12 has 2.36).
# Every wheel's tags are checked against that target before it is packed (scripts/bundle_plan.py).
# --image FILE: the distributions the target's image already has (one name a line, e.g.
# scripts/images/nvidia-h200.txt): their large wheels stay out (install_bundle.sh takes the image's).
# The archive must not exceed --max-mib MiB (default 50): the size is printed, exit 1 if over.
# Measured for Python 3.11 on 2026-12-01: 48.4 MiB, of which code collbench loads sets the floor:
# Ray's raylet, GCS server and _raylet.so 17.7 MiB, pyarrow's libraries 16.5, numpy (OpenBLAS)
# 8.7, pandas 5.2 (xz -9, each alone); with the repository (1 MiB) it fits the device tool's 64 MiB.
# With --image scripts/images/nvidia-h200.txt (Python 3.12): 28 wheels, 27 MiB at xz -1, about 25 s.
# Bad arguments: exit 2 with one line. Needs python3 with pip, xz, tar; strip (binutils) if present.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

die_usage() { echo "offline_bundle: error: $*" >&2; exit 2; }
dest="" python_version="" max_mib=50 glibc=2.35 image=""
usage="usage: offline_bundle.sh DIR [--python 3.12] [--glibc 2.35] [--image FILE] [--max-mib 50]"
while [ $# -gt 0 ]; do
    case "$1" in
        --python) [ $# -ge 2 ] || die_usage "--python needs a version such as 3.12"; python_version=$2; shift 2 ;;
        --max-mib) [ $# -ge 2 ] || die_usage "--max-mib needs a size in MiB"; max_mib=$2; shift 2 ;;
        --glibc) [ $# -ge 2 ] || die_usage "--glibc needs a version such as 2.35"; glibc=$2; shift 2 ;;
        --image) [ $# -ge 2 ] || die_usage "--image needs a file of distribution names"; image=$2; shift 2 ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) die_usage "unknown option $1 ($usage)" ;;
        *) [ -z "$dest" ] || die_usage "one DIR only, got '$dest' and '$1'"; dest=$1; shift ;;
    esac
done
[ -n "$dest" ] || die_usage "missing DIR ($usage)"
[[ "$glibc" =~ ^2\.[0-9]+$ ]] || die_usage "--glibc '$glibc' is not a glibc version such as 2.35"
[ -z "$image" ] || [ -f "$image" ] || die_usage "--image '$image' is not a file"
[[ -z "$python_version" || "$python_version" =~ ^3\.(1[0-9]|[2-9][0-9])$ ]] \
    || die_usage "--python '$python_version' is not a CPython version 3.10 or newer such as 3.12"
[[ "$max_mib" =~ ^[1-9][0-9]*$ ]] || die_usage "--max-mib '$max_mib' is not a whole number of MiB"
[ -d "$dest" ] || [ ! -e "$dest" ] || die_usage "DIR '$dest' is not a folder"
[ ! -d "$dest" ] || [ -z "$(ls -A "$dest")" ] \
    || die_usage "DIR '$dest' is not empty (the bundle goes into an empty or new folder)"
this_version=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
python_version=${python_version:-$this_version}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
set -e
start_s=$SECONDS

# collbench itself, built from this checkout; its requirements are read from the wheel it makes,
# with Ray Core for `ray[default]`: the dashboard, the job server and their libraries (gRPC, aiohttp,
# OpenTelemetry, py-spy, virtualenv: a third of the bundle) serve a cluster's operators, not an
# embedded run on one offline machine. install_bundle.sh installs collbench --no-deps, then these.
# With build isolation: pip fetches the build backend pyproject.toml names (setuptools>=68) rather than
# relying on this Python's own (an older setuptools and no `wheel` fail with "invalid command
# 'bdist_wheel'").
python3 -m pip wheel -q --no-deps -w "$stage/own" "$repo"
wheel=$(ls "$stage"/own/collbench-*.whl)
python3 - "$wheel" > "$stage/requirements.txt" <<'PY'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
for line in meta.splitlines():
    if line.startswith("Requires-Dist:") and "extra ==" not in line:
        requirement = line.split(":", 1)[1].strip()
        # the GPU image brings its own torch; matplotlib draws the HTML report and --plots, which
        # the GPU check does not make (its report is JSON): 4 MiB of wheels the carry limit needs
        if re.match(r"(torch|matplotlib)\b", requirement) is None:
            print(re.sub(r"^ray\[default\]", "ray", requirement))
# tests/gpu run from the bundle (scripts/gpu_check.sh); its timeout option needs pytest-timeout
print("pytest>=8")
print("pytest-timeout")
PY

# Every dependency in one pass, binary wheels only, for the target interpreter and C library (named
# even when the target is this Python, so that the wheels chosen never depend on the building machine).
nodot=${python_version/./}
target=(--python-version "$python_version" --implementation cp --abi "cp$nodot" --abi abi3 --abi none
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux2010_x86_64)
for minor in $(seq 17 "${glibc#2.}"); do target+=(--platform "manylinux_2_${minor}_x86_64"); done
python3 -m pip download -q --only-binary=:all: -d "$stage/download" "${target[@]}" -r "$stage/requirements.txt"
if ls "$stage"/download/torch-* >/dev/null 2>&1; then
    echo "offline_bundle: torch was pulled in by a dependency; the bundle must not carry it" >&2
    exit 1
fi
cp "$wheel" "$stage/download/"
python3 "$repo/scripts/bundle_plan.py" tags "$stage/download" "$python_version" "$glibc" \
    || { echo "offline_bundle: wheels above do not install on the target" >&2; exit 1; }
if [ -n "$image" ]; then
    python3 "$repo/scripts/bundle_plan.py" omit "$stage/download" "$image" > "$stage/omit.txt"
    while read -r left; do
        echo "offline_bundle: left out $(basename "$left") ($(( $(stat -c %s "$left") >> 20 )) MiB): the image has it"
        rm -f "$left"
    done < "$stage/omit.txt"
fi

python3 "$repo/scripts/repack_wheels.py" "$stage/download" "$stage/wheels"
cp "$stage/requirements.txt" "$stage/wheels/requirements.txt"  # what install_bundle.sh installs
printf 'python %s\nglibc %s\nimage %s\n' "$python_version" "$glibc" "${image:-none}" > "$stage/wheels/target.txt"
mkdir -p "$dest"
archive="$dest/collbench-offline-py${python_version/./}.tar.xz"
# With the x86 filter (native code is most of the bytes), one solid stream across all wheels on one
# thread. xz -1 first: for the image's bundle 28 MiB in 10 s here, against 20 MiB in 85 s at -9; only
# an archive over --max-mib is compressed again at -9 (the bundle without --image: 48 MiB at -9).
pack() { tar -C "$stage/wheels" -cf - . | xz -T1 --x86 --lzma2=preset="$1" > "$archive.partial"; }
pack 1
if [ "$(stat -c %s "$archive.partial")" -gt $((max_mib * 1048576)) ]; then
    echo "offline_bundle: over $max_mib MiB at xz -1; compressing again at -9 (about 1.5 min)"
    pack 9
fi
mv "$archive.partial" "$archive"
# what the bundle was built for and from (gpu_check.sh refuses it for a tree whose sources differ)
commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$( { git -C "$repo" status --porcelain -- orchestrator workloads pyproject.toml 2>/dev/null || true; } | head -c 1)
python3 - "$repo" "$python_version" "$glibc" "${image:-none}" "$commit" "${dirty:+yes}" \
        > "${archive%.tar.xz}.json" <<'PY'
import datetime, hashlib, json, pathlib, sys
sys.path.insert(0, sys.argv[1] + "/scripts")
from bundle_plan import source_record
repo, python, glibc, image, commit, dirty = sys.argv[1:7]
image_sha256 = hashlib.sha256(pathlib.Path(image).read_bytes()).hexdigest() if image != "none" else None
print(json.dumps({"python": python, "glibc": glibc, "image": image, "image_sha256": image_sha256, "commit": commit,
                  "uncommitted_changes": dirty == "yes",
                  "built_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "sources": source_record(pathlib.Path(repo))}, indent=1))
PY
size_bytes=$(stat -c %s "$archive")
size_mib=$(python3 -c "print(f'{$size_bytes / 1048576:.1f}')")
echo "offline bundle: $archive: $size_mib MiB ($(ls "$stage/wheels" | wc -l) wheels for Python $python_version;" \
     "limit $max_mib MiB) in $((SECONDS - start_s)) s"
if [ "$size_bytes" -gt $((max_mib * 1048576)) ]; then
    echo "offline_bundle: $archive is $size_mib MiB, over the $max_mib MiB limit" >&2
    exit 1
fi
