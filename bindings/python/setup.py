"""Bundles the checkout's libpocket.so into the package when there is one.

`pip install ./bindings/python` from a checkout that has been built (build/lib/libpocket.so)
copies that library next to the module, so the installed package works without
LD_LIBRARY_PATH. Without a built checkout (or with POCKET_BUNDLE_LIBRARY=0) nothing is bundled
and the package loads the installed libpocket (ldconfig's) or $POCKET_LIBRARY at import.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        if os.environ.get("POCKET_BUNDLE_LIBRARY", "1") == "0":
            return
        src = os.environ.get("POCKET_LIBRARY") or os.path.join(HERE, "..", "..", "build", "lib",
                                                                "libpocket.so")
        if os.path.exists(src):
            dst = os.path.join(self.build_lib, "pocket", "libpocket.so")
            shutil.copyfile(os.path.realpath(src), dst)


setup(cmdclass={"build_py": BuildWithLibrary})
