"""Build hook for the one compiled part: scheduler.core._blossom (everything else is in setup.cfg).

Optional on purpose: where no C compiler is available the install still succeeds, and
scheduler.core.blossom runs its pure-Python twin, which gives the same pairs, only slower.
"""
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    """Forbid fused multiply-add: the matcher must round every + - * exactly as Python does."""

    def build_extensions(self):
        if self.compiler.compiler_type == "unix":
            for ext in self.extensions:
                ext.extra_compile_args = [*ext.extra_compile_args, "-ffp-contract=off",
                                          "-fno-fast-math"]
        super().build_extensions()


setup(
    ext_modules=[Extension("scheduler.core._blossom", ["scheduler/core/_blossom.c"], optional=True)],
    cmdclass={"build_ext": BuildExt},
)
