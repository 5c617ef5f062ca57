"""Prints, as CMake set() commands, what building loom_torch needs from a Python's PyTorch.
Exits 1 (printing why on stderr) where that Python has no PyTorch."""
import sys
import sysconfig

try:
    import torch
    import torch.utils.cpp_extension as cpp_extension
except ImportError as e:
    print(f"{sys.executable}: {e}", file=sys.stderr)
    sys.exit(1)

include_dirs = list(cpp_extension.include_paths())
try:
    import pybind11  # pip's and Debian's python3-pybind11 say where their headers are

    include_dirs.append(pybind11.get_include())
except ImportError:
    pass  # headers in torch/include (pip wheels) or /usr/include (pybind11-dev)

settings = {
    "LOOM_TORCH_VERSION": torch.__version__.split("+")[0],
    "LOOM_TORCH_INCLUDE_DIRS": ";".join(include_dirs),
    "LOOM_TORCH_LIBRARY_DIRS": ";".join(cpp_extension.library_paths()),
    "LOOM_TORCH_CXX11_ABI": str(int(torch._C._GLIBCXX_USE_CXX11_ABI)),
    "LOOM_TORCH_CUDA": torch.version.cuda or "",
    "LOOM_TORCH_PYBIND11_COMPILER_TYPE": torch._C._PYBIND11_COMPILER_TYPE,
    "LOOM_TORCH_PYBIND11_STDLIB": torch._C._PYBIND11_STDLIB,
    "LOOM_TORCH_PYBIND11_BUILD_ABI": torch._C._PYBIND11_BUILD_ABI,
    "LOOM_PYTHON_INCLUDE_DIR": sysconfig.get_paths()["include"],
    "LOOM_PYTHON_EXT_SUFFIX": sysconfig.get_config_var("EXT_SUFFIX"),
}
for name, value in settings.items():
    print(f'set({name} "{value}")')
