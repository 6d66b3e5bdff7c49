// RUN: dtcc-opt %s -split-input-file -dtcc-graph-fuse-attention="frozen=buf" | FileCheck %s

// Tests the GPT-style core (as the zoo's GPT imports): Q·(Kᵀ) with Kᵀ a
// separate transpose, divided by a splat constant, plus a broadcast causal
// mask built from iotas (select of j - i >= 1): one dgraph.attention,
// causal, scale 1/4, no mask operand, K transposed back, the softmax's
// layer; the scores ops are gone.
// CHECK-LABEL: module attributes {dgraph.fused_attention = "1 of 1 attention cores fused (1 causal, 0 with a mask operand; layers 0)"}
// CHECK-LABEL: func.func @gpt
// CHECK: %[[K:.*]] = dgraph.transpose %arg1, perm = [0, 2, 1]
// CHECK: %[[O:.*]], %{{.*}} = dgraph.attention %arg0, %[[K]], %arg2 {causal, dgraph.layer = #dgraph.layer<index = 0>, scale = 2.500000e-01 : f64}
// CHECK-NOT: dgraph.softmax
// CHECK: return %[[O]]
func.func @gpt(%q: tensor<2x8x16xf32>, %kt: tensor<2x16x8xf32>, %v: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %c4 = dgraph.constant dense<4.0> : tensor<2x8x8xf32>
  %one = dgraph.constant dense<1> : tensor<8x8xi64>
  %neg = dgraph.constant dense<-1.0e9> : tensor<8x8xf32>
  %zero = dgraph.constant dense<0.0> : tensor<8x8xf32>
  %i = dgraph.iota dim = 0 : tensor<8x8xi64>
  %j = dgraph.iota dim = 1 : tensor<8x8xi64>
  %ji = dgraph.sub %j, %i : tensor<8x8xi64>
  %above = dgraph.ge %ji, %one : tensor<8x8xi64>
  %mask = dgraph.select %above, %neg, %zero : tensor<8x8xf32>
  %s = dgraph.matmul %q, %kt : (tensor<2x8x16xf32>, tensor<2x16x8xf32>) -> tensor<2x8x8xf32>
  %d = dgraph.div %s, %c4 : tensor<2x8x8xf32>
  %mb = dgraph.broadcast_in_dim %mask, dims = [1, 2] : (tensor<8x8xf32>) -> tensor<2x8x8xf32>
  %a = dgraph.add %d, %mb : tensor<2x8x8xf32>
  %p = dgraph.softmax %a, dim = 2 {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x8x8xf32>
  %o = dgraph.matmul %p, %v : (tensor<2x8x8xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %o : tensor<2x8x16xf32>
}

// -----

// Tests a boolean mask through select (where(mask, scores, -inf)), the
// scale after the mask (it scales the mask too), K with transpose_rhs, and
// a padding mask from an input: causal from the select, the padding mask
// the operand at its broadcast size [2, 1, 8], scaled.
// CHECK-LABEL: module attributes {dgraph.fused_attention = "1 of 1 attention cores fused (1 causal, 1 with a mask operand)"}
// CHECK-LABEL: func.func @where
// CHECK: %[[PAD:.*]] = dgraph.reshape %arg3 : (tensor<2x8xf32>) -> tensor<2x1x8xf32>
// CHECK: %[[M:.*]] = dgraph.mul %[[PAD]], %{{.*}} : tensor<2x1x8xf32>
// CHECK: dgraph.attention %arg0, %arg1, %arg2 mask %[[M]] {causal, scale = 5.000000e-01 : f64}
// CHECK-SAME: (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x1x8xf32>) -> (tensor<2x8x4xf32>, tensor<2x8xf32>)
func.func @where(%q: tensor<2x8x4xf32>, %k: tensor<2x8x4xf32>, %v: tensor<2x8x4xf32>, %pad: tensor<2x8xf32>) -> tensor<2x8x4xf32> {
  %half = dgraph.constant dense<0.5> : tensor<2x8x8xf32>
  %ninf = dgraph.constant dense<0xFF800000> : tensor<2x8x8xf32>
  %i = dgraph.iota dim = 0 : tensor<8x8xi64>
  %j = dgraph.iota dim = 1 : tensor<8x8xi64>
  %keep = dgraph.le %j, %i : tensor<8x8xi64>
  %kb = dgraph.broadcast_in_dim %keep, dims = [1, 2] : (tensor<8x8xi1>) -> tensor<2x8x8xi1>
  %s = dgraph.matmul %q, %k {transpose_rhs} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
  %w = dgraph.select %kb, %s, %ninf : tensor<2x8x8xf32>
  %pb = dgraph.broadcast_in_dim %pad, dims = [0, 2] : (tensor<2x8xf32>) -> tensor<2x8x8xf32>
  %a = dgraph.add %pb, %w : tensor<2x8x8xf32>
  %m = dgraph.mul %a, %half : tensor<2x8x8xf32>
  %p = dgraph.softmax %m, dim = 2 : tensor<2x8x8xf32>
  %o = dgraph.matmul %p, %v : (tensor<2x8x8xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  return %o : tensor<2x8x4xf32>
}

// -----

// Tests a PyTorch-style buffer mask (a frozen variable, triu of -1e9):
// causal. A mask that is not causal (here: the diagonal masked too) stays
// the operand.
// CHECK-LABEL: module attributes {dgraph.fused_attention = "2 of 2 attention cores fused (1 causal, 1 with a mask operand)"}
// CHECK-LABEL: func.func @buffer
// CHECK: dgraph.attention %arg0, %arg1, %arg2 {causal, scale = 1.000000e+00 : f64}
// CHECK: %[[S:.*]] = dgraph.load @strict
// CHECK: dgraph.attention %arg0, %arg1, %arg2 mask %{{.*}} {scale = 1.000000e+00 : f64}
dgraph.variable @buf : tensor<3x3xf32> = dense<[[0.0, -1.0e9, -1.0e9], [0.0, 0.0, -1.0e9], [0.0, 0.0, 0.0]]> {trainable}
dgraph.variable @strict : tensor<3x3xf32> = dense<[[-1.0e9, -1.0e9, -1.0e9], [0.0, -1.0e9, -1.0e9], [0.0, 0.0, -1.0e9]]>
func.func @buffer(%q: tensor<1x3x2xf32>, %k: tensor<1x3x2xf32>, %v: tensor<1x3x2xf32>) -> (tensor<1x3x2xf32>, tensor<1x3x2xf32>) {
  %m = dgraph.load @buf : tensor<3x3xf32>
  %mb = dgraph.broadcast_in_dim %m, dims = [1, 2] : (tensor<3x3xf32>) -> tensor<1x3x3xf32>
  %s = dgraph.matmul %q, %k {transpose_rhs} : (tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<1x3x3xf32>
  %a = dgraph.add %s, %mb : tensor<1x3x3xf32>
  %p = dgraph.softmax %a, dim = 2 : tensor<1x3x3xf32>
  %o = dgraph.matmul %p, %v : (tensor<1x3x3xf32>, tensor<1x3x2xf32>) -> tensor<1x3x2xf32>
  %m2 = dgraph.load @strict : tensor<3x3xf32>
  %mb2 = dgraph.broadcast_in_dim %m2, dims = [1, 2] : (tensor<3x3xf32>) -> tensor<1x3x3xf32>
  %s2 = dgraph.matmul %q, %k {transpose_rhs} : (tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<1x3x3xf32>
  %a2 = dgraph.add %s2, %mb2 : tensor<1x3x3xf32>
  %p2 = dgraph.softmax %a2, dim = 2 : tensor<1x3x3xf32>
  %o2 = dgraph.matmul %p2, %v : (tensor<1x3x3xf32>, tensor<1x3x2xf32>) -> tensor<1x3x2xf32>
  return %o, %o2 : tensor<1x3x2xf32>, tensor<1x3x2xf32>
}

// -----

// Near misses, each left as it is, and the module says why: dropout after
// the softmax; the probabilities also returned; a learned (trainable)
// additive bias; a negative scale; a select whose fill is -1 (not masked
// out); a softmax along the queries; K broadcast over the batch.
// CHECK-LABEL: module attributes {dgraph.fused_attention = "0 of 7 attention cores fused; 1 not: '{{.*}}' by something other than a positive constant; 1 not: 'dgraph.softmax' in the core has a result used outside the chain; 1 not: a mask that a parameter reaches (its gradient); 1 not: a select whose fill is not a constant <= -1e9; 1 not: operands of different ranks (broadcast batch dimensions); 1 not: ops between the softmax and the product with the values ('dgraph.dropout'); 1 not: softmax not along the keys"}
// CHECK-LABEL: func.func @misses
// CHECK-NOT: dgraph.attention
// CHECK: return
dgraph.variable @bias : tensor<4x4xf32> {trainable}
func.func @misses(%step: tensor<i64>, %q: tensor<2x4x4xf32>, %k: tensor<2x4x4xf32>, %v: tensor<2x4x4xf32>, %k2: tensor<4x4xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>) {
  %neg = dgraph.constant dense<-2.0> : tensor<2x4x4xf32>
  %m1 = dgraph.constant dense<-1.0> : tensor<2x4x4xf32>
  %t = dgraph.constant dense<true> : tensor<2x4x4xi1>
  %s1 = dgraph.matmul %q, %k {transpose_rhs} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %p1 = dgraph.softmax %s1, dim = 2 : tensor<2x4x4xf32>
  %d1, %dm = dgraph.dropout %p1, %step {ratio = 1.000000e-01 : f32, seed = 7 : i64} : (tensor<2x4x4xf32>, tensor<i64>) -> (tensor<2x4x4xf32>, tensor<2x4x4xi1>)
  %o1 = dgraph.matmul %d1, %v : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %s2 = dgraph.matmul %q, %k {transpose_rhs} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %p2 = dgraph.softmax %s2, dim = 2 : tensor<2x4x4xf32>
  %o2 = dgraph.matmul %p2, %v : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %b = dgraph.load @bias : tensor<4x4xf32>
  %bb = dgraph.broadcast_in_dim %b, dims = [1, 2] : (tensor<4x4xf32>) -> tensor<2x4x4xf32>
  %s3 = dgraph.matmul %q, %k {transpose_rhs} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %a3 = dgraph.add %s3, %bb : tensor<2x4x4xf32>
  %p3 = dgraph.softmax %a3, dim = 2 : tensor<2x4x4xf32>
  %o3 = dgraph.matmul %p3, %v : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %s4 = dgraph.matmul %q, %k {transpose_rhs} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %a4 = dgraph.mul %s4, %neg : tensor<2x4x4xf32>
  %p4 = dgraph.softmax %a4, dim = 2 : tensor<2x4x4xf32>
  %o4 = dgraph.matmul %p4, %v : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %s5 = dgraph.matmul %q, %k {transpose_rhs} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %a5 = dgraph.select %t, %s5, %m1 : tensor<2x4x4xf32>
  %p5 = dgraph.softmax %a5, dim = 2 : tensor<2x4x4xf32>
  %o5 = dgraph.matmul %p5, %v : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %s6 = dgraph.matmul %q, %k {transpose_rhs} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %p6 = dgraph.softmax %s6, dim = 1 : tensor<2x4x4xf32>
  %o6 = dgraph.matmul %p6, %v : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %s7 = dgraph.matmul %q, %k2 {transpose_rhs} : (tensor<2x4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x4xf32>
  %p7 = dgraph.softmax %s7, dim = 2 : tensor<2x4x4xf32>
  %o7 = dgraph.matmul %p7, %v : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  return %o1, %o2, %p2, %o3, %o4, %o5, %o6, %o7 : tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>
}

// -----

// Tests that an f64 core's log-sum-exp is f64 (the kernels' accumulator
// type; an f32 one would round the probabilities the backward recomputes),
// an f32 core's f32.
// CHECK-LABEL: func.func @f64_core
// CHECK: dgraph.attention %arg0, %arg1, %arg2 {scale = 1.250000e-01 : f64} : (tensor<2x8x16xf64>, tensor<2x8x16xf64>, tensor<2x8x16xf64>) -> (tensor<2x8x16xf64>, tensor<2x8xf64>)
// CHECK-LABEL: func.func @f32_core
// CHECK: dgraph.attention %arg0, %arg1, %arg2 {scale = 1.250000e-01 : f64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xf32>)
func.func @f64_core(%q: tensor<2x8x16xf64>, %k: tensor<2x8x16xf64>, %v: tensor<2x8x16xf64>) -> tensor<2x8x16xf64> {
  %c = dgraph.constant dense<0.125> : tensor<2x8x8xf64>
  %s = dgraph.matmul %q, %k {transpose_rhs} : (tensor<2x8x16xf64>, tensor<2x8x16xf64>) -> tensor<2x8x8xf64>
  %d = dgraph.mul %s, %c : tensor<2x8x8xf64>
  %p = dgraph.softmax %d, dim = 2 : tensor<2x8x8xf64>
  %o = dgraph.matmul %p, %v : (tensor<2x8x8xf64>, tensor<2x8x16xf64>) -> tensor<2x8x16xf64>
  return %o : tensor<2x8x16xf64>
}
func.func @f32_core(%q: tensor<2x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %c = dgraph.constant dense<0.125> : tensor<2x8x8xf32>
  %s = dgraph.matmul %q, %k {transpose_rhs} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
  %d = dgraph.mul %s, %c : tensor<2x8x8xf32>
  %p = dgraph.softmax %d, dim = 2 : tensor<2x8x8xf32>
  %o = dgraph.matmul %p, %v : (tensor<2x8x8xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %o : tensor<2x8x16xf32>
}

// -----

// Tests the guard that ONNX Attention's import puts around the softmax
// (zeros for a query row without a key): its mask, evaluated from iotas
// (causal: every row keeps key 0), leaves each row a key, so the guard is
// dropped and the core fuses, causal.
// CHECK-LABEL: module attributes {dgraph.fused_attention = "1 of 1 attention cores fused (1 causal, 0 with a mask operand); 1 guards against query rows without a key dropped (every row of their masks has one)"}
// CHECK-LABEL: func.func @guarded
// CHECK: dgraph.attention %arg0, %arg1, %arg2 {causal, scale = 5.000000e-01 : f64}
// CHECK-NOT: dgraph.softmax
func.func @guarded(%q: tensor<2x8x4xf32>, %k: tensor<2x8x4xf32>, %v: tensor<2x8x4xf32>) -> tensor<2x8x4xf32> {
  %half = dgraph.constant dense<0.5> : tensor<2x8x8xf32>
  %zero = dgraph.constant dense<0.0> : tensor<8x8xf32>
  %ninf = dgraph.constant dense<0xFF800000> : tensor<8x8xf32>
  %ninfrow = dgraph.constant dense<0xFF800000> : tensor<1x8xf32>
  %zeros = dgraph.constant dense<0.0> : tensor<2x8x8xf32>
  %i = dgraph.iota dim = 0 : tensor<8x8xi64>
  %j = dgraph.iota dim = 1 : tensor<8x8xi64>
  %keep = dgraph.le %j, %i : tensor<8x8xi64>
  %bias = dgraph.select %keep, %zero, %ninf : tensor<8x8xf32>
  %small = dgraph.reshape %bias : (tensor<8x8xf32>) -> tensor<1x8x8xf32>
  %s = dgraph.matmul %q, %k {transpose_rhs} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
  %m = dgraph.mul %s, %half : tensor<2x8x8xf32>
  %bb = dgraph.broadcast_in_dim %small, dims = [0, 1, 2] : (tensor<1x8x8xf32>) -> tensor<2x8x8xf32>
  %a = dgraph.add %m, %bb : tensor<2x8x8xf32>
  %rm = dgraph.reduce_max %small, dims = [2] : (tensor<1x8x8xf32>) -> tensor<1x8xf32>
  %empty = dgraph.eq %rm, %ninfrow : tensor<1x8xf32>
  %e = dgraph.broadcast_in_dim %empty, dims = [0, 1] : (tensor<1x8xi1>) -> tensor<2x8x8xi1>
  %safe = dgraph.select %e, %zeros, %a : tensor<2x8x8xf32>
  %p = dgraph.softmax %safe, dim = 2 : tensor<2x8x8xf32>
  %p0 = dgraph.select %e, %zeros, %p : tensor<2x8x8xf32>
  %o = dgraph.matmul %p0, %v : (tensor<2x8x8xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  return %o : tensor<2x8x4xf32>
}

// -----

// The same guard over a mask from an input (not evaluated): kept, and the
// core stays unfused.
// CHECK-LABEL: module attributes {dgraph.fused_attention = "0 of 1 attention cores fused
// CHECK-LABEL: func.func @guard_kept
// CHECK: dgraph.softmax
// CHECK-NOT: dgraph.attention
func.func @guard_kept(%q: tensor<2x8x4xf32>, %k: tensor<2x8x4xf32>, %v: tensor<2x8x4xf32>, %small: tensor<1x8x8xf32>) -> tensor<2x8x4xf32> {
  %half = dgraph.constant dense<0.5> : tensor<2x8x8xf32>
  %ninfrow = dgraph.constant dense<0xFF800000> : tensor<1x8xf32>
  %zeros = dgraph.constant dense<0.0> : tensor<2x8x8xf32>
  %s = dgraph.matmul %q, %k {transpose_rhs} : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
  %m = dgraph.mul %s, %half : tensor<2x8x8xf32>
  %bb = dgraph.broadcast_in_dim %small, dims = [0, 1, 2] : (tensor<1x8x8xf32>) -> tensor<2x8x8xf32>
  %a = dgraph.add %m, %bb : tensor<2x8x8xf32>
  %rm = dgraph.reduce_max %small, dims = [2] : (tensor<1x8x8xf32>) -> tensor<1x8xf32>
  %empty = dgraph.eq %rm, %ninfrow : tensor<1x8xf32>
  %e = dgraph.broadcast_in_dim %empty, dims = [0, 1] : (tensor<1x8xi1>) -> tensor<2x8x8xi1>
  %safe = dgraph.select %e, %zeros, %a : tensor<2x8x8xf32>
  %p = dgraph.softmax %safe, dim = 2 : tensor<2x8x8xf32>
  %p0 = dgraph.select %e, %zeros, %p : tensor<2x8x8xf32>
  %o = dgraph.matmul %p0, %v : (tensor<2x8x8xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  return %o : tensor<2x8x4xf32>
}
