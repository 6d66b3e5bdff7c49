"""Prints an MLIR file without what names a model's parts: symbols,
resource names and blobs, dgraph.layer's module names. Two compiles of one
model under different names then print the same.

Usage: strip_names.py FILE.mlir
"""
import re
import sys

text = open(sys.argv[1]).read()
text = text.split("{-#")[0]  # the resource blobs
text = re.sub(r'@"[^"]*"|@[\w.:$-]+', "@V", text)
text = re.sub(r"dense_resource<[^>]*>", "dense_resource<V>", text)
text = re.sub(r'module = "[^"]*", ', "", text)
text = re.sub(r' ?\{dgraph\.layer = #dgraph\.layer<module = "[^"]*">\}', "", text)
text = re.sub(r', dgraph\.layer = #dgraph\.layer<module = "[^"]*">', "", text)
text = re.sub(r'dgraph\.layer = #dgraph\.layer<module = "[^"]*">, ', "", text)
print(text)
