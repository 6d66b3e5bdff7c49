func.func @dyn(%x: memref<4xf32>, %y: memref<?xf32>) {
  return
}
