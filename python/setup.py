"""Builds the package with the project's CMake (the extension zerotorch._C links zerotorch's
libraries and the LibTorch of the installing interpreter's torch) and installs what the build
assembled in <build>/python/zerotorch (python/CMakeLists.txt)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _cmake_build():
    build = Path(os.environ.get("ZT_BUILD_DIR", ROOT / "build"))
    torch_python = subprocess.check_output(
        [sys.executable, "-c", "import torch, sys; print(sys.executable)"], text=True).strip()
    if not (build / "build.ninja").exists():
        venv = Path(torch_python).parent.parent
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja",
                               f"-DZT_VENV={venv}"])
    subprocess.check_call(["cmake", "--build", str(build), "--target", "zt_python"])
    return build / "python" / "zerotorch"


class BuildPy(build_py):
    def run(self):
        super().run()
        assembled = _cmake_build()
        target = Path(self.build_lib) / "zerotorch"
        target.mkdir(parents=True, exist_ok=True)
        for lib in assembled.glob("_C*.so"):
            shutil.copy2(lib, target / lib.name)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(packages=["zerotorch"], package_dir={"zerotorch": "zerotorch"},
      cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)
