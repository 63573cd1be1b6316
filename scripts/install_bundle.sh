#!/usr/bin/env bash
# Install an offline bundle (scripts/offline_bundle.sh) beside the image's own Python, without any
# network: `python3` (the first on PATH: on the GPU machine /opt/torch/.venv's, a virtual
# environment) keeps its torch, numpy, pyarrow and everything else it has; only what it lacks, or
# has in a version the bundle's packages cannot use, goes into TARGET, a folder for PYTHONPATH.
#
#     scripts/install_bundle.sh DIR TARGET
#     export PYTHONPATH=TARGET PATH=TARGET/bin:$PATH
#
# Why not a virtual environment: one made with --system-site-packages from a Python that is itself
# a virtual environment sees the *base* interpreter's packages, not the outer environment's
# (CPython issues 95469, 129445): the image's torch would vanish.
# How: pip, run by the image's interpreter, resolves the bundle's requirements against what the
# image has installed (`--dry-run --report`, no install); what it would install goes to TARGET
# (--no-deps, --no-compile: byte-compiling costs seconds and nothing needs it), except a
# replacement of the image's torch, numpy, pyarrow or pandas, which is refused (scripts/bundle_plan.py).
# DIR holds collbench-offline-pyXY.tar.xz for this interpreter. Bad arguments: exit 2, one line;
# a failed step: exit 1, one line naming it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die_usage() { echo "install_bundle: error: $*" >&2; exit 2; }
die() { echo "install_bundle: $*" >&2; exit 1; }
[ $# -eq 2 ] || die_usage "usage: install_bundle.sh DIR TARGET"
bundle=$1 target=$2
[ -d "$bundle" ] || die_usage "bundle '$bundle' is not a folder"
command -v python3 >/dev/null || die_usage "no python3 on PATH (the image's interpreter)"
version=$(python3 -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
archive="$bundle/collbench-offline-py$version.tar.xz"
if [ ! -f "$archive" ]; then
    have=$(cd "$bundle" && ls collbench-offline-py*.tar.xz 2>/dev/null | tr '\n' ' ')
    die_usage "no $archive for this Python ($(python3 -V 2>&1), $(command -v python3)); the bundle holds: ${have:-nothing}"
fi
[ ! -e "$target" ] || [ -d "$target" ] || die_usage "TARGET '$target' is not a folder"
python3 -m pip --version >/dev/null 2>&1 || die "$(command -v python3) has no pip: it is needed to install wheels"

wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
# unpacked by Python's tarfile (lzma is in the standard library): the GPU image need not have `xz`
python3 - "$archive" "$wheels" <<'PY' || die "could not unpack $archive"
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as archive:
    kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.12: refuse links out, devices
    archive.extractall(sys.argv[2], **kwargs)
PY
pip=(python3 -m pip --disable-pip-version-check)
# What the image lacks: pip's own resolver, against the image's installed distributions.
if ! "${pip[@]}" install -q --dry-run --no-index --find-links "$wheels" --report "$wheels/plan.json" \
        -r "$wheels/requirements.txt" 2> "$wheels/resolve.err"; then
    tail -n 5 "$wheels/resolve.err" >&2
    die "pip could not resolve the bundle's requirements against $(command -v python3)'s packages (above)"
fi
plan=$(python3 "$here/bundle_plan.py" install "$wheels/plan.json") || die "refused (above)"
image_has=$(python3 "$here/bundle_plan.py" protected)  # of torch, numpy, pyarrow, pandas: what must stay the image's
mkdir -p "$target"
# collbench itself --no-deps: its metadata names ray[default]; the bundle carries Ray Core.
# shellcheck disable=SC2086
"${pip[@]}" install -q --no-index --no-deps --no-compile --upgrade --target "$target" \
    $plan "$wheels"/collbench-*.whl || die "pip could not install the wheels into $target"
PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" python3 - "$target" "$plan" "$image_has" <<'PY' \
    || exit 1
import importlib, os, sys
target, plan, image_has = os.path.realpath(sys.argv[1]), sys.argv[2].split(), sys.argv[3].split()
names = sorted(os.path.basename(w).split("-")[0].lower().replace("_", "-") for w in plan)
modules = {}
for name in ("torch", "numpy", "pyarrow", "pandas", "ray", "orchestrator"):
    try:
        modules[name] = importlib.import_module(name)
    except ImportError as e:
        sys.exit(f"install_bundle: {name} does not import beside {sys.executable} ({e})")
torch, numpy, pyarrow, pandas, ray, orchestrator = modules.values()
where = {m.__name__: os.path.realpath(m.__file__) for m in (torch, numpy, pyarrow, pandas)}
inside = [name for name, path in where.items() if path.startswith(target + os.sep) and name in image_has]
if inside:
    sys.exit(f"install_bundle: {', '.join(inside)} came from {target}, not from the image")
print(f"installed from the bundle into {target}: collbench {orchestrator.__version__}, ray {ray.__version__}, "
      f"{len(names)} wheel(s) beside the image's ({', '.join(names)}) | torch {torch.__version__} from "
      f"{os.path.dirname(where['torch'])}")
PY
