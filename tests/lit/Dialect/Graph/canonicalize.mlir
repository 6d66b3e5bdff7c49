// RUN: dtcc-opt %s -split-input-file -canonicalize | FileCheck %s

// Tests that shape arithmetic on constants folds (Shape -> Gather -> Concat).
// CHECK-LABEL: func.func @shape_arith
// CHECK-NEXT: %[[C:.*]] = dgraph.constant dense<[2, 12]> : tensor<2xi64>
// CHECK-NEXT: return %[[C]]
func.func @shape_arith() -> tensor<2xi64> {
  %shape = dgraph.constant dense<[2, 3, 4]> : tensor<3xi64>
  %idx = dgraph.constant dense<[1, 2]> : tensor<2xi64>
  %dims = dgraph.gather %shape, %idx axis = 0 : (tensor<3xi64>, tensor<2xi64>) -> tensor<2xi64>
  %prod = dgraph.reduce_prod %dims, dims = [0] : (tensor<2xi64>) -> tensor<i64>
  %one = dgraph.slice %shape, start = [0], limit = [1], stride = [1] : (tensor<3xi64>) -> tensor<1xi64>
  %p1 = dgraph.reshape %prod : (tensor<i64>) -> tensor<1xi64>
  %r = dgraph.concat %one, %p1 dim = 0 : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  return %r : tensor<2xi64>
}

// -----

// Tests that arithmetic, comparison, select and cast fold on constants.
// CHECK-LABEL: func.func @arith
// CHECK-DAG: dgraph.constant dense<[4, 0]> : tensor<2xi32>
// CHECK-DAG: dgraph.constant dense<[true, false]> : tensor<2xi1>
// CHECK-DAG: dgraph.constant dense<[2.500000e+00, 7.000000e+00]> : tensor<2xf32>
// CHECK-DAG: dgraph.constant dense<[2, 7]> : tensor<2xi64>
// CHECK-NOT: dgraph.add
func.func @arith() -> (tensor<2xi32>, tensor<2xi1>, tensor<2xf32>, tensor<2xi64>) {
  %a = dgraph.constant dense<[7, -3]> : tensor<2xi32>
  %b = dgraph.constant dense<[2, 2]> : tensor<2xi32>
  %q = dgraph.div %a, %b : tensor<2xi32>
  %one = dgraph.constant dense<1> : tensor<2xi32>
  %s = dgraph.add %q, %one : tensor<2xi32>
  %lt = dgraph.gt %a, %b : tensor<2xi32>
  %f = dgraph.constant dense<[2.5, -1.0]> : tensor<2xf32>
  %g = dgraph.constant dense<[0.5, 7.0]> : tensor<2xf32>
  %m = dgraph.max %f, %g : tensor<2xf32>
  %i = dgraph.cast %m : tensor<2xf32> to tensor<2xi64>
  return %s, %lt, %m, %i : tensor<2xi32>, tensor<2xi1>, tensor<2xf32>, tensor<2xi64>
}

// -----

// Tests that no-op data movement disappears.
// CHECK-LABEL: func.func @noops
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]], %[[X]], %[[X]]
func.func @noops(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %t = dgraph.transpose %x, perm = [0, 1] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %r1 = dgraph.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  %r2 = dgraph.reshape %r1 : (tensor<6xf32>) -> tensor<2x3xf32>
  %s = dgraph.slice %x, start = [0, 0], limit = [2, 3], stride = [1, 1] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %t, %r2, %s : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// Tests that constant transposes and broadcasts fold, and large ones do not
// copy weights.
// CHECK-LABEL: func.func @movement
// CHECK-DAG: dgraph.constant dense<{{\[\[}}1, 3], [2, 4]]> : tensor<2x2xi64>
// CHECK-DAG: dgraph.constant dense<{{\[\[}}5, 6], [5, 6], [5, 6]]> : tensor<3x2xi64>
func.func @movement() -> (tensor<2x2xi64>, tensor<3x2xi64>) {
  %a = dgraph.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>
  %t = dgraph.transpose %a, perm = [1, 0] : (tensor<2x2xi64>) -> tensor<2x2xi64>
  %b = dgraph.constant dense<[5, 6]> : tensor<2xi64>
  %bb = dgraph.broadcast_in_dim %b, dims = [1] : (tensor<2xi64>) -> tensor<3x2xi64>
  return %t, %bb : tensor<2x2xi64>, tensor<3x2xi64>
}

// -----

// Tests that integer division by zero is left to run time.
// CHECK-LABEL: func.func @div_zero
// CHECK: dgraph.div
func.func @div_zero() -> tensor<2xi32> {
  %a = dgraph.constant dense<[7, -3]> : tensor<2xi32>
  %z = dgraph.constant dense<0> : tensor<2xi32>
  %q = dgraph.div %a, %z : tensor<2xi32>
  return %q : tensor<2xi32>
}
