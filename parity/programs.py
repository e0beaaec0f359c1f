"""Compiled JAX programs and torch's results kept on disk, so that a later run neither
traces nor compiles nor recomputes them.

JAX's persistent compilation cache keeps compiled programs, but it is keyed on the traced
program: a run that hits it still traces and lowers every program first, and for
derivatives of order three tracing takes as long as compiling. This store keeps the
compiled executable itself (``jax.experimental.serialize_executable``, the same bytes the
compilation cache holds) under a name the caller gives, so that a second run loads it and
calls it without tracing, lowering or hashing anything. It keeps torch's side of a
comparison too (``ProgramStore.results``): nested ``torch.func.jvp`` runs op by op in
Python and costs more than running the stored JAX program.

A name is only half the key. The other half is a fingerprint of everything a program or a
result could depend on: the source of ``jaxpool`` and ``parity``, the versions of jax,
jaxlib, numpy and torch, and the host (XLA's platform and device kind, the machine, the
CPU's features, torch's vector instructions). Any change to them starts a fresh store, so a
stored program never stands in for code that has changed, nor runs on a CPU it was not
built for.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import pickle
import platform
import shutil
from typing import Callable, Iterator, TypeVar

import jax
import numpy as np

__all__ = ["ProgramStore", "active_store", "fingerprint", "program_store", "serialization_available"]

T = TypeVar("T")

_PACKAGES = ("jaxpool", "parity")
_DISTRIBUTIONS = ("jax", "jaxlib", "numpy", "torch")


def _host() -> str:
    """What a compiled program and torch's results are tied to: XLA's platform and device
    kind, the machine, its CPU features, and the vector instructions torch's kernels use."""
    import torch

    device = jax.devices()[0]
    features = platform.processor()
    try:
        with open("/proc/cpuinfo") as info:
            features = next((line for line in info if line.startswith(("flags", "Features"))),
                            features)
    except OSError:
        pass
    return (f"{device.platform} {device.device_kind} {device.client.platform_version} "
            f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()} {features}")


@functools.lru_cache(maxsize=None)
def fingerprint() -> str:
    """A hash of the jaxpool and parity sources, of the versions of jax, jaxlib, numpy and
    torch, and of the host (``_host``)."""
    h = hashlib.sha256()
    h.update(_host().encode() + b"\n")
    for dist in _DISTRIBUTIONS:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        h.update(f"{dist}=={version}\n".encode())
    for name in _PACKAGES:
        package = pathlib.Path(importlib.import_module(name).__path__[0])
        for path in sorted(package.rglob("*.py")):
            h.update(path.relative_to(package).as_posix().encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


class ProgramStore:
    """Compiled JAX programs and torch's results, one file per name, in a folder of
    ``directory`` named by the fingerprint; opening the store removes the folders of other
    fingerprints, whose entries can no longer be used."""

    def __init__(self, directory: pathlib.Path):
        self.root = pathlib.Path(directory)
        self.directory = self.root / fingerprint()[:32]
        if self.root.is_dir():
            for stale in self.root.iterdir():
                if stale != self.directory and stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)

    def _entry(self, name: str, suffix: str, compute: Callable[[], T],
               encode: Callable[[T], bytes], decode: Callable[[bytes], T]) -> T:
        """``decode`` of the entry stored under ``name``, or ``compute()``, stored now. An
        entry is written to a temporary file and renamed, so that a reader in another
        process never sees half of one."""
        path = self.directory / f"{hashlib.sha256(name.encode()).hexdigest()}{suffix}"
        try:
            return decode(path.read_bytes())
        except Exception:  # noqa: BLE001 - a missing or damaged entry is a miss
            pass
        value = compute()
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(encode(value))
        tmp.replace(path)
        return value

    def eval_shape(self, fn: Callable, name: str, *args) -> list[jax.ShapeDtypeStruct]:
        """``jax.eval_shape(fn, *args)`` for a ``fn`` that returns a list of arrays, from the
        store when ``name`` is in it (else traced now and stored); ``name`` gets the
        arguments' shapes and dtypes added."""
        return self._entry(
            f"{name}|eval_shape|{_avals(args)}", ".json", lambda: jax.eval_shape(fn, *args),
            lambda out: json.dumps([[list(o.shape), np.dtype(o.dtype).name] for o in out]).encode(),
            lambda data: [jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))
                          for shape, dtype in json.loads(data)])

    def jit(self, fn: Callable, name: str, *args,
            compiler_options: dict | None = None) -> Callable:
        """``jax.jit(fn)`` compiled for ``args`` (with XLA's ``compiler_options``), from
        the store when ``name`` is in it (else compiled now and stored); ``name`` gets the
        arguments' shapes and dtypes and the options added. The result takes arguments of
        exactly those shapes and dtypes."""
        from jax.experimental import serialize_executable

        options = dict(sorted((compiler_options or {}).items()))
        # The executable with its argument and result trees (which pickle).
        return self._entry(
            f"{name}|jit|{_avals(args)}|{options}", ".xla",
            lambda: jax.jit(fn).lower(*args).compile(options or None),
            lambda compiled: pickle.dumps(serialize_executable.serialize(compiled)),
            lambda data: serialize_executable.deserialize_and_load(*pickle.loads(data)))

    def results(self, name: str, compute: Callable[[], T]) -> T:
        """``compute()``, from the store when ``name`` is in it (else computed now and
        stored); the result must pickle."""
        return self._entry(f"{name}|results", ".pickle", compute, pickle.dumps, pickle.loads)


def serialization_available() -> bool:
    """Whether this jax can serialize compiled programs."""
    return importlib.util.find_spec("jax.experimental.serialize_executable") is not None


def _avals(args) -> str:
    return str(jax.tree_util.tree_map(lambda a: (a.shape, np.dtype(a.dtype).name), args))


_active: list[ProgramStore] = []


def active_store() -> ProgramStore | None:
    """The store that ``program_store`` opened, innermost first; None outside one."""
    return _active[-1] if _active else None


@contextlib.contextmanager
def program_store(directory: pathlib.Path | None) -> Iterator[ProgramStore | None]:
    """Within this block, programs that name themselves (``compare(program_key=...)``) are
    kept in ``directory`` (nothing changes for None)."""
    if directory is None or not serialization_available():
        yield None
        return
    store = ProgramStore(directory)
    _active.append(store)
    try:
        yield store
    finally:
        _active.remove(store)
