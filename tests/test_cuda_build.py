"""The CUDA architectures a build carries, and the code a GPU runs of them.

A default build must carry machine code for sm_80 and sm_90 and PTX for later GPUs. Once it
carried sm_75 code alone, because CMake filled in the compiler's default first: an H200 then ran
that PTX, compiled by the driver, in which every Hopper path traps, while the launch plans, asking
the device, took them. The configure check runs without a GPU; the loaded-code check needs one.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from conftest import has_gpu
from helpers import NVCC, ROOT

DEFAULT_ARCHITECTURES = "80-real,90-real,90-virtual"

_PROJECT = """
cmake_minimum_required(VERSION 3.24)
project(architectures LANGUAGES CXX)
set(CMAKE_CUDA_COMPILER "{nvcc}")
include("{root}/cmake/cuda_architectures.cmake")
enable_language(CUDA)
message(STATUS "architectures=${{CMAKE_CUDA_ARCHITECTURES}} chosen-by=${{JAX_CAMP_CUDA_ARCHITECTURES_CHOSEN_BY}}")
"""


def _configure(tmp: Path, env: dict[str, str] | None = None, *args: str) -> tuple[str, str]:
    """(architectures, chosen-by) that the project's CMake code picks, configured as pip does."""
    (tmp / "CMakeLists.txt").write_text(_PROJECT.format(nvcc=NVCC, root=ROOT.as_posix()))
    out = subprocess.run(["cmake", "-S", str(tmp), "-B", str(tmp / "build"), *args],
                         capture_output=True, text=True, env=env, check=True).stdout
    found = re.search(r"architectures=(\S*) chosen-by=(\S*)", out)
    assert found, out
    return found.group(1).replace(";", ","), found.group(2)


needs_cmake = pytest.mark.skipif(NVCC is None or shutil.which("cmake") is None,
                                 reason="needs nvcc and cmake")


@needs_cmake
def test_default_build_carries_sm80_sm90_and_ptx(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDAARCHS", raising=False)
    assert _configure(tmp_path) == (DEFAULT_ARCHITECTURES, "default")


@needs_cmake
def test_architectures_the_user_names_are_kept(tmp_path):
    assert _configure(tmp_path, None, "-DCMAKE_CUDA_ARCHITECTURES=90-real") == ("90-real", "user")


def _configure_project(build: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Which kernels a configure of the project itself in `build` says it builds, as a wheel
    build of scikit-build-core configures it (with this Python, which has nanobind and jax)."""
    out = subprocess.run(
        ["cmake", "-S", str(ROOT), "-B", str(build), f"-DPython_EXECUTABLE={sys.executable}",
         "-DSKBUILD_STATE=wheel", *args],
        capture_output=True, text=True, env=env, check=True)
    found = re.search(r"building the (CUDA|CPU) kernels", out.stdout + out.stderr)
    assert found, out.stdout + out.stderr
    return found.group(1)


@needs_cmake
@pytest.mark.skipif(importlib.util.find_spec("nanobind") is None, reason="needs nanobind")
def test_a_wheel_builds_choice_does_not_stick_to_the_next(tmp_path):
    # `pip install .` keeps its build tree between installs: a CPU-only install, or one on a
    # machine without nvcc then, must not make the next plain install CPU-only too.
    build = tmp_path / "build"
    assert _configure_project(build, "-DJAX_CAMP_CUDA=OFF") == "CPU"
    assert _configure_project(build) == "CUDA"
    assert _configure_project(build, env={**os.environ, "CUDACXX": str(tmp_path / "no-nvcc")}) == "CPU"
    assert _configure_project(build) == "CUDA"


def _kernels_module():
    from jax_camp import _kernels

    if not _kernels.built_with_cuda:
        pytest.skip("this jax_camp was built without CUDA")
    return _kernels


def _expected_architecture(built_for: str, device: int) -> int:
    """The code the driver loads for a device of compute capability `device`: the newest machine
    code of its major version no newer than it, else the newest PTX no newer than it, compiled."""
    real, virtual = [], []
    for entry in built_for.split(","):
        number, _, kind = entry.partition("-")  # a bare number means both
        if kind in ("real", ""):
            real.append(int(number))
        if kind in ("virtual", ""):
            virtual.append(int(number))
    same_major = [a for a in real if a // 10 == device // 10 and a <= device]
    if same_major:
        return max(same_major)
    return max(a for a in virtual if a <= device)


@pytest.mark.skipif(not has_gpu(), reason="needs a GPU")
def test_gpu_runs_the_code_built_for_it():
    kernels = _kernels_module()
    major, minor = jax.devices("gpu")[0].compute_capability.split(".")
    device = 10 * int(major) + int(minor)
    loaded = kernels.kernel_architecture()
    assert loaded == _expected_architecture(kernels.cuda_architectures, device), (
        kernels.cuda_architectures, device, loaded)
    if kernels.cuda_architectures_chosen_by == "default" and device == 90:
        assert loaded == 90  # the default build runs Hopper code, clusters and bulk copies, here


def test_expected_architecture_follows_the_drivers_choice():
    assert _expected_architecture(DEFAULT_ARCHITECTURES, 90) == 90
    assert _expected_architecture(DEFAULT_ARCHITECTURES, 86) == 80
    assert _expected_architecture(DEFAULT_ARCHITECTURES, 100) == 90  # PTX, compiled by the driver
    assert _expected_architecture("75", 90) == 75
    assert _expected_architecture("80", 90) == 80
