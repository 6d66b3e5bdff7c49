"""Helpers shared by the end-to-end checks."""
import os
import subprocess
import sys

import numpy as np

# mpirun as root in containers, over TCP only, more ranks than cores.
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_btl": "self,tcp",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "DTCC_COLLECTIVE_TIMEOUT": "60",
}


def run(cmd):
    """Runs `cmd`; its stdout, or exit with its output on failure."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"error: {' '.join(cmd)} exited {p.returncode}")
    return p.stdout


def text_tokens(path):
    """Byte tokens of the license texts every Debian system has."""
    root = "/usr/share/common-licenses"
    data = b"".join(open(os.path.join(root, f), "rb").read()
                    for f in sorted(os.listdir(root))
                    if os.path.isfile(os.path.join(root, f)))
    np.frombuffer(data, dtype=np.uint8).astype(np.uint16).tofile(path)


class Checks:
    """Prints each check as ok/FAIL and remembers the failures."""

    def __init__(self):
        self.failures = []

    def __call__(self, ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            self.failures.append(what)


def start(doc, prefix):
    """The --dtcc argument and a fresh work directory of a check script."""
    import argparse
    import tempfile
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--dtcc", required=True)
    return ap.parse_args(), tempfile.mkdtemp(prefix=prefix)
