"""Prints, as CMake set() commands, what building loom_torch needs from a Python's PyTorch: taken
from that PyTorch itself, as torch.utils.cpp_extension builds an extension, for PyTorch 1.13 to 2.x.
Exits 1 (printing why on stderr) where that Python has no PyTorch."""
import sys
import sysconfig
import warnings

try:
    import torch
    import torch.utils.cpp_extension as cpp_extension
except ImportError as e:
    print(f"{sys.executable}: {e}", file=sys.stderr)
    sys.exit(1)


def pybind11_abi_defines():
    """The PYBIND11_* defines that give the module PyTorch's pybind11 ABI id. PyTorch 2.x asks
    none (its bundled pybind11 works the id out itself) and says so through cpp_extension; 1.x
    keeps the three values on torch._C. An empty define would change the id: leave those out."""
    flags = getattr(cpp_extension, "_get_pybind11_abi_build_flags", None)
    if flags is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in 2.x, where it returns []
            found = [f[2:] for f in flags() if f.startswith("-D")]
        return [d.replace('"', '\\"') for d in found]
    defines = []
    for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
        value = getattr(torch._C, f"_PYBIND11_{name}", None)
        if value:
            defines.append(f'PYBIND11_{name}=\\"{value}\\"')
    return defines


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
    "LOOM_TORCH_PYBIND11_DEFINES": ";".join(pybind11_abi_defines()),
    "LOOM_PYTHON_INCLUDE_DIR": sysconfig.get_paths()["include"],
    "LOOM_PYTHON_EXT_SUFFIX": sysconfig.get_config_var("EXT_SUFFIX"),
}
for name, value in settings.items():
    print(f'set({name} "{value}")')
