#!/usr/bin/env bash
# Install an offline bundle (scripts/offline_bundle.sh) without any network: unpack its wheels and
# `pip install --no-index` collbench, its dependencies (Ray Core), pytest and pytest-timeout into
# VENV. A VENV that does not exist yet is created with --system-site-packages, so the image's own
# torch (and CUDA) is used.
#
#     scripts/install_bundle.sh DIR VENV
#
# DIR holds collbench-offline-pyXY.tar.xz for this interpreter. Bad arguments: exit 2, one line.
set -uo pipefail
die_usage() { echo "install_bundle: error: $*" >&2; exit 2; }
[ $# -eq 2 ] || die_usage "usage: install_bundle.sh DIR VENV"
bundle=$1 venv=$2
python=python3
[ -x "$venv/bin/python" ] && python="$venv/bin/python"
version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
archive="$bundle/collbench-offline-py$version.tar.xz"
[ -d "$bundle" ] || die_usage "bundle '$bundle' is not a folder"
if [ ! -f "$archive" ]; then
    have=$(cd "$bundle" && ls collbench-offline-py*.tar.xz 2>/dev/null | tr '\n' ' ')
    die_usage "no $archive for this Python ($("$python" -V 2>&1)); the bundle holds: ${have:-nothing}"
fi
set -e
if [ ! -x "$venv/bin/python" ]; then
    # A Python without ensurepip (Debian's without python3-venv) makes the venv without pip; the
    # image's pip then installs into it (pip >= 22.3: --python).
    python3 -m venv --system-site-packages "$venv" 2>/dev/null \
        || python3 -m venv --system-site-packages --without-pip "$venv"
fi
pip=("$venv/bin/python" -m pip)
"$venv/bin/python" -m pip --version >/dev/null 2>&1 || pip=(python3 -m pip --python "$venv/bin/python")
wheels="$venv/collbench-wheels"
rm -rf "$wheels" && mkdir -p "$wheels"
xz -dc "$archive" | tar -C "$wheels" -xf -
# --no-index: the registry is never asked, whatever pip's configuration says. collbench without its
# declared dependencies (they name ray[default]), then the bundle's list (Ray Core: offline_bundle.sh).
"${pip[@]}" install -q --no-index --find-links "$wheels" --disable-pip-version-check --no-deps collbench
"${pip[@]}" install -q --no-index --find-links "$wheels" --disable-pip-version-check -r "$wheels/requirements.txt"
rm -rf "$wheels"
"$venv/bin/python" -c "import orchestrator, ray, pyarrow, pandas, torch; print('installed from the bundle:', \
'collbench', orchestrator.__version__, '| ray', ray.__version__, '| torch', torch.__version__, 'from', torch.__file__)"
