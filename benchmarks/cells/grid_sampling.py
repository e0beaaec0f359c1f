"""The grid sampling cells: grid_sample in the uses that call it: RAFT's correlation
lookup, deformable attention, a 3-D registration warp and a spatial transformer (STN),
float32 on the CPU. Each cell is timed forward, as the gradient of ``sum(y**2)`` in the
input and the grid, and as the second derivative (the gradient in both of the squared
input-gradient norm, an R1 penalty), jitted, beside torch's CPU ``F.grid_sample``
(autograd) in the same process, ``jax.scipy.ndimage.map_coordinates(order=1)`` (forward
and gradient; it reads the border otherwise than torch, so its values are not checked) and
torchax's own lowering of ``F.grid_sample`` where torchax imports.

Run from the repository root:

    python -m benchmarks.cells.grid_sampling       # markdown table, median ms per call
    python -m benchmarks.cells.grid_sampling --cells raft,stn-28
    git show HEAD~1:jaxpool/grid_sampling/kernel.py > /tmp/before.py
    python -m benchmarks.cells.grid_sampling --before /tmp/before.py   # and a kernel file

``--before`` adds the side ``jaxpool-before``: that kernel file's ``grid_sample(plan, x,
grid)`` on the same plan, timed in turn with the others, its values and derivatives checked
to be jaxpool's bit for bit.

jaxpool's and torchax's outputs are first compared with torch's (float32) ones; a wrong
side raises.
"""

from __future__ import annotations

import argparse
import datetime

import numpy as np

from benchmarks.machine import describe, versions
from benchmarks.runner import check, measure

MODES = ("fwd", "grad", "second")


def _cells():
    """name -> (input shape, grid shape, mode, padding_mode, align_corners, grid scale)."""
    return {
        # RAFT: each pixel's correlation volume [B*H/8*W/8, 1, h, w] read at a 7x7 window
        # around its match, align_corners=True (its bilinear_sampler).
        "raft": ((2 * 12 * 16, 1, 12, 16), (2 * 12 * 16, 7, 7, 2), "bilinear", "zeros",
                 True, 1.1),
        # Deformable attention: one value map per (batch, head) read at queries x points.
        "deformable": ((2 * 8, 32, 32, 32), (2 * 8, 300, 4, 2), "bilinear", "zeros", False,
                       1.0),
        # A registration warp: one volume read at a dense displacement field.
        "warp-3d": ((1, 1, 64, 64, 64), (1, 64, 64, 64, 3), "bilinear", "zeros", True, 1.05),
        # Spatial transformers: an affine grid over the whole image.
        "stn-28": ((8, 3, 28, 28), (8, 28, 28, 2), "bilinear", "zeros", False, 1.1),
        "stn-224": ((8, 3, 224, 224), (8, 224, 224, 2), "bilinear", "zeros", False, 1.1),
    }


def _data(shape, grid_shape, scale):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    g = rng.uniform(-scale, scale, grid_shape)
    return x, g


def _jax_modes(f):
    """The three quantities of a function ``f(x, g)`` of JAX arrays."""
    import jax
    import jax.numpy as jnp

    def grad(x, g):
        return jax.grad(lambda x, g: jnp.sum(jnp.square(f(x, g))), (0, 1))(x, g)

    def second(x, g):
        return jax.grad(lambda x, g: jnp.sum(jnp.square(grad(x, g)[0])), (0, 1))(x, g)

    return {"fwd": f, "grad": grad, "second": second}


def _torch_modes(f, x, g):
    """Thunks computing the same three quantities with torch autograd."""
    import torch

    def fwd():
        with torch.no_grad():
            return f(x, g)

    def grad(create_graph=False):
        xl, gl = x.detach().requires_grad_(True), g.detach().requires_grad_(True)
        y = f(xl, gl)
        return xl, gl, torch.autograd.grad(y.square().sum(), (xl, gl),
                                           create_graph=create_graph)

    def second():
        xl, gl, (gx, _) = grad(create_graph=True)
        return torch.autograd.grad(gx.square().sum(), (xl, gl))

    return {"fwd": fwd, "grad": lambda: grad()[2], "second": second}


def _map_coordinates(shape, mode, align):
    """grid_sample's bilinear reading as ``map_coordinates(order=1, mode="constant")``,
    vmapped over the batch and the channels: None where it has no such reading."""
    import jax
    import jax.numpy as jnp
    from jax.scipy.ndimage import map_coordinates

    if mode != "bilinear":
        return None
    sizes = shape[2:]

    def f(x, g):
        coords = []
        for axis, size in enumerate(sizes):
            c = g[..., len(sizes) - 1 - axis]
            coords.append((c + 1) / 2 * (size - 1) if align else ((c + 1) * size - 1) / 2)

        def one(plane, cs):
            return map_coordinates(plane, cs, order=1, mode="constant", cval=0.0)

        per_channel = jax.vmap(one, in_axes=(0, None))
        return jax.vmap(per_channel)(x, jnp.stack(coords, 1))

    return f


def _torchax_side(mode, padding, align):
    """torchax's own lowering of ``F.grid_sample`` as a JAX function, or why there is none."""
    try:
        import torch.nn.functional as F
        import torchax  # noqa: F401
        from torchax.interop import jax_view
    except Exception as e:  # noqa: BLE001 - torchax fails to import with some torch versions
        return None, f"torchax does not import ({type(e).__name__}: {e})"
    return jax_view(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding,
                                               align_corners=align)), None


def _kernel_file(path):
    """The module in ``path`` (a grid_sampling kernel from another commit)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("jaxpool_kernel_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(names, reps: int, min_sample_s: float, before: str | None = None
        ) -> tuple[list[str], list[str]]:
    """The table's rows and notes, for the cells ``names``."""
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F

    import jaxpool
    from jaxpool.grid_sampling.plan import plan_grid_sample

    old = _kernel_file(before) if before else None
    rows, notes = [], []
    for name in names:
        shape, grid_shape, mode, padding, align, scale = _cells()[name]
        x64, g64 = _data(shape, grid_shape, scale)
        x, g = jnp.asarray(x64, jnp.float32), jnp.asarray(g64, jnp.float32)
        xt, gt = torch.tensor(x64, dtype=torch.float32), torch.tensor(g64, dtype=torch.float32)

        def ours(x, g, mode=mode, padding=padding, align=align):
            return jaxpool.grid_sample(x, g, mode, padding, align)

        def theirs(x, g, mode=mode, padding=padding, align=align):
            return F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align)

        # float32 torch: the grid gradient jumps where a coordinate's floor differs with
        # the precision, so float64 is no reference for float32 there.
        reference = _torch_modes(theirs, xt, gt)
        jax_sides = {"jaxpool": _jax_modes(ours)}
        if old is not None:
            plan = plan_grid_sample(shape, "float32", grid_shape, "float32", mode, padding,
                                    align, False)
            jax_sides["jaxpool-before"] = _jax_modes(
                lambda x, g, plan=plan: old.grid_sample(plan, x, g))
        mc = _map_coordinates(shape, mode, align)
        if mc is not None:
            jax_sides["map_coordinates"] = _jax_modes(mc)
        tx, why = _torchax_side(mode, padding, align)
        if tx is not None:
            jax_sides["torchax"] = _jax_modes(tx)
        elif why not in notes:
            notes.append(why)
        torch_side = _torch_modes(theirs, xt, gt)
        for quantity in MODES:
            want = reference[quantity]()
            want = [w.detach().numpy() for w in (want if isinstance(want, tuple) else (want,))]
            fns, ours_got = {}, None
            for side, modes in jax_sides.items():
                if side == "map_coordinates" and quantity == "second":
                    continue
                fn = jax.jit(modes[quantity])
                try:
                    got = jax.tree_util.tree_leaves(fn(x, g))
                except Exception as e:  # noqa: BLE001 - a side without this derivative
                    notes.append(f"{name} {quantity}: {side} fails ({type(e).__name__})")
                    continue
                if side == "jaxpool":
                    ours_got = got
                if side == "jaxpool-before" and not all(
                        np.array_equal(np.asarray(a).view(np.uint32),
                                       np.asarray(b).view(np.uint32))
                        for a, b in zip(got, ours_got)):
                    raise AssertionError(f"jaxpool-before {name} {quantity}: other bits")
                if side != "map_coordinates":
                    wrong = [check(a, b, "float32") for a, b in zip(got, want)]
                    if any(wrong):
                        raise AssertionError(f"{side} {name} {quantity}: {wrong}")
                fns[side] = lambda fn=fn, x=x, g=g: jax.block_until_ready(fn(x, g))
            fns["torch"] = torch_side[quantity]
            timed = measure(fns, reps, min_sample_s)
            peers = [s for s in timed
                     if s not in ("jaxpool", "jaxpool-before", "map_coordinates")]
            fastest = min(timed[s]["median_ms"] for s in peers)
            for side, t in timed.items():
                spread = (t["q75_ms"] - t["q25_ms"]) / 2
                rows.append(f"| {name} | {quantity} | {side} | {t['median_ms']:.3f} | "
                            f"±{spread:.3f} | {t['median_ms'] / fastest:.2f} |")
    return rows, notes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cells.grid_sampling",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default=",".join(_cells()),
                        help="comma-separated cells (default %(default)s)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--min-sample-s", type=float, default=0.05)
    parser.add_argument("--before", metavar="KERNEL_PY",
                        help="a grid_sampling kernel file from another commit, timed as "
                             "the side jaxpool-before")
    args = parser.parse_args(argv)
    names = [n for n in args.cells.split(",") if n]
    unknown = [n for n in names if n not in _cells()]
    if unknown:
        parser.error(f"unknown cells {unknown}; known: {', '.join(_cells())}")
    rows, notes = run(names, args.reps, args.min_sample_s, args.before)
    print(f"{datetime.date.today().isoformat()}, {describe()}, {versions()}.")
    print("Ratio: the median over the fastest peer's (torch's values: torch or torchax).\n")
    print("| cell | quantity | side | median ms | spread | ratio |\n"
          "|---|---|---|---:|---:|---:|")
    print("\n".join(rows))
    for note in notes:
        print(f"\n{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
