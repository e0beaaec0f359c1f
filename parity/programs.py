"""Traced JAX programs kept on disk, so that a later run neither traces nor compiles them.

JAX's persistent compilation cache keeps compiled programs, but it is keyed on the traced
program: a run that hits it still traces every program first, and for derivatives of order
three tracing takes as long as compiling. This store keeps the traced program itself
(``jax.export``, serialized StableHLO) under a name the caller gives, so that a second run
loads it instead of tracing it, and the compilation cache then supplies the compiled code.

A name is only half the key. The other half is a fingerprint of everything the program
could depend on: the source of ``jaxpool`` and ``parity``, and the versions of jax, jaxlib
and numpy. Any change to them starts a fresh set of programs, so a stored program never
stands in for code that has changed.
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
import shutil
from typing import Callable, Iterator

import jax
import numpy as np
from jax import export

__all__ = ["ProgramStore", "active_store", "fingerprint", "program_store", "serialization_available"]

_PACKAGES = ("jaxpool", "parity")
_DISTRIBUTIONS = ("jax", "jaxlib", "numpy")


@functools.lru_cache(maxsize=None)
def fingerprint() -> str:
    """A hash of the jaxpool and parity sources and of the versions of jax, jaxlib, numpy."""
    h = hashlib.sha256()
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
    """Exported JAX programs, one file per name, in a folder of ``directory`` named by the
    fingerprint; opening the store removes the folders of other fingerprints, whose
    programs can no longer be used."""

    def __init__(self, directory: pathlib.Path):
        self.root = pathlib.Path(directory)
        self.directory = self.root / fingerprint()[:32]
        if self.root.is_dir():
            for stale in self.root.iterdir():
                if stale != self.directory and stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)

    def _path(self, name: str) -> pathlib.Path:
        return self.directory / f"{hashlib.sha256(name.encode()).hexdigest()}.stablehlo"

    def _load(self, name: str) -> export.Exported | None:
        """The program stored under ``name``, or None (never stored, or unreadable)."""
        try:
            return export.deserialize(bytearray(self._path(name).read_bytes()))
        except Exception:  # noqa: BLE001 - a missing or damaged entry is a miss
            return None

    def _save(self, name: str, program: export.Exported) -> None:
        """Store ``program`` under ``name``; written to a temporary file and renamed, so that
        a reader in another process never sees half a program."""
        self._write(self._path(name), program.serialize())

    def _write(self, path: pathlib.Path, data: bytes | bytearray) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)

    def eval_shape(self, fn: Callable, name: str, *args) -> list[jax.ShapeDtypeStruct]:
        """``jax.eval_shape(fn, *args)`` for a ``fn`` that returns a list of arrays, from the
        store when ``name`` is in it (else traced now and stored); ``name`` gets the
        arguments' shapes and dtypes added."""
        name = f"{name}|eval_shape|{_avals(args)}"
        path = self._path(name).with_suffix(".json")
        try:
            return [jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))
                    for shape, dtype in json.loads(path.read_text())]
        except Exception:  # noqa: BLE001 - a missing or damaged entry is a miss
            pass
        out = jax.eval_shape(fn, *args)
        self._write(path, json.dumps([[list(o.shape), np.dtype(o.dtype).name] for o in out]).encode())
        return out

    def jit(self, fn: Callable, name: str, *args) -> Callable:
        """``jax.jit(fn)``, traced from the store when ``name`` is in it (else traced now
        and stored); ``args`` are the arguments it will be called with, and ``name`` gets
        their shapes and dtypes added."""
        name = f"{name}|jit|{_avals(args)}"
        program = self._load(name)
        if program is None:
            program = export.export(jax.jit(fn))(*args)
            self._save(name, program)
        return jax.jit(program.call)


def serialization_available() -> bool:
    """Whether ``jax.export`` can serialize here (it needs the flatbuffers package)."""
    return importlib.util.find_spec("flatbuffers") is not None


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
