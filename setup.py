"""pip install . / pip install -e . : both run tools/build.py, which compiles the
native library and the cffi extension into pyautodiff/."""
import os
import subprocess
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.develop import develop

ROOT = os.path.dirname(os.path.abspath(__file__))


def build_native():
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "build.py")], check=True,
                   cwd=ROOT)


class BuildPy(build_py):
    def run(self):
        build_native()
        super().run()


class Develop(develop):
    def run(self):
        build_native()
        super().run()


try:  # setuptools >= 64 builds editable installs through editable_wheel
    from setuptools.command.editable_wheel import editable_wheel

    class EditableWheel(editable_wheel):
        def run(self):
            build_native()
            super().run()

    extra_cmds = {"editable_wheel": EditableWheel}
except ImportError:  # pragma: no cover
    extra_cmds = {}

setup(
    name="pyautodiff",
    version="0.1.0",
    description="Reverse-mode automatic differentiation with a native C engine",
    long_description=open(os.path.join(ROOT, "README.md")).read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["pyautodiff", "pyautodiff.*"]),
    package_data={"pyautodiff": ["*.so", "py.typed"], "pyautodiff.examples": ["data/*"]},
    python_requires=">=3.9",
    install_requires=["cffi>=1.15", "numpy"],
    setup_requires=["cffi>=1.15"],
    extras_require={
        "test": ["pytest", "hypothesis", "safetensors", "mypy"],
        "examples": ["tqdm", "matplotlib", "scikit-learn"],
        "mpi": ["mpi4py", "mpich"],
    },
    cmdclass={"build_py": BuildPy, "develop": Develop, **extra_cmds},
    zip_safe=False,
)
