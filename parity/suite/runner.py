"""Running the suite's cases: in this process or in worker processes, with the programs
kept on disk between runs.

Nearly all of a case's time is JAX tracing and compiling its one fused program (the value
and every derivative check); the compiled programs are tiny and run in microseconds. So a
second run loads each compiled program and torch's results from ``parity.programs``' store
in the cache directory (JAX's persistent compilation cache beside it serves programs that
must be traced again), and the cases, independent of one another, spread over the CPUs.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pathlib
import queue
import sys
import threading
from typing import Callable, Iterator, Sequence

from .. import programs
from .cases import CaseResult, run_case

__all__ = ["compilation_cache", "default_cache_dir", "default_jobs", "run_cases"]


def default_cache_dir() -> pathlib.Path:
    """The per-user cache directory of the suite's compiled programs (the platform's user
    cache directory, ``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux, then ``jaxpool/parity``)."""
    home = pathlib.Path.home()
    if sys.platform == "win32":
        base = pathlib.Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = home / "Library" / "Caches"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        # The XDG spec ignores a relative path.
        base = pathlib.Path(xdg) if os.path.isabs(xdg) else home / ".cache"
    return base / "jaxpool" / "parity"


def default_jobs() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


_CACHE_OPTIONS = {
    "jax_compilation_cache_dir": None,  # set to the directory
    # Every program, however fast it compiled and however small it is: the suite's programs
    # take a second or two each, below JAX's default thresholds for caching.
    "jax_persistent_cache_min_compile_time_secs": 0.0,
    "jax_persistent_cache_min_entry_size_bytes": -1,
}


@contextlib.contextmanager
def compilation_cache(path: pathlib.Path | None) -> Iterator[None]:
    """Compile through JAX's persistent cache in ``path``, and keep the compiled programs
    and torch's results in ``path / "programs"`` (nothing changes for None); the previous
    settings come back on exit."""
    if path is None:
        yield
        return
    import jax
    from jax.experimental.compilation_cache import compilation_cache as jax_cache

    path.mkdir(parents=True, exist_ok=True)
    before = {name: getattr(jax.config, name) for name in _CACHE_OPTIONS}
    for name, value in _CACHE_OPTIONS.items():
        jax.config.update(name, str(path) if value is None else value)
    jax_cache.reset_cache()  # JAX reads the settings once, at its first compilation
    try:
        with programs.program_store(path / "programs"):
            yield
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        jax_cache.reset_cache()


_worker_settings = contextlib.ExitStack()


def _start_worker(cache_dir: pathlib.Path | None) -> None:
    import torch

    # The suite's arrays are tiny; threads would only add overhead.
    torch.set_num_threads(1)
    _worker_settings.enter_context(compilation_cache(cache_dir))  # for the worker's life


def run_cases(cases: Sequence, jobs: int = 1, cache_dir: pathlib.Path | None = None,
              done: Callable[[CaseResult], None] = lambda result: None) -> list[CaseResult]:
    """Run every case in ``jobs`` processes: this one and ``jobs - 1`` workers, each taking
    the next case when it is done with one; compiling through the cache in ``cache_dir``
    (none for None); ``done`` sees each result as it comes, in this process's main thread.
    Returns the results in the order of ``cases``."""
    jobs = max(1, min(jobs, len(cases)))
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the suite's arrays are tiny; threads would only add overhead
    try:
        with compilation_cache(cache_dir):
            if jobs == 1:
                results = []
                for case in cases:
                    results.append(run_case(case))
                    done(results[-1])
                return results
            return _run_shared(cases, jobs - 1, cache_dir, done)
    finally:
        torch.set_num_threads(threads)


def _run_shared(cases: Sequence, workers: int, cache_dir: pathlib.Path | None,
                done: Callable[[CaseResult], None]) -> list[CaseResult]:
    """The cases shared between this process and ``workers`` worker processes. This process
    has jax and torch imported already, while a worker spends seconds importing them: it
    runs cases from the start instead of waiting for the workers'."""
    pending = iter(range(len(cases)))
    lock = threading.Lock()
    finished: queue.Queue = queue.Queue()  # (index, result or the exception it raised)

    def take() -> int | None:
        with lock:
            return next(pending, None)

    # spawn, not fork: a forked JAX or torch runtime is not safe to use.
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers, _start_worker, (cache_dir,)) as pool:
        def submit() -> None:
            i = take()
            if i is None:
                return

            def finish(result: CaseResult, i: int = i) -> None:
                finished.put((i, result))
                submit()

            def fail(error: BaseException, i: int = i) -> None:
                finished.put((i, error))

            try:
                pool.apply_async(run_case, (cases[i],), callback=finish, error_callback=fail)
            except ValueError:  # the pool is closing: a case raised
                pass

        for _ in range(workers):
            submit()
        results: list = [None] * len(cases)
        received = 0

        def receive(block: bool) -> None:
            nonlocal received
            while received < len(cases):
                try:
                    i, result = finished.get(block=block)
                except queue.Empty:
                    return
                if isinstance(result, BaseException):
                    raise result
                results[i] = result
                received += 1
                done(result)

        while (i := take()) is not None:
            finished.put((i, run_case(cases[i])))
            receive(block=False)
        receive(block=True)
    return results
