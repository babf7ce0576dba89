"""`pip install ./python` records which librelattn.so the package was built
next to (the README's build/, or RELATTN_LIBRARY), in relattn/_built_with.py
of the installed package, so that it finds it from anywhere; the package
still looks at RELATTN_LIBRARY first (relattn/_lib.py)."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        lib = os.environ.get("RELATTN_LIBRARY") or os.path.join(here, os.pardir, "build",
                                                               "librelattn.so")
        if os.path.exists(lib):
            out = os.path.join(self.build_lib, "relattn", "_built_with.py")
            with open(out, "w") as f:
                f.write("# written by setup.py: the library this package was installed with\n")
                f.write("LIBRARY = %r\n" % os.path.realpath(lib))


setup(cmdclass={"build_py": BuildPy})
