// RUN: dtcc-gpu-codegen %s --emit=mapped | FileCheck %s --check-prefix=MAP
// RUN: dtcc-gpu-codegen %s --no-ptxas | FileCheck %s --check-prefix=TABLE
// Tests the GPU lowering of a softmax along the last axis (rows of 300, more
// than a block's threads): row max and row sum are reductions, one thread
// per row; the exponentials and the division one thread per element.

#row = affine_map<(i, j) -> (i, j)>
#red = affine_map<(i, j) -> (i)>
func.func @softmax_row(%x: memref<6x300xf32>, %y: memref<6x300xf32>) {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %max = memref.alloc() : memref<6xf32>
  %sum = memref.alloc() : memref<6xf32>
  linalg.fill ins(%ninf : f32) outs(%max : memref<6xf32>)
  linalg.generic {indexing_maps = [#row, #red], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<6x300xf32>) outs(%max : memref<6xf32>) {
  ^bb0(%a: f32, %m: f32):
    %r = arith.maximumf %a, %m : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#row, #red, #row], iterator_types = ["parallel", "parallel"]}
      ins(%x, %max : memref<6x300xf32>, memref<6xf32>) outs(%y : memref<6x300xf32>) {
  ^bb0(%a: f32, %m: f32, %o: f32):
    %d = arith.subf %a, %m : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  }
  linalg.fill ins(%zero : f32) outs(%sum : memref<6xf32>)
  linalg.generic {indexing_maps = [#row, #red], iterator_types = ["parallel", "reduction"]}
      ins(%y : memref<6x300xf32>) outs(%sum : memref<6xf32>) {
  ^bb0(%a: f32, %s: f32):
    %r = arith.addf %a, %s : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#red, #row], iterator_types = ["parallel", "parallel"]}
      ins(%sum : memref<6xf32>) outs(%y : memref<6x300xf32>) {
  ^bb0(%s: f32, %o: f32):
    %r = arith.divf %o, %s : f32
    linalg.yield %r : f32
  }
  memref.dealloc %max : memref<6xf32>
  memref.dealloc %sum : memref<6xf32>
  return
}

// A sum of squares over every element (no parallel dimension): one thread.
#all = affine_map<(i, j) -> (i, j)>
#scalar = affine_map<(i, j) -> ()>
func.func @sum_squares(%g: memref<7x9xf32>, %out: memref<f32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%out : memref<f32>)
  linalg.generic {indexing_maps = [#all, #scalar], iterator_types = ["reduction", "reduction"]}
      ins(%g : memref<7x9xf32>) outs(%out : memref<f32>) {
  ^bb0(%a: f32, %s: f32):
    %q = arith.mulf %a, %a : f32
    %r = arith.addf %q, %s : f32
    linalg.yield %r : f32
  }
  return
}

// A row reduction: one thread per row, the row a sequential loop in it.
// MAP-LABEL: func.func @softmax_row(
// MAP-SAME:    %[[X:.*]]: memref<6x300xf32>, %[[Y:.*]]: memref<6x300xf32>, %[[MAX:.*]]: memref<6xf32>, %[[SUM:.*]]: memref<6xf32>)
// MAP:         scf.parallel
// MAP:           memref.store %{{.*}}, %[[MAX]]
// MAP:         scf.parallel
// MAP:           scf.parallel (%[[T:.*]]) =
// MAP:             %[[ROW:.*]] = arith.addi %[[T]]
// MAP:             scf.for %[[COL:.*]] = %{{.*}} to %[[C300:.*]] step
// MAP:               memref.load %[[X]][%[[ROW]], %[[COL]]]
// MAP:               arith.maximumf
// MAP:               memref.store %{{.*}}, %[[MAX]][%[[ROW]]]
// MAP:           } {mapping = [#gpu.loop_dim_map<processor = thread_x
// MAP:         } {mapping = [#gpu.loop_dim_map<processor = block_x

// Reductions over every element run on one thread (a one-iteration loop).
// MAP-LABEL: func.func @sum_squares(
// MAP:         scf.parallel
// MAP:           scf.parallel
// MAP:             memref.store
// MAP:             scf.for
// MAP:               scf.for
// MAP:           } {mapping = [#gpu.loop_dim_map<processor = thread_x
// MAP:         } {mapping = [#gpu.loop_dim_map<processor = block_x
// MAP-NOT:     scf.parallel
// MAP:         return

// TABLE:      region @softmax_row buffers 2 scratch [24, 24]
// TABLE-NEXT:   launch softmax_row_kernel grid (1, 1, 1) block (6, 1, 1) shared 0 params [2]
// TABLE-NEXT:   launch softmax_row_kernel_0 grid (1, 1, 1) block (6, 1, 1) shared 0 params [0, 2]
// TABLE-NEXT:   launch softmax_row_kernel_1 grid (8, 1, 1) block (256, 1, 1) shared 0 params [0, 2, 1]
// TABLE-NEXT:   launch softmax_row_kernel_2 grid (1, 1, 1) block (6, 1, 1) shared 0 params [3]
// TABLE-NEXT:   launch softmax_row_kernel_3 grid (1, 1, 1) block (6, 1, 1) shared 0 params [1, 3]
// TABLE-NEXT:   launch softmax_row_kernel_4 grid (8, 1, 1) block (256, 1, 1) shared 0 params [3, 1]
// TABLE-NEXT: region @sum_squares buffers 2 scratch []
// TABLE-NEXT:   launch sum_squares_kernel grid (1, 1, 1) block (1, 1, 1) shared 0 params [1, 0]

// A sum over rows (the first axis) is interchanged: one thread per column.
#rc = affine_map<(i, j) -> (i, j)>
#c = affine_map<(i, j) -> (j)>
func.func @column_sum(%x: memref<5x300xf32>, %s: memref<300xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%s : memref<300xf32>)
  linalg.generic {indexing_maps = [#rc, #c], iterator_types = ["reduction", "parallel"]}
      ins(%x : memref<5x300xf32>) outs(%s : memref<300xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %a, %o : f32
    linalg.yield %r : f32
  }
  return
}
// MAP-LABEL: func.func @column_sum(
// MAP:         memref.store
// MAP:         scf.parallel (%[[TILE:.*]]) =
// MAP:           scf.parallel (%[[LANE:.*]]) =
// MAP:             %[[COL:.*]] = arith.addi %[[LANE]], %[[TILE]]
// MAP:             scf.if
// MAP:               scf.for %[[ROW:.*]] = 
// MAP:                 memref.load %{{.*}}[%[[ROW]], %[[COL]]]
// MAP-NOT:     scf.parallel
// MAP:         return

// TABLE-NEXT: region @column_sum buffers 2 scratch []
// TABLE-NEXT:   launch column_sum_kernel grid (2, 1, 1) block (256, 1, 1) shared 0 params [1]
// TABLE-NEXT:   launch column_sum_kernel_{{[0-9]+}} grid (2, 1, 1) block (256, 1, 1) shared 0 params [0, 1]
