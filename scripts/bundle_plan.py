"""Decisions of the offline bundle, standard library only (it runs on the building machine and on
the GPU image before anything is installed there):

    python3 scripts/bundle_plan.py tags WHEEL_DIR PYTHON_VERSION GLIBC
        every wheel installable on CPython PYTHON_VERSION, x86_64 Linux with glibc GLIBC; exit 1
        naming each one that is not
    python3 scripts/bundle_plan.py omit WHEEL_DIR IMAGE_FILE
        the wheels to leave out because the image already has their distribution (IMAGE_FILE: one
        name a line, `#` comments) and they are large; small ones stay as a fallback for an image
        whose version is too old (pip takes the image's own wherever it satisfies)
    python3 scripts/bundle_plan.py install PIP_REPORT
        from `pip install --dry-run --report` run by the image's own interpreter: the wheel files to
        install beside the image (one a line); exit 1 naming a protected distribution of the image
        (torch, numpy, pyarrow, pandas) that the bundle would replace
    python3 scripts/bundle_plan.py protected
        which of those the interpreter has installed
    python3 scripts/bundle_plan.py source REPO
        the digest of the sources a bundle is built from (JSON: offline_bundle.sh records it beside
        the archive; gpu_check.sh refuses a bundle whose record differs from the tree it runs)

Bad arguments: exit 2, one line.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

OMIT_FROM_BYTES = 1 << 20  # an image's distribution is left out of the bundle only from this size
PROTECTED = ("torch", "numpy", "pyarrow", "pandas")  # the image's own build of these must be what runs


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_tags(filename: str) -> tuple[str, set[str], set[str], set[str]]:
    """(distribution, python tags, abi tags, platform tags) of a wheel's file name (PEP 427)."""
    parts = filename[: -len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise ValueError(f"'{filename}' is not a wheel file name")
    return canonical(parts[0]), set(parts[-3].split(".")), set(parts[-2].split(".")), set(parts[-1].split("."))


def _platform_ok(platform: str, glibc: tuple[int, int]) -> bool:
    if platform == "any":
        return True
    legacy = {"manylinux1_x86_64": (2, 5), "manylinux2010_x86_64": (2, 12), "manylinux2014_x86_64": (2, 17)}
    if platform in legacy:
        return legacy[platform] <= glibc
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", platform)
    return bool(m) and (int(m.group(1)), int(m.group(2))) <= glibc


def installable(filename: str, python: tuple[int, int], glibc: tuple[int, int]) -> bool:
    """Whether CPython `python` on x86_64 Linux with `glibc` takes this wheel (PEP 425 tags)."""
    _, pys, abis, platforms = wheel_tags(filename)
    cp = f"cp{python[0]}{python[1]}"
    if not any(_platform_ok(p, glibc) for p in platforms):
        return False
    if "none" in abis and (pys & {"py3", f"py{python[0]}{python[1]}", cp}):
        return True
    if cp in pys and cp in abis:
        return True
    # the stable ABI: built for cp3N, runs on every CPython 3.M with M >= N
    return "abi3" in abis and any(re.fullmatch(r"cp3(\d+)", p) and int(p[3:]) <= python[1] for p in pys)


def not_installable(wheel_dir: Path, python: tuple[int, int], glibc: tuple[int, int]) -> list[str]:
    return [w.name for w in sorted(wheel_dir.glob("*.whl")) if not installable(w.name, python, glibc)]


def image_names(image_file: Path) -> set[str]:
    names = set()
    for line in image_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(canonical(re.split(r"[=<>!~ ]", line, maxsplit=1)[0]))
    return names


def to_omit(wheel_dir: Path, image: set[str]) -> list[Path]:
    return [w for w in sorted(wheel_dir.glob("*.whl"))
            if wheel_tags(w.name)[0] in image and w.stat().st_size >= OMIT_FROM_BYTES]


def install_plan(report: dict, installed: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(wheel files pip would install, refusals, notes) from pip's installation report, given the
    image's installed distributions (canonical name -> version)."""
    wheels, refusals, notes = [], [], []
    for item in report.get("install", []):
        name, version = canonical(item["metadata"]["name"]), item["metadata"]["version"]
        url = item.get("download_info", {}).get("url", "")
        if name in installed and name in PROTECTED:
            refusals.append(f"the bundle's {name} {version} would replace the image's {name} {installed[name]}: "
                            f"build the bundle with the image's versions (docs/GPU.md)")
            continue
        if name in installed:
            notes.append(f"the bundle's {name} {version} goes before the image's {installed[name]} (its version "
                         "does not satisfy what the bundle needs)")
        wheels.append(unquote(urlparse(url).path))
    return wheels, refusals, notes


# What the collbench wheel is built from: its packages and its metadata (requirements included)
SOURCE_DIRS = ("orchestrator", "workloads")
SOURCE_FILES = ("pyproject.toml",)


def source_files(repo: Path) -> list[str]:
    """The wheel's sources in `repo`, as paths relative to it, sorted: in a git checkout the files
    the device tool carries (tracked, and untracked that git does not ignore); elsewhere (the tree
    as the GPU machine receives it, without .git) every file but byte code."""
    import subprocess

    try:
        listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard", "--", *SOURCE_FILES, *SOURCE_DIRS],
                                capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        listed = None
    if listed is not None and listed.returncode == 0 and (repo / ".git").exists():
        return sorted({n for n in listed.stdout.split("\0") if n and (repo / n).is_file()})
    found = [name for name in SOURCE_FILES if (repo / name).is_file()]
    for top in SOURCE_DIRS:
        for path in (repo / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found.append(path.relative_to(repo).as_posix())
    return sorted(found)


def source_record(repo: Path) -> dict:
    """{"sha256": the sources' digest, "files": {path: its own digest, 16 hex digits}}."""
    files = {name: hashlib.sha256((repo / name).read_bytes()).hexdigest()[:16] for name in source_files(repo)}
    whole = hashlib.sha256("".join(f"{name}\0{digest}\n" for name, digest in files.items()).encode())
    return {"sha256": whole.hexdigest(), "files": files}


def source_difference(recorded: dict, repo: Path, shown: int = 3) -> str | None:
    """None where `repo`'s sources are those `recorded`; else which files differ (the first few)."""
    now = source_record(repo)
    if now["sha256"] == recorded.get("sha256"):
        return None
    old = recorded.get("files") or {}
    changed = sorted(n for n in now["files"].keys() & old.keys() if now["files"][n] != old[n])
    added, gone = sorted(now["files"].keys() - old.keys()), sorted(old.keys() - now["files"].keys())
    parts = [f"{label} {', '.join(names[:shown])}{' and more' if len(names) > shown else ''}"
             for label, names in (("changed", changed), ("new", added), ("gone", gone)) if names]
    return "; ".join(parts) or "the sources' digest differs"


def _installed() -> dict[str, str]:
    return {canonical(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()
            if d.metadata["Name"]}


def _version(text: str, what: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)\.(\d+)", text)
    if not m:
        raise SystemExit(_usage(f"{what} '{text}' is not MAJOR.MINOR"))
    return int(m.group(1)), int(m.group(2))


def _usage(message: str) -> int:
    print(f"bundle_plan: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    verb, *rest = argv or [""]
    if verb == "tags" and len(rest) == 3:
        bad = not_installable(Path(rest[0]), _version(rest[1], "Python"), _version(rest[2], "glibc"))
        for name in bad:
            print(f"bundle_plan: {name} does not install on CPython {rest[1]} with glibc {rest[2]} (x86_64)",
                  file=sys.stderr)
        return 1 if bad else 0
    if verb == "omit" and len(rest) == 2:
        for wheel in to_omit(Path(rest[0]), image_names(Path(rest[1]))):
            print(wheel)
        return 0
    if verb == "protected" and not rest:
        print(" ".join(name for name in PROTECTED if name in _installed()))
        return 0
    if verb == "install" and len(rest) == 1:
        wheels, refusals, notes = install_plan(json.loads(Path(rest[0]).read_text()), _installed())
        for line in refusals + notes:
            print(f"install_bundle: {line}", file=sys.stderr)
        if refusals:
            return 1
        for wheel in wheels:
            print(wheel)
        return 0
    if verb == "source" and len(rest) == 1:
        if not Path(rest[0]).is_dir():
            return _usage(f"REPO '{rest[0]}' is not a folder")
        print(json.dumps(source_record(Path(rest[0]))))
        return 0
    return _usage("usage: bundle_plan.py tags DIR PYTHON GLIBC | omit DIR IMAGE_FILE | install PIP_REPORT | protected"
                  " | source REPO")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
