"""Writes an ONNX TensorProto file: make_tensor.py OUT.pb DTYPE SHAPE VALUES...

SHAPE is 2x3 (or "scalar"); VALUES are repeated to fill the tensor.
Example: make_tensor.py x.pb float32 2x3 1 2 3 4 5 6
"""
import sys

import numpy as np
from onnx import numpy_helper

out, dtype, shape = sys.argv[1:4]
dims = [] if shape == "scalar" else [int(d) for d in shape.split("x")]
values = [float(v) for v in sys.argv[4:]] or [0.0]
count = int(np.prod(dims)) if dims else 1
data = np.resize(np.array(values), count).astype(dtype).reshape(dims)
name = out.rsplit("/", 1)[-1].split(".")[0]
with open(out, "wb") as f:
    f.write(numpy_helper.from_array(data, name).SerializeToString())
