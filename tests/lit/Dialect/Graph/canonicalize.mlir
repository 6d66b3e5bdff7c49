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

// Tests that floor, ceil, round (ties to even) and sqrt fold on constants:
// the limit of a Range PyTorch 2's exporter computes as
// Cast(Ceil(Div(Sub(Cast(a), Cast(b)), Cast(c)))) from constant shapes.
// CHECK-LABEL: func.func @rounding
// CHECK-DAG: dgraph.constant dense<[2.000000e+00, -3.000000e+00, 2.000000e+00, -1.000000e+00]> : tensor<4xf32>
// CHECK-DAG: dgraph.constant dense<[3.000000e+00, -2.000000e+00, 3.000000e+00, -0.000000e+00]> : tensor<4xf32>
// CHECK-DAG: dgraph.constant dense<[2.000000e+00, -2.000000e+00, 2.000000e+00, -0.000000e+00]> : tensor<4xf32>
// CHECK-DAG: dgraph.constant dense<[1.4142135623730951, 3.000000e+00]> : tensor<2xf64>
// CHECK-DAG: dgraph.constant dense<[1.41421354, 0.000000e+00]> : tensor<2xf32>
// CHECK-DAG: dgraph.constant dense<3> : tensor<i64>
// CHECK-NOT: dgraph.floor
// CHECK-NOT: dgraph.ceil
// CHECK-NOT: dgraph.round
// CHECK-NOT: dgraph.sqrt
func.func @rounding() -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2xf64>, tensor<2xf32>, tensor<i64>) {
  %x = dgraph.constant dense<[2.5, -2.5, 2.1, -0.4]> : tensor<4xf32>
  %f = dgraph.floor %x : tensor<4xf32>
  %c = dgraph.ceil %x : tensor<4xf32>
  %r = dgraph.round %x : tensor<4xf32>
  %d = dgraph.constant dense<[2.0, 9.0]> : tensor<2xf64>
  %sd = dgraph.sqrt %d : tensor<2xf64>
  %e = dgraph.constant dense<[2.0, 0.0]> : tensor<2xf32>
  %se = dgraph.sqrt %e : tensor<2xf32>
  %n = dgraph.constant dense<17> : tensor<i64>
  %k = dgraph.constant dense<2> : tensor<i64>
  %m = dgraph.constant dense<6> : tensor<i64>
  %nf = dgraph.cast %n : tensor<i64> to tensor<f32>
  %kf = dgraph.cast %k : tensor<i64> to tensor<f32>
  %mf = dgraph.cast %m : tensor<i64> to tensor<f32>
  %diff = dgraph.sub %nf, %kf : tensor<f32>
  %q = dgraph.div %diff, %mf : tensor<f32>
  %up = dgraph.ceil %q : tensor<f32>
  %limit = dgraph.cast %up : tensor<f32> to tensor<i64>
  return %f, %c, %r, %sd, %se, %limit : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2xf64>, tensor<2xf32>, tensor<i64>
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

// -----

// Tests that a transpose of the last two dimensions folds into matmul.
// CHECK-LABEL: func.func @matmul_transpose
// CHECK-SAME: (%[[X:.*]]: tensor<2x5x3xf32>, %[[W:.*]]: tensor<4x5xf32>)
// CHECK-NEXT: dgraph.matmul %[[X]], %[[W]] {transpose_lhs, transpose_rhs} : (tensor<2x5x3xf32>, tensor<4x5xf32>) -> tensor<2x3x4xf32>
func.func @matmul_transpose(%x: tensor<2x5x3xf32>, %w: tensor<4x5xf32>) -> tensor<2x3x4xf32> {
  %xt = dgraph.transpose %x, perm = [0, 2, 1] : (tensor<2x5x3xf32>) -> tensor<2x3x5xf32>
  %wt = dgraph.transpose %w, perm = [1, 0] : (tensor<4x5xf32>) -> tensor<5x4xf32>
  %y = dgraph.matmul %xt, %wt : (tensor<2x3x5xf32>, tensor<5x4xf32>) -> tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}

// -----

// Tests that broadcasts of batch dimensions fold into matmul's own
// broadcasting: a shared weight (2-D x 3-D) and a size-1 batch dimension.
// CHECK-LABEL: func.func @matmul_broadcast
// CHECK-SAME: (%[[W:.*]]: tensor<4x3xf32>, %[[X:.*]]: tensor<2x3x5xf32>, %[[A:.*]]: tensor<1x4x3xf32>, %[[B:.*]]: tensor<6x1x3x5xf32>)
// CHECK-NEXT: %[[Y:.*]] = dgraph.matmul %[[W]], %[[X]] : (tensor<4x3xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
// CHECK-NEXT: %[[Z:.*]] = dgraph.matmul %[[A]], %[[B]] : (tensor<1x4x3xf32>, tensor<6x1x3x5xf32>) -> tensor<6x1x4x5xf32>
// CHECK-NEXT: return %[[Y]], %[[Z]]
func.func @matmul_broadcast(%w: tensor<4x3xf32>, %x: tensor<2x3x5xf32>, %a: tensor<1x4x3xf32>, %b: tensor<6x1x3x5xf32>) -> (tensor<2x4x5xf32>, tensor<6x1x4x5xf32>) {
  %wb = dgraph.broadcast_in_dim %w, dims = [1, 2] : (tensor<4x3xf32>) -> tensor<2x4x3xf32>
  %y = dgraph.matmul %wb, %x : (tensor<2x4x3xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
  %ab = dgraph.broadcast_in_dim %a, dims = [1, 2, 3] : (tensor<1x4x3xf32>) -> tensor<6x1x4x3xf32>
  %z = dgraph.matmul %ab, %b : (tensor<6x1x4x3xf32>, tensor<6x1x3x5xf32>) -> tensor<6x1x4x5xf32>
  return %y, %z : tensor<2x4x5xf32>, tensor<6x1x4x5xf32>
}

// -----

// Tests that a batch broadcast stays where the matmul would not broadcast
// to the same result (both operands broadcast to a batch neither has), and
// that one of the two folds; broadcasts of the matrix dimensions stay.
// CHECK-LABEL: func.func @matmul_broadcast_kept
// CHECK-SAME: (%[[W:.*]]: tensor<4x3xf32>, %[[V:.*]]: tensor<3x5xf32>, %[[R:.*]]: tensor<4x1xf32>)
// CHECK: %[[VB:.*]] = dgraph.broadcast_in_dim %[[V]]
// CHECK: %[[Y:.*]] = dgraph.matmul %[[W]], %[[VB]] : (tensor<4x3xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
// CHECK: %[[RB:.*]] = dgraph.broadcast_in_dim %[[R]]
// CHECK: dgraph.matmul %[[RB]], %[[V]] : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
func.func @matmul_broadcast_kept(%w: tensor<4x3xf32>, %v: tensor<3x5xf32>, %r: tensor<4x1xf32>) -> (tensor<2x4x5xf32>, tensor<4x5xf32>) {
  %wb = dgraph.broadcast_in_dim %w, dims = [1, 2] : (tensor<4x3xf32>) -> tensor<2x4x3xf32>
  %vb = dgraph.broadcast_in_dim %v, dims = [1, 2] : (tensor<3x5xf32>) -> tensor<2x3x5xf32>
  %y = dgraph.matmul %wb, %vb : (tensor<2x4x3xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
  %rb = dgraph.broadcast_in_dim %r, dims = [0, 1] : (tensor<4x1xf32>) -> tensor<4x3xf32>
  %z = dgraph.matmul %rb, %v : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  return %y, %z : tensor<2x4x5xf32>, tensor<4x5xf32>
}

// -----

// Tests that rewritten ops keep what passes recorded on them (a pipeline's
// micro-batch and pass tags): a backward matmul whose transpose folds after
// dtcc-shard-microbatch used to lose them, and its pipeline stage with them.
// CHECK-LABEL: func.func @keeps_attrs
// CHECK: dgraph.matmul %{{.*}}, %{{.*}} {dshard.micro = 1 : i64, dshard.pass = "backward", transpose_rhs}
// CHECK: dgraph.gelu %{{.*}} {dshard.micro = 1 : i64, dshard.pass = "forward"}
func.func @keeps_attrs(%x: tensor<2x3xf32>, %w: tensor<4x3xf32>) -> (tensor<2x4xf32>, tensor<2x3xf32>) {
  %wt = dgraph.transpose %w, perm = [1, 0] : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %y = dgraph.matmul %x, %wt {dshard.micro = 1 : i64, dshard.pass = "backward"} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %half = dgraph.constant dense<0.5> : tensor<2x3xf32>
  %one = dgraph.constant dense<1.0> : tensor<2x3xf32>
  %s = dgraph.constant dense<1.41421356> : tensor<2x3xf32>
  %d = dgraph.div %x, %s : tensor<2x3xf32>
  %e = dgraph.erf %d : tensor<2x3xf32>
  %p = dgraph.add %e, %one : tensor<2x3xf32>
  %m = dgraph.mul %x, %p : tensor<2x3xf32>
  %g = dgraph.mul %m, %half {dshard.micro = 1 : i64, dshard.pass = "forward"} : tensor<2x3xf32>
  return %y, %g : tensor<2x4xf32>, tensor<2x3xf32>
}

// -----

// Tests that a sum of zero pads whose operands tile the result along one
// dimension (the gradient of a fused projection split in three) becomes
// their concat, in order along that dimension, whatever the sum's order.
// CHECK-LABEL: func.func @pads_to_concat
// CHECK-NEXT: %[[C:.*]] = dgraph.concat %arg2, %arg1, %arg0 dim = 2 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x12xf32>
// CHECK-NEXT: return %[[C]]
func.func @pads_to_concat(%a: tensor<2x3x4xf32>, %b: tensor<2x3x4xf32>, %c: tensor<2x3x4xf32>) -> tensor<2x3x12xf32> {
  %zero = dgraph.constant dense<0.0> : tensor<f32>
  %pa = dgraph.pad %a, %zero, low = [0, 0, 8], high = [0, 0, 0] : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x12xf32>
  %pb = dgraph.pad %b, %zero, low = [0, 0, 4], high = [0, 0, 4] : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x12xf32>
  %s = dgraph.add %pa, %pb : tensor<2x3x12xf32>
  %pc = dgraph.pad %c, %zero, low = [0, 0, 0], high = [0, 0, 8] : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x12xf32>
  %t = dgraph.add %s, %pc : tensor<2x3x12xf32>
  return %t : tensor<2x3x12xf32>
}

// -----

// Tests that pads that overlap, leave a gap, pad another value or pad two
// dimensions stay a sum.
// CHECK-LABEL: func.func @pads_stay
// CHECK-NOT: dgraph.concat
// CHECK: return
func.func @pads_stay(%a: tensor<2x4xf32>, %b: tensor<2x4xf32>) -> (tensor<2x8xf32>, tensor<2x9xf32>, tensor<2x8xf32>, tensor<3x8xf32>) {
  %zero = dgraph.constant dense<0.0> : tensor<f32>
  %one = dgraph.constant dense<1.0> : tensor<f32>
  %a0 = dgraph.pad %a, %zero, low = [0, 0], high = [0, 4] : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x8xf32>
  %b3 = dgraph.pad %b, %zero, low = [0, 3], high = [0, 1] : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x8xf32>
  %overlap = dgraph.add %a0, %b3 : tensor<2x8xf32>
  %a9 = dgraph.pad %a, %zero, low = [0, 0], high = [0, 5] : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x9xf32>
  %b9 = dgraph.pad %b, %zero, low = [0, 5], high = [0, 0] : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x9xf32>
  %gap = dgraph.add %a9, %b9 : tensor<2x9xf32>
  %a1 = dgraph.pad %a, %one, low = [0, 0], high = [0, 4] : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x8xf32>
  %b1 = dgraph.pad %b, %one, low = [0, 4], high = [0, 0] : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x8xf32>
  %ones = dgraph.add %a1, %b1 : tensor<2x8xf32>
  %a2 = dgraph.pad %a, %zero, low = [1, 0], high = [0, 4] : (tensor<2x4xf32>, tensor<f32>) -> tensor<3x8xf32>
  %b2 = dgraph.pad %b, %zero, low = [0, 4], high = [1, 0] : (tensor<2x4xf32>, tensor<f32>) -> tensor<3x8xf32>
  %two = dgraph.add %a2, %b2 : tensor<3x8xf32>
  return %overlap, %gap, %ones, %two : tensor<2x8xf32>, tensor<2x9xf32>, tensor<2x8xf32>, tensor<3x8xf32>
}

// -----

// Tests that float powers by the splat constants 1, 2, 3 and -1 become the
// operand, products and a reciprocal; other exponents and integer powers
// stay pow.
// CHECK-LABEL: func.func @pow_small_constants
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>, %[[N:.*]]: tensor<2x3xi32>)
// CHECK-DAG: %[[SQ:.*]] = dgraph.mul %[[X]], %[[X]] : tensor<2x3xf32>
// CHECK-DAG: %[[SQ2:.*]] = dgraph.mul %[[X]], %[[X]] : tensor<2x3xf32>
// CHECK-DAG: %[[CUBE:.*]] = dgraph.mul %[[SQ2]], %[[X]] : tensor<2x3xf32>
// CHECK-DAG: %[[INV:.*]] = dgraph.reciprocal %[[X]] : tensor<2x3xf32>
// CHECK-DAG: %[[HALF:.*]] = dgraph.pow %[[X]], %{{.*}} : tensor<2x3xf32>
// CHECK-DAG: %[[INT:.*]] = dgraph.pow %[[N]], %{{.*}} : tensor<2x3xi32>
// CHECK: return %[[X]], %{{.*}}, %{{.*}}, %[[INV]], %[[HALF]], %[[INT]]
func.func @pow_small_constants(%x: tensor<2x3xf32>, %n: tensor<2x3xi32>)
    -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>,
        tensor<2x3xf32>, tensor<2x3xi32>) {
  %c1 = dgraph.constant dense<1.0> : tensor<2x3xf32>
  %c2 = dgraph.constant dense<2.0> : tensor<2x3xf32>
  %c3 = dgraph.constant dense<3.0> : tensor<2x3xf32>
  %cm1 = dgraph.constant dense<-1.0> : tensor<2x3xf32>
  %ch = dgraph.constant dense<0.5> : tensor<2x3xf32>
  %i2 = dgraph.constant dense<2> : tensor<2x3xi32>
  %p1 = dgraph.pow %x, %c1 : tensor<2x3xf32>
  %p2 = dgraph.pow %x, %c2 : tensor<2x3xf32>
  %p3 = dgraph.pow %x, %c3 : tensor<2x3xf32>
  %pm1 = dgraph.pow %x, %cm1 : tensor<2x3xf32>
  %ph = dgraph.pow %x, %ch : tensor<2x3xf32>
  %pi = dgraph.pow %n, %i2 : tensor<2x3xi32>
  return %p1, %p2, %p3, %pm1, %ph, %pi : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi32>
}

// -----

// Tests that log(sigmoid(x)) becomes -softplus(-x), with softplus(v) =
// max(v, 0) + log1p(exp(-|v|)): no sigmoid rounded to 0 under the log, and
// log1p(u) = log(w) - ((w - 1) - u) / w for w = 1 + u, whose second term
// keeps u where w rounds to 1.
// CHECK-LABEL: func.func @log_sigmoid
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NOT: dgraph.sigmoid
// CHECK-DAG: %[[ONE:.*]] = dgraph.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK-DAG: %[[ZERO:.*]] = dgraph.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: %[[ARG:.*]] = dgraph.neg %[[X]]
// CHECK: %[[ABS:.*]] = dgraph.abs %[[ARG]]
// CHECK: %[[NABS:.*]] = dgraph.neg %[[ABS]]
// CHECK: %[[E:.*]] = dgraph.exp %[[NABS]]
// CHECK: %[[W:.*]] = dgraph.add %[[E]], %[[ONE]] : tensor<4xf32>
// CHECK: %[[WM1:.*]] = dgraph.sub %[[W]], %[[ONE]]
// CHECK: %[[ERR:.*]] = dgraph.sub %[[WM1]], %[[E]]
// CHECK: %[[LW:.*]] = dgraph.log %[[W]]
// CHECK: %[[Q:.*]] = dgraph.div %[[ERR]], %[[W]]
// CHECK: %[[L:.*]] = dgraph.sub %[[LW]], %[[Q]]
// CHECK: %[[M:.*]] = dgraph.max %[[ARG]], %[[ZERO]]
// CHECK: %[[SP:.*]] = dgraph.add %[[M]], %[[L]]
// CHECK: %[[Y:.*]] = dgraph.neg %[[SP]]
// CHECK: return %[[Y]]
func.func @log_sigmoid(%x: tensor<4xf32>) -> tensor<4xf32> {
  %s = dgraph.sigmoid %x : tensor<4xf32>
  %y = dgraph.log %s : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that log(1 - sigmoid(x)) becomes -softplus(x) (BCE-with-logits'
// second term as exported), and that the sigmoid another op reads stays.
// CHECK-LABEL: func.func @log_one_minus_sigmoid
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK: %[[S:.*]] = dgraph.sigmoid %[[X]]
// CHECK: %[[ABS:.*]] = dgraph.abs %[[X]]
// CHECK: dgraph.log
// CHECK: %[[M:.*]] = dgraph.max %[[X]], %{{.*}}
// CHECK: %[[SP:.*]] = dgraph.add %[[M]], %{{.*}}
// CHECK: %[[Y:.*]] = dgraph.neg %[[SP]]
// CHECK: return %[[Y]], %[[S]]
func.func @log_one_minus_sigmoid(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %one = dgraph.constant dense<1.0> : tensor<4xf32>
  %s = dgraph.sigmoid %x : tensor<4xf32>
  %d = dgraph.sub %one, %s : tensor<4xf32>
  %y = dgraph.log %d : tensor<4xf32>
  return %y, %s : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that other logs stay: of 2 - sigmoid(x), of a plain value.
// CHECK-LABEL: func.func @log_not_sigmoid
// CHECK: dgraph.sigmoid
// CHECK: dgraph.sub
// CHECK: dgraph.log
// CHECK: dgraph.log
// CHECK-NOT: dgraph.abs
func.func @log_not_sigmoid(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %two = dgraph.constant dense<2.0> : tensor<4xf32>
  %s = dgraph.sigmoid %x : tensor<4xf32>
  %d = dgraph.sub %two, %s : tensor<4xf32>
  %y = dgraph.log %d : tensor<4xf32>
  %z = dgraph.log %x : tensor<4xf32>
  return %y, %z : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that a reduction over dimensions of size 1 only is a reshape (each
// element reduced alone), for every reduction, keeping what passes recorded
// on it; one over a longer dimension stays.
// CHECK-LABEL: func.func @reduce_unit_dims
// CHECK-NEXT: %[[S:.*]] = dgraph.reshape %arg0 {dtcc.pass = "bwd"} : (tensor<1x4x1x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[M:.*]] = dgraph.reshape %arg0 : (tensor<1x4x1x8xf32>) -> tensor<4x1x8xf32>
// CHECK-NEXT: %[[N:.*]] = dgraph.reshape %arg0 : (tensor<1x4x1x8xf32>) -> tensor<1x4x8xf32>
// CHECK-NEXT: %[[P:.*]] = dgraph.reshape %arg0 : (tensor<1x4x1x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[K:.*]] = dgraph.reduce_sum %arg0, dims = [0, 1] : (tensor<1x4x1x8xf32>) -> tensor<1x8xf32>
// CHECK-NEXT: return %[[S]], %[[M]], %[[N]], %[[P]], %[[K]]
func.func @reduce_unit_dims(%x: tensor<1x4x1x8xf32>) -> (tensor<4x8xf32>, tensor<4x1x8xf32>, tensor<1x4x8xf32>, tensor<4x8xf32>, tensor<1x8xf32>) {
  %s = dgraph.reduce_sum %x, dims = [0, 2] {dtcc.pass = "bwd"} : (tensor<1x4x1x8xf32>) -> tensor<4x8xf32>
  %m = dgraph.reduce_max %x, dims = [0] : (tensor<1x4x1x8xf32>) -> tensor<4x1x8xf32>
  %n = dgraph.reduce_min %x, dims = [2] : (tensor<1x4x1x8xf32>) -> tensor<1x4x8xf32>
  %p = dgraph.reduce_prod %x, dims = [2, 0] : (tensor<1x4x1x8xf32>) -> tensor<4x8xf32>
  %k = dgraph.reduce_sum %x, dims = [0, 1] : (tensor<1x4x1x8xf32>) -> tensor<1x8xf32>
  return %s, %m, %n, %p, %k : tensor<4x8xf32>, tensor<4x1x8xf32>, tensor<1x4x8xf32>, tensor<4x8xf32>, tensor<1x8xf32>
}
