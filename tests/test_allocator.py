"""trainer.mmap_threshold_kb: glibc's threshold fixed, so a step's freed activations leave the process."""
from __future__ import annotations

import ctypes
import platform

import pytest

from ctxbench.training.allocator import set_mmap_threshold


def test_none_leaves_the_default():
    assert set_mmap_threshold(None) is False


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_large_blocks_are_given_back():
    import subprocess
    import sys

    code = """
import ctypes, sys
from ctxbench.training.allocator import set_mmap_threshold
libc = ctypes.CDLL("libc.so.6"); libc.malloc.restype = ctypes.c_void_p; libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "set": assert set_mmap_threshold(128)
def rss(): return int([l for l in open("/proc/self/status") if l.startswith("RssAnon")][0].split()[1])
p = libc.malloc(16 << 20); libc.free(p)   # a freed 16 MB mapping: glibc raises its threshold to 16 MB
blocks = [libc.malloc(256 << 10) for _ in range(400)]   # 100 MB of 256 KB blocks
for b in blocks: ctypes.memset(b, 1, 256 << 10)
pin = libc.malloc(1024); ctypes.memset(pin, 1, 1024)   # a live block above them: the heap cannot shrink
before = rss()
for b in blocks: libc.free(b)
print(before - rss())
"""
    given_back = {}
    for mode in ("default", "set"):
        out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True)
        given_back[mode] = int(out.stdout.strip()) / 1024
    assert given_back["set"] > 90  # MB: every block was its own mapping
    assert given_back["default"] < 10  # they stayed resident
