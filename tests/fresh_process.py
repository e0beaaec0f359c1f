"""Run scripts as a reader would, each in a fresh process, without paying for the imports
every time: a server process imports the packages the scripts share, then forks a child
per script. The child starts from that import state alone (its own ``__main__`` globals,
its own working folder, nothing left by an earlier script); the script's own ``import``
lines still run, so a missing one fails as in a new interpreter.

Only top-level packages are imported beforehand, so that a name a fresh ``import jaxpool``
would not bring (``jaxpool.torchax``, say) is not there either."""

import json
import os
import subprocess
import sys

PRELOADED = ("numpy", "jax", "torch", "flax", "jaxpool", "parity", "transformers")

SERVER = r"""
import importlib, json, os, runpy, signal, sys, traceback
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:  # an optional package; a script that needs it says so itself
        pass
print("ready", flush=True)
for line in sys.stdin:
    folder, script, *args = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.chdir(folder)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.argv, sys.path[0], code = [script, *args], os.path.dirname(script), 0
        signal.alarm(600)  # a script that hangs is killed, and fails
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class ScriptRunner:
    """``runner(script, *args, folder=None)``: the exit code of ``script`` run as
    ``__main__`` with ``args`` in a fresh process, in ``folder`` (the script's own by
    default), where its ``stdout`` and ``stderr`` are left."""

    def __init__(self, env: dict):
        self.server = subprocess.Popen([sys.executable, "-c", SERVER, *PRELOADED], env=env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.server.stdout.readline() != "ready\n":
            raise RuntimeError("the script server did not start")

    def __call__(self, script, *args: str, folder=None) -> int:
        folder = os.path.dirname(script) if folder is None else folder
        self.server.stdin.write(json.dumps([str(folder), str(script), *args]) + "\n")
        self.server.stdin.flush()
        return int(self.server.stdout.readline())

    def close(self):
        self.server.kill()  # idle between scripts; its interpreter's shutdown would only cost time
        self.server.wait(timeout=60)
