// RUN: dtcc-opt %s -split-input-file -verify-diagnostics

// Tests that a variable's initial value must have its type.
// expected-error @+1 {{expected initial value of type 'tensor<2xf32>', got 'tensor<3xf32>'}}
"dgraph.variable"() <{sym_name = "w", type = tensor<2xf32>, initial_value = dense<1.0> : tensor<3xf32>}> : () -> ()

// -----

// Tests that a load must name a variable.
func.func @f() {
  // expected-error @+1 {{expected 'nope' to name a dgraph.variable}}
  %0 = dgraph.load @nope : tensor<2xf32>
  return
}

// -----

// Tests that a load must have the variable's type.
dgraph.variable @w : tensor<2xf32>
func.func @f() {
  // expected-error @+1 {{expected type 'tensor<2xf32>' of variable 'w', got 'tensor<3xf32>'}}
  %0 = dgraph.load @w : tensor<3xf32>
  return
}

// -----

// Tests that a store must have the variable's type.
dgraph.variable @w : tensor<2xf32>
func.func @f(%x: tensor<3xf32>) {
  // expected-error @+1 {{expected type 'tensor<2xf32>' of variable 'w', got 'tensor<3xf32>'}}
  dgraph.store %x, @w : tensor<3xf32>
  return
}

// -----

// Tests that gelu checks its approximation.
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{expected approximate "none" or "tanh", got "fast"}}
  %0 = dgraph.gelu %x {approximate = "fast"} : tensor<2xf32>
  return
}

// -----

// Tests that transcendental ops take floats only.
func.func @f(%x: tensor<2xi32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of}}
  %0 = dgraph.exp %x : tensor<2xi32>
  return
}

// -----

// Tests that elementwise operands must have one type.
func.func @f(%x: tensor<2xf32>, %y: tensor<3xf32>) {
  // expected-error @+1 {{all non-scalar operands/results must have the same shape and base type}}
  %0 = "dgraph.add"(%x, %y) : (tensor<2xf32>, tensor<3xf32>) -> tensor<2xf32>
  return
}

// -----

// Tests that dynamic shapes are rejected.
func.func @f(%x: tensor<?xf32>) {
  // expected-error @+1 {{must be statically shaped tensor}}
  %0 = dgraph.neg %x : tensor<?xf32>
  return
}

// -----

// Tests that a cast keeps the shape.
func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{all non-scalar operands/results must have the same shape and base type}}
  %0 = dgraph.cast %x : tensor<2xf32> to tensor<3xi32>
  return
}

// -----

// Tests that iota's dimension lies inside the result.
func.func @f() {
  // expected-error @+1 {{expected dim in [0, 2), got 2}}
  %0 = dgraph.iota dim = 2 : tensor<2x3xi64>
  return
}

// -----

// Tests that broadcast dims cover every operand dimension.
func.func @f(%x: tensor<3xf32>) {
  // expected-error @+1 {{expected 1 broadcast dims (one per operand dimension), got 2}}
  %0 = dgraph.broadcast_in_dim %x, dims = [0, 1] : (tensor<3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that broadcast dims increase.
func.func @f(%x: tensor<3x2xf32>) {
  // expected-error @+1 {{expected strictly increasing broadcast dims, got 0 after 1}}
  %0 = dgraph.broadcast_in_dim %x, dims = [1, 0] : (tensor<3x2xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that a broadcast keeps each size or expands a 1.
func.func @f(%x: tensor<3xf32>) {
  // expected-error @+1 {{expected operand dim 0 to be 1 or 4, got 3}}
  %0 = dgraph.broadcast_in_dim %x, dims = [1] : (tensor<3xf32>) -> tensor<2x4xf32>
  return
}

// -----

// Tests that a broadcast dim lies inside the result.
func.func @f(%x: tensor<3xf32>) {
  // expected-error @+1 {{expected broadcast dim in [0, 2), got 2}}
  %0 = dgraph.broadcast_in_dim %x, dims = [2] : (tensor<3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that a broadcast keeps the element type.
func.func @f(%x: tensor<3xf32>) {
  // expected-error @+1 {{expected result element type 'f32', got 'f16'}}
  %0 = dgraph.broadcast_in_dim %x, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf16>
  return
}

// -----

// Tests that a reshape keeps the number of elements.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{expected 6 elements in the result, got 8 (2x4)}}
  %0 = dgraph.reshape %x : (tensor<2x3xf32>) -> tensor<2x4xf32>
  return
}

// -----

// Tests that a reshape keeps the element type.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{expected result element type 'f32', got 'i32'}}
  %0 = dgraph.reshape %x : (tensor<2x3xf32>) -> tensor<6xi32>
  return
}

// -----

// Tests that transpose needs a permutation.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected distinct perm entries, got 0 twice}}
  %0 = dgraph.transpose %x, perm = [0, 0] : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// -----

// Tests that transpose's perm has one entry per dimension.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected perm of size 2, got 1}}
  %0 = dgraph.transpose %x, perm = [0] : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

// Tests that the transposed shape is checked.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{inferred type(s) 'tensor<3x2xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf32>'}}
  %0 = dgraph.transpose %x, perm = [1, 0] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that a slice stays inside its operand.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected 0 <= start <= limit <= 3 in dim 1, got 1:4}}
  %0 = dgraph.slice %x, start = [0, 1], limit = [2, 4], stride = [1, 1] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that slice strides are positive.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected stride >= 1 in dim 0, got 0}}
  %0 = dgraph.slice %x, start = [0, 0], limit = [2, 3], stride = [0, 1] : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that slice attributes have one entry per dimension.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected start, limit and stride of size 2}}
  %0 = dgraph.slice %x, start = [0], limit = [2], stride = [1] : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

// Tests that reverse dims are distinct and in range.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{expected dims in [0, 2), got 2}}
  %0 = dgraph.reverse %x, dims = [2] : tensor<2x3xf32>
  return
}

// -----

// Tests that concatenated operands agree off the concatenated dimension.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<2x4xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected operand 1 dim 1 to be 3, got 4}}
  %0 = dgraph.concat %x, %y dim = 0 : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return
}

// -----

// Tests that concatenated operands share element type and rank.
func.func @f(%x: tensor<2x3xf32>, %y: tensor<2x3xf16>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected operand 1 of rank 2 and element type 'f32', got 'tensor<2x3xf16>'}}
  %0 = dgraph.concat %x, %y dim = 0 : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<4x3xf32>
  return
}

// -----

// Tests that concat's dim lies inside the rank.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected dim in [0, 2), got 2}}
  %0 = dgraph.concat %x, %x dim = 2 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that a pad value is a scalar of the operand's element type.
func.func @f(%x: tensor<2xf32>, %v: tensor<1xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected a rank-0 pad value of type 'f32', got 'tensor<1xf32>'}}
  %0 = dgraph.pad %x, %v, low = [1], high = [1] : (tensor<2xf32>, tensor<1xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that padding cannot remove more than the dimension holds.
func.func @f(%x: tensor<2xf32>, %v: tensor<f32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected a non-negative size in dim 0, got -1}}
  %0 = dgraph.pad %x, %v, low = [-3], high = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<0xf32>
  return
}

// -----

// Tests that gather's axis lies inside the operand.
func.func @f(%x: tensor<2x3xf32>, %i: tensor<4xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected axis in [0, 2), got 2}}
  %0 = dgraph.gather %x, %i axis = 2 : (tensor<2x3xf32>, tensor<4xi64>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that gather takes integer indices.
func.func @f(%x: tensor<2x3xf32>, %i: tensor<4xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = dgraph.gather %x, %i axis = 0 : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<4x3xf32>
  return
}

// -----

// Tests that gather_elements indices have the operand's rank.
func.func @f(%x: tensor<2x3xf32>, %i: tensor<2xi64>) {
  // expected-error @+1 {{expected indices of rank 2, got 1}}
  %0 = dgraph.gather_elements %x, %i axis = 0 : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<2xf32>
  return
}

// -----

// Tests that scatter_add's updates match its indices.
func.func @f(%u: tensor<5x4xf32>, %i: tensor<6xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected updates dim 0 to be 6, got 5}}
  %0 = dgraph.scatter_add %u, %i axis = 0, dim_size = 10 : (tensor<5x4xf32>, tensor<6xi64>) -> tensor<10x4xf32>
  return
}

// -----

// Tests that scatter_add needs a positive dimension size.
func.func @f(%u: tensor<5x4xf32>, %i: tensor<5xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected dim_size >= 1, got 0}}
  %0 = dgraph.scatter_add %u, %i axis = 0, dim_size = 0 : (tensor<5x4xf32>, tensor<5xi64>) -> tensor<0x4xf32>
  return
}

// -----

// Tests that reduction dims are distinct.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected distinct reduction dims, got 1 twice}}
  %0 = dgraph.reduce_sum %x, dims = [1, 1] : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

// Tests that reduction dims lie inside the operand.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected reduction dims in [0, 2), got 5}}
  %0 = dgraph.reduce_max %x, dims = [5] : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

// Tests that argmax returns i64 without the reduced dimension.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{inferred type(s) 'tensor<2xi64>' are incompatible}}
  %0 = dgraph.argmax %x, dim = 1 : (tensor<2x3xf32>) -> tensor<2x3xi64>
  return
}

// -----

// Tests that cumsum's dim lies inside the operand.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{expected dim in [0, 2), got -1}}
  %0 = dgraph.cumsum %x, dim = -1 : tensor<2x3xf32>
  return
}

// -----

// Tests that matmul operands have rank >= 2.
func.func @f(%x: tensor<3xf32>, %w: tensor<3x4xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected operands of rank >= 2, got 1 and 2}}
  %0 = dgraph.matmul %x, %w : (tensor<3xf32>, tensor<3x4xf32>) -> tensor<4xf32>
  return
}

// -----

// Tests that matmul contracts matching dimensions.
func.func @f(%x: tensor<2x3xf32>, %w: tensor<4x5xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected contracted dimensions to agree, got 3 and 4}}
  %0 = dgraph.matmul %x, %w : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return
}

// -----

// Tests that matmul batch dimensions broadcast: aligned from the right,
// 2 and 4 differ and neither is 1.
func.func @f(%x: tensor<2x2x3xf32>, %w: tensor<4x3x5xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected batch dimensions that broadcast (aligned from the right, equal or 1), got 2 and 4}}
  %0 = dgraph.matmul %x, %w : (tensor<2x2x3xf32>, tensor<4x3x5xf32>) -> tensor<2x2x5xf32>
  return
}

// -----

// Tests that batch dimensions of different ranks align from the right: the
// lhs's 4x3 against the rhs's 5 pairs 3 with 5.
func.func @f(%x: tensor<4x3x2x6xf32>, %w: tensor<5x6x7xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected batch dimensions that broadcast (aligned from the right, equal or 1), got 4x3 and 5}}
  %0 = dgraph.matmul %x, %w : (tensor<4x3x2x6xf32>, tensor<5x6x7xf32>) -> tensor<4x3x2x7xf32>
  return
}

// -----

// Tests that a 2-D x 3-D matmul's result has the rhs's batch dimension.
func.func @f(%x: tensor<3x4xf32>, %w: tensor<2x4x5xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{inferred type(s) 'tensor<2x3x5xf32>' are incompatible with return type(s) of operation 'tensor<3x5xf32>'}}
  %0 = dgraph.matmul %x, %w : (tensor<3x4xf32>, tensor<2x4x5xf32>) -> tensor<3x5xf32>
  return
}

// -----

// Tests that a size-1 batch dimension takes the other side's size.
func.func @f(%x: tensor<1x3x4xf32>, %w: tensor<2x4x5xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{inferred type(s) 'tensor<2x3x5xf32>' are incompatible with return type(s) of operation 'tensor<1x3x5xf32>'}}
  %0 = dgraph.matmul %x, %w : (tensor<1x3x4xf32>, tensor<2x4x5xf32>) -> tensor<1x3x5xf32>
  return
}

// -----

// Tests that the contracted dimensions of a 2-D x 3-D matmul agree.
func.func @f(%x: tensor<4x3xf32>, %w: tensor<2x5x3xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected contracted dimensions to agree, got 3 and 5}}
  %0 = dgraph.matmul %x, %w : (tensor<4x3xf32>, tensor<2x5x3xf32>) -> tensor<2x4x3xf32>
  return
}

// -----

// Tests that matmul operands share an element type.
func.func @f(%x: tensor<2x3xf32>, %w: tensor<3x5xf16>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected operands of one element type, got 'f32' and 'f16'}}
  %0 = "dgraph.matmul"(%x, %w) : (tensor<2x3xf32>, tensor<3x5xf16>) -> tensor<2x5xf32>
  return
}

// -----

// Tests that softmax's dim lies inside the operand.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{expected dim in [0, 2), got 3}}
  %0 = dgraph.softmax %x, dim = 3 : tensor<2x3xf32>
  return
}

// -----

// Tests that log_softmax's dim lies inside the operand.
func.func @f(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{expected dim in [0, 2), got 2}}
  %0 = dgraph.log_softmax %x, dim = 2 : tensor<2x3xf32>
  return
}

// -----

// Tests that layer_norm's scale has the normalized shape.
func.func @f(%x: tensor<2x8xf32>, %g: tensor<4xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected scale and bias of type 'tensor<8xf32>', got 'tensor<4xf32>'}}
  %0:3 = dgraph.layer_norm %x, %g axis = 1, epsilon = 1.0e-05 : (tensor<2x8xf32>, tensor<4xf32>) -> (tensor<2x8xf32>, tensor<2xf32>, tensor<2xf32>)
  return
}

// -----

// Tests that layer_norm's axis lies inside the operand.
func.func @f(%x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected axis in [0, 2), got 2}}
  %0:3 = dgraph.layer_norm %x, %g axis = 2, epsilon = 1.0e-05 : (tensor<2x8xf32>, tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2xf32>, tensor<2xf32>)
  return
}

// -----

// Tests that rms_norm's scale has the normalized shape and type.
func.func @f(%x: tensor<2x8xf32>, %g: tensor<8xf16>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected scale and bias of type 'tensor<8xf32>', got 'tensor<8xf16>'}}
  %0:2 = dgraph.rms_norm %x, %g axis = 1, epsilon = 1.0e-05 : (tensor<2x8xf32>, tensor<8xf16>) -> (tensor<2x8xf32>, tensor<2xf32>)
  return
}

// -----

// Tests that cross_entropy takes rank-2 logits.
func.func @f(%x: tensor<2x3x4xf32>, %t: tensor<2xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected logits of rank 2, got 3}}
  %0 = dgraph.cross_entropy %x, %t : (tensor<2x3x4xf32>, tensor<2xi64>) -> tensor<2xf32>
  return
}

// -----

// Tests that cross_entropy's labels have one entry per row.
func.func @f(%x: tensor<2x3xf32>, %t: tensor<3xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{expected labels of shape 2, got 3}}
  %0 = dgraph.cross_entropy %x, %t : (tensor<2x3xf32>, tensor<3xi64>) -> tensor<2xf32>
  return
}

// -----

// Tests that a dropout's offsets come with the global shape.
func.func @f(%x: tensor<2x8xf32>, %s: tensor<i64>, %o: tensor<2xi64>) {
  // expected-error @+1 {{expected offsets and global_shape together}}
  %y, %m = dgraph.dropout %x, %s, %o {ratio = 0.5 : f32, seed = 1} : (tensor<2x8xf32>, tensor<i64>, tensor<2xi64>) -> (tensor<2x8xf32>, tensor<2x8xi1>)
  return
}

// -----

// Tests that a dropout has one offset per dimension.
func.func @f(%x: tensor<2x8xf32>, %s: tensor<i64>, %o: tensor<3xi64>) {
  // expected-error @+1 {{expected 2 offsets and global dimensions (one per dimension of the operand), got 3 and 2}}
  %y, %m = dgraph.dropout %x, %s, %o {global_shape = array<i64: 4, 8>, ratio = 0.5 : f32, seed = 1} : (tensor<2x8xf32>, tensor<i64>, tensor<3xi64>) -> (tensor<2x8xf32>, tensor<2x8xi1>)
  return
}

// -----

// Tests that a dropout's block lies inside its global shape.
func.func @f(%x: tensor<2x8xf32>, %s: tensor<i64>, %o: tensor<2xi64>) {
  // expected-error @+1 {{expected global dimension 1 of at least 8, got 4}}
  %y, %m = dgraph.dropout %x, %s, %o {global_shape = array<i64: 4, 4>, ratio = 0.5 : f32, seed = 1} : (tensor<2x8xf32>, tensor<i64>, tensor<2xi64>) -> (tensor<2x8xf32>, tensor<2x8xi1>)
  return
}

// -----

// Tests that a random draw names its distribution.
func.func @f(%s: tensor<i64>) {
  // expected-error @+1 {{expected distribution "uniform" or "normal", got "gamma"}}
  %r = dgraph.random %s {distribution = "gamma", shift = 0.0, scale = 1.0, seed = 1} : (tensor<i64>) -> tensor<4xf32>
  return
}

// -----

// Tests that a random draw's shift and scale are finite.
func.func @f(%s: tensor<i64>) {
  // expected-error @+1 {{expected a finite shift and scale, got 0.000000e+00 and INF}}
  %r = dgraph.random %s {distribution = "uniform", shift = 0.0, scale = 0x7FF0000000000000 : f64, seed = 1} : (tensor<i64>) -> tensor<4xf32>
  return
}

// -----

// Tests that a random draw's result is a float tensor.
func.func @f(%s: tensor<i64>) {
  // expected-error @+1 {{result #0 must be statically shaped tensor of}}
  %r = dgraph.random %s {distribution = "uniform", shift = 0.0, scale = 1.0, seed = 1} : (tensor<i64>) -> tensor<4xi32>
  return
}

// -----

// Tests that a random draw's offsets come with the global shape.
func.func @f(%s: tensor<i64>, %o: tensor<2xi64>) {
  // expected-error @+1 {{expected offsets and global_shape together}}
  %r = dgraph.random %s, %o {distribution = "uniform", shift = 0.0, scale = 1.0, seed = 1} : (tensor<i64>, tensor<2xi64>) -> tensor<2x8xf32>
  return
}

// -----

// Tests that a random draw has one offset per dimension of its result.
func.func @f(%s: tensor<i64>, %o: tensor<3xi64>) {
  // expected-error @+1 {{expected 2 offsets and global dimensions (one per dimension of the result), got 3 and 2}}
  %r = dgraph.random %s, %o {distribution = "normal", global_shape = array<i64: 4, 8>, shift = 0.0, scale = 1.0, seed = 1} : (tensor<i64>, tensor<3xi64>) -> tensor<2x8xf32>
  return
}

// -----

// Tests that a random draw's block lies inside its global shape.
func.func @f(%s: tensor<i64>, %o: tensor<2xi64>) {
  // expected-error @+1 {{expected global dimension 0 of at least 2, got 1}}
  %r = dgraph.random %s, %o {distribution = "normal", global_shape = array<i64: 1, 8>, shift = 0.0, scale = 1.0, seed = 1} : (tensor<i64>, tensor<2xi64>) -> tensor<2x8xf32>
  return
}

// -----

// The dgraph.* attributes outside the dialect's ops are declared
// (dialects/Graph/IR/GraphOps.h) and checked where they stand.
// expected-error @+1 {{expected 'dgraph.name' of argument 0 to be a string, got 3 : i64}}
func.func @f(%x: tensor<4xf32> {dgraph.name = 3 : i64}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{expected 'dgraph.grad_of' of result 0 to name a variable (@symbol), got "w"}}
func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32> {dgraph.grad_of = "w"}) {
  return %x : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown dgraph attribute 'dgraph.nmae'}}
  %y = dgraph.neg %x {dgraph.nmae = "y"} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{expected 'dgraph.model' to be a string on the module, got 1 : i64}}
module attributes {dgraph.model = 1 : i64} {
}

// -----

// Tests that adamw takes a narrower gradient only of an f32 parameter.
func.func @f(%p: tensor<4xf64>, %g: tensor<4xf32>, %lr: tensor<f32>, %s: tensor<i64>) {
  // expected-error @+1 {{expected a gradient of element type 'f64', got 'f32'}}
  %a:3 = dgraph.adamw %p, %g, %p, %p, %lr, %s, %lr {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.0} : tensor<4xf64>, tensor<4xf32>
  return
}

// -----

func.func @f(%p: tensor<4xf32>, %g: tensor<4xf64>, %lr: tensor<f32>, %s: tensor<i64>) {
  // expected-error @+1 {{expected a gradient of element type 'f32' (or bf16, f16), got 'f64'}}
  %a:3 = dgraph.adamw %p, %g, %p, %p, %lr, %s, %lr {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.0} : tensor<4xf32>, tensor<4xf64>
  return
}

// -----

// Tests sum_squares' dims, result shape and result type.
func.func @f(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{expected distinct dims in [0, 2), got 2}}
  %s = dgraph.sum_squares %x, dims = [2] : (tensor<4x8xbf16>) -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{expected a result of the operand's shape without dims, got 'tensor<8xf32>'}}
  %s = dgraph.sum_squares %x, dims = [1] : (tensor<4x8xbf16>) -> tensor<8xf32>
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{expected a result of element type 'f32', got 'f64'}}
  %s = dgraph.sum_squares %x, dims = [0, 1] : (tensor<4x8xf32>) -> tensor<f64>
  return
}

// -----

// Tests global_sum_squares' operands and result: some operands, f64 ones
// all or none, a scalar of their accumulation type.
func.func @f() {
  // expected-error @+1 {{expected at least one operand}}
  %s = dgraph.global_sum_squares : () -> tensor<f32>
  return
}

// -----

func.func @f(%a: tensor<4xf64>, %b: tensor<4xf32>) {
  // expected-error @+1 {{expected f64 operands only or none}}
  %s = dgraph.global_sum_squares %a, %b : (tensor<4xf64>, tensor<4xf32>) -> tensor<f64>
  return
}

// -----

func.func @f(%a: tensor<4xbf16>) {
  // expected-error @+1 {{expected a result of type tensor<f32>, got 'tensor<bf16>'}}
  %s = dgraph.global_sum_squares %a : (tensor<4xbf16>) -> tensor<bf16>
  return
}

// -----

func.func @f(%a: tensor<4xf64>) {
  // expected-error @+1 {{expected a result of type tensor<f64>, got 'tensor<1xf64>'}}
  %s = dgraph.global_sum_squares %a : (tensor<4xf64>) -> tensor<1xf64>
  return
}

// -----

// Tests that only half logits widen: an f32 loss of bf16 logits is the
// loss of their cast, an f64 loss of f32 logits is refused.
func.func @f(%x: tensor<2x3xf32>, %t: tensor<2xi64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{inferred type(s) 'tensor<2xf32>' are incompatible with return type(s) of operation 'tensor<2xf64>'}}
  %0 = dgraph.cross_entropy %x, %t : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<2xf64>
  return
}

// -----

// Tests that cross_entropy_grad's dloss is of the logits' type, or f32 for
// half logits only.
func.func @f(%x: tensor<2x3xf32>, %t: tensor<2xi64>, %d: tensor<2xf64>) {
  // expected-error @+1 {{expected labels and dloss of shape [2], dloss of the logits' element type (or f32 for half logits)}}
  %0 = dgraph.cross_entropy_grad %x, %t, %d : (tensor<2x3xf32>, tensor<2xi64>, tensor<2xf64>) -> tensor<2x3xf32>
  return
}

// -----

// Tests that matmul_bias_grad multiplies matrices.
func.func @f(%x: tensor<2x4x8xf32>, %dy: tensor<4x6xf32>) {
  // expected-error @+1 {{expected matrices, got 'tensor<2x4x8xf32>' and 'tensor<4x6xf32>'}}
  %0:2 = dgraph.matmul_bias_grad %x, %dy {transpose_lhs} summed = 1
      : (tensor<2x4x8xf32>, tensor<4x6xf32>) -> (tensor<8x6xf32>, tensor<6xf32>)
  return
}

// -----

// Tests that matmul_bias_grad's sums have the rhs's column count.
func.func @f(%x: tensor<4x8xf32>, %dy: tensor<4x6xf32>) {
  // expected-error @+1 {{expected a product of shape [8, 6] and sums of shape [6], got 'tensor<8x6xf32>' and 'tensor<4xf32>'}}
  %0:2 = dgraph.matmul_bias_grad %x, %dy {transpose_lhs} summed = 1
      : (tensor<4x8xf32>, tensor<4x6xf32>) -> (tensor<8x6xf32>, tensor<4xf32>)
  return
}

// -----

// Tests that matmul_bias_grad contracts the rhs's rows.
func.func @f(%x: tensor<4x8xf32>, %dy: tensor<4x6xf32>) {
  // expected-error @+1 {{expected contracted dimensions to agree, got 8 and 4}}
  %0:2 = dgraph.matmul_bias_grad %x, %dy summed = 1
      : (tensor<4x8xf32>, tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<6xf32>)
  return
}

// -----

// Tests that matmul_bias_grad's operands and results share their type.
func.func @f(%x: tensor<4x8xbf16>, %dy: tensor<4x6xbf16>) {
  // expected-error @+1 {{expected operands and results of one element type}}
  %0:2 = dgraph.matmul_bias_grad %x, %dy {transpose_lhs} summed = 1
      : (tensor<4x8xbf16>, tensor<4x6xbf16>) -> (tensor<8x6xbf16>, tensor<6xf32>)
  return
}

// -----

// Tests that matmul_bias_grad sums an operand whose rows it contracts.
func.func @f(%dy: tensor<4x8xf32>, %x: tensor<8x6xf32>) {
  // expected-error @+1 {{expected the summed lhs transposed (its rows contracted)}}
  %0:2 = dgraph.matmul_bias_grad %dy, %x summed = 0
      : (tensor<4x8xf32>, tensor<8x6xf32>) -> (tensor<4x6xf32>, tensor<4xf32>)
  return
}

// -----

// Tests that matmul_bias's bias runs along the product's last dimension.
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x6xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{expected a bias of type 'tensor<6xf32>', got 'tensor<4xf32>'}}
  %0 = dgraph.matmul_bias %x, %w, %b
      : (tensor<4x8xf32>, tensor<8x6xf32>, tensor<4xf32>) -> tensor<4x6xf32>
  return
}

// -----

// Tests that matmul_bias's result is the product's.
func.func @f(%x: tensor<4x8xf32>, %w: tensor<6x8xf32>, %b: tensor<6xf32>) {
  // expected-error @+1 {{expected the product's type 'tensor<4x6xf32>', got 'tensor<4x8xf32>'}}
  %0 = dgraph.matmul_bias %x, %w, %b {transpose_rhs}
      : (tensor<4x8xf32>, tensor<6x8xf32>, tensor<6xf32>) -> tensor<4x8xf32>
  return
}
