"""A record of what touches CUDA in a worker, and whether its device mask was set then (issue 56).
CUDA reads CUDA_VISIBLE_DEVICES once, when something first asks it for devices: a worker that
asked before `use_gpu` set its mask would see every GPU of the node, or none, and `cuda:i` would
not be the GPU planned. On one GPU the mask is the identity, so nothing shows it; this record is how
the fake-GPU cluster proves the order on every CI run.

Where $COLLBENCH_TEST_CUDA_ORDER names a file, `install()` wraps the torch.cuda calls that ask
CUDA for devices (TOUCHES), and each call appends a line `pid name masked` to the file; `masked()`
marks the point where the worker set its mask. `touched_before_mask(path)` reads the file back.
Without the variable nothing is wrapped."""

from __future__ import annotations

import functools
import os

ENV = "COLLBENCH_TEST_CUDA_ORDER"
# what makes CUDA read the mask (or runs on a device): is_initialized() and torch.version are not
TOUCHES = ("_lazy_init", "init", "is_available", "device_count", "current_device", "set_device",
           "get_device_name", "get_device_properties", "synchronize", "mem_get_info")
_state = {"masked": False, "path": None}


def install() -> None:
    """Wrap TOUCHES where $COLLBENCH_TEST_CUDA_ORDER asks for the record (once per process)."""
    path = os.environ.get(ENV)
    if not path or _state["path"]:
        return
    import torch.cuda

    _state["path"] = path
    for name in TOUCHES:
        original = getattr(torch.cuda, name, None)
        if callable(original):
            setattr(torch.cuda, name, _recorded(name, original))


def masked() -> None:
    """The worker has set its mask: later touches are in order."""
    _state["masked"] = True


def _recorded(name: str, original):
    @functools.wraps(original)
    def call(*args, **kwargs):
        with open(_state["path"], "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {name} {'masked' if _state['masked'] else 'unmasked'}\n")
        return original(*args, **kwargs)

    return call


def touched_before_mask(path: str) -> list[str]:
    """The record's calls made before their process set its mask: `pid name` each."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return [" ".join(line.split()[:2]) for line in lines if line.endswith(" unmasked")]
