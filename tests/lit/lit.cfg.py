# lit configuration for dtcc: RUN lines call the tools in the build tree.
import os

import lit.formats

config.name = "dtcc"
config.test_format = lit.formats.ShTest(not lit_config.isWindows)
config.suffixes = [".mlir", ".onnxtext", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.dtcc_obj_root, "tests", "lit")

path = [config.dtcc_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")]
config.environment["PATH"] = os.pathsep.join(path + [os.environ.get("PATH", "")])
config.environment["DTCC_RUNNER"] = os.path.join(config.dtcc_tools_dir, "dtcc-runner")
config.substitutions.append(("%python", "/usr/bin/python3"))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
# ONNX's node tests (Debian libonnx-testdata).
config.substitutions.append(("%onnx_node_tests", "/usr/share/libonnx-testdata/data/node"))

# Memory-error checks of the compiler run under valgrind where it is installed.
# dtcc allocates with jemalloc where it was built with it: valgrind replaces
# jemalloc's malloc and free as it does the C library's.
import shutil
if shutil.which("valgrind"):
    config.available_features.add("valgrind")
    config.substitutions.append(
        ("%valgrind", "valgrind --quiet --error-exitcode=99 "
         "--soname-synonyms=somalloc=*jemalloc* --suppressions=" +
         os.path.join(config.test_source_root, "valgrind.supp")))
