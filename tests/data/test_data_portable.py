"""Generated datasets have the same bytes whatever BLAS kernel or numpy SIMD level the CPU gets.

Each generator (teacher, Synthetic non-IID and IID, blobs) and the Dirichlet and
Gaussian-size partitions run in fresh interpreters: with the default settings, with OpenBLAS
forced to its Haswell and Sandybridge kernels (``OPENBLAS_CORETYPE``), and with numpy's
dispatched SIMD reduced (``NPY_DISABLE_CPU_FEATURES``: first the AVX-512 targets, then every
dispatched target, down to the baseline). Each prints the sha256 of every array's bytes; all
runs must print the same digests. Digests are only compared within the session, never stored.
(``digits`` is left out: its only float step, ``pixel / 16``, is exact, and importing
scikit-learn in every run would cost more than the rest.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from numpy._core import _multiarray_umath as _umath

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = r"""
import hashlib
import numpy as np
import threadpoolctl
from numpy._core._multiarray_umath import __cpu_features__, __cpu_dispatch__
from hierfl.data import BlobsConfig, DirichletConfig, GaussianSizesConfig, SyntheticConfig, TeacherConfig

def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()

def dataset(ds):
    groups = ds.natural_groups or ()
    return digest(ds.x_train, ds.y_train, ds.x_test, ds.y_test, *groups)

teacher = TeacherConfig(num_samples=9000, test_samples=700, num_features=784, num_classes=10)
teacher = teacher.build(1, np.random.default_rng(1))
print("DIGEST teacher", dataset(teacher))
for name, cfg in (("synthetic", SyntheticConfig(alpha=1.0, beta=1.0, num_users=30, dimension=60)),
                  ("synthetic_iid", SyntheticConfig(iid=True, num_users=30, dimension=60)),
                  ("blobs", BlobsConfig(num_samples=3000, test_samples=300, num_features=40))):
    print("DIGEST", name, dataset(cfg.build(30, np.random.default_rng(2))))
# Labels full of near-ties (two almost equal teacher columns): any rounding difference in the
# logits would flip some of them.
from hierfl.data.datasets import _teacher_labels
near = np.random.default_rng(8).standard_normal((784, 10), dtype=np.float32)
near[:, 1] = near[:, 0] + np.float32(1e-6) * near[:, 2]
print("DIGEST near_ties", digest(_teacher_labels(teacher.x_train, near)))
parts = DirichletConfig(alpha=0.3).split(teacher, 40, np.random.default_rng(4))
print("DIGEST dirichlet", digest(*parts))
parts = GaussianSizesConfig(sigma=0.7).split(teacher, 40, np.random.default_rng(5))
print("DIGEST gaussian_sizes", digest(*parts))
# What the CPU really ran: OpenBLAS's kernel, numpy's enabled SIMD targets, and the bits of a
# float32 BLAS product (the old way of labelling), to show the kernel switch takes effect.
x = np.random.default_rng(6).standard_normal((2000, 784), dtype=np.float32)
w = np.random.default_rng(7).standard_normal((784, 10), dtype=np.float32)
print("BLASBITS", digest(x @ w))
arch = sorted({i.get("architecture") for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"})
print("ARCH", ",".join(map(str, arch)))
print("SIMD", ",".join(t for t in __cpu_dispatch__ if __cpu_features__.get(t)))
"""


def _run(env_extra: dict[str, str]) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")}
    env.update(env_extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _parse(out: str) -> tuple[dict[str, str], dict[str, str]]:
    digests, info = {}, {}
    for line in out.splitlines():
        key, _, rest = line.partition(" ")
        if key == "DIGEST":
            name, _, value = rest.partition(" ")
            digests[name] = value
        elif key in ("ARCH", "SIMD", "BLASBITS"):
            info[key] = rest
    return digests, info


@pytest.mark.slow  # a subprocess per forced kernel (seconds): make test runs it, make test-fast leaves it out
def test_generated_data_is_the_same_under_every_blas_kernel_and_simd_level() -> None:
    features = _umath.__cpu_features__
    if not features.get("AVX2"):
        pytest.skip("forcing OpenBLAS's Haswell kernel needs AVX2")
    dispatched = [t for t in _umath.__cpu_dispatch__ if features.get(t)]
    avx512 = [t for t in dispatched if t.startswith("AVX512") or t == "X86_V4"]
    variants: dict[str, dict[str, str]] = {
        "default": {},
        "Haswell": {"OPENBLAS_CORETYPE": "Haswell"},
        "Sandybridge": {"OPENBLAS_CORETYPE": "Sandybridge"},
    }
    if avx512:
        variants["no-avx512"] = {"NPY_DISABLE_CPU_FEATURES": " ".join(avx512)}
    if dispatched:
        variants["baseline-simd"] = {"NPY_DISABLE_CPU_FEATURES": " ".join(dispatched)}
    procs = {name: _run(env) for name, env in variants.items()}
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{name}: {err[-2000:]}"
        results[name] = _parse(out)

    # The settings took effect in the child processes.
    for name in ("Haswell", "Sandybridge"):
        assert results[name][1]["ARCH"] == name, (name, results[name][1])
    for name, disabled in (("no-avx512", avx512), ("baseline-simd", dispatched)):
        if name in results:
            enabled = set(filter(None, results[name][1]["SIMD"].split(",")))
            assert not enabled & set(disabled), (name, enabled)
    # ... and they matter: the two kernels round a float32 BLAS product differently.
    assert results["Haswell"][1]["BLASBITS"] != results["Sandybridge"][1]["BLASBITS"]

    reference = results["default"][0]
    assert {"teacher", "near_ties", "synthetic", "synthetic_iid", "blobs", "dirichlet", "gaussian_sizes"} <= set(reference)
    for name, (digests, _) in results.items():
        assert digests == reference, f"{name} differs from the default run: " + ", ".join(
            k for k in reference if digests.get(k) != reference[k]
        )
