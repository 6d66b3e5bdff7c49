// RUN: dtcc-opt %s -split-input-file -dtcc-lower-to-exec | FileCheck %s

// Tests that an elementwise chain runs in place in the input's buffer.
// CHECK-LABEL: func.func @in_place()
// CHECK-SAME: dexec.workspace_bytes = 64
// CHECK: %[[B:.*]] = dexec.buffer "workspace"[0] {live = array<i64: 0, 1>} : memref<4xf32>
// CHECK-NEXT: dexec.input "x", %[[B]]
// CHECK-NEXT: dexec.kernel "exp" ins(%[[B]] : memref<4xf32>) outs(%[[B]] : memref<4xf32>)
// CHECK-NEXT: dexec.kernel "neg" ins(%[[B]] : memref<4xf32>) outs(%[[B]] : memref<4xf32>)
// CHECK-NEXT: dexec.output "y", %[[B]]
func.func @in_place(%x: tensor<4xf32> {dgraph.name = "x"}) -> (tensor<4xf32> {dgraph.name = "y"}) {
  %0 = dgraph.exp %x : tensor<4xf32>
  %1 = dgraph.neg %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// Tests that a value used later is not overwritten, and that a dead buffer's
// bytes are reused; each buffer's `live` is its memory's lifetime in kernels
// (E's bytes are S's from the third).
// CHECK-LABEL: func.func @reuse()
// CHECK-SAME: dexec.workspace_bytes = 8192
// CHECK-DAG: %[[X:.*]] = dexec.buffer "workspace"[0] {live = array<i64: 0, 3>} : memref<1024xf32>
// CHECK-DAG: %[[E:.*]] = dexec.buffer "workspace"[4096] {live = array<i64: 0, 1>} : memref<1024xf32>
// CHECK-DAG: %[[S:.*]] = dexec.buffer "workspace"[4096] {live = array<i64: 2, 3>} : memref<1024xf32>
// CHECK: dexec.kernel "exp" ins(%[[X]] : {{.*}}) outs(%[[E]] : {{.*}})
// CHECK: dexec.kernel "add" ins(%[[X]], %[[E]] : {{.*}}) outs(%[[X]] : {{.*}})
// CHECK: dexec.kernel "tanh" ins(%[[X]] : {{.*}}) outs(%[[S]] : {{.*}})
// CHECK: dexec.kernel "mul" ins(%[[S]], %[[X]] : {{.*}}) outs(%[[S]] : {{.*}})
func.func @reuse(%x: tensor<1024xf32> {dgraph.name = "x"}) -> (tensor<1024xf32> {dgraph.name = "y"}) {
  %e = dgraph.exp %x : tensor<1024xf32>
  %a = dgraph.add %x, %e : tensor<1024xf32>
  %t = dgraph.tanh %a : tensor<1024xf32>
  %m = dgraph.mul %t, %a : tensor<1024xf32>
  return %m : tensor<1024xf32>
}

// -----

// Tests that a broadcast feeding only elementwise ops is a stride-0 view of
// the variable, and a reshape a view of its operand (living as long).
// CHECK: module attributes {dexec.constant_bytes = 0 : i64, dexec.state_bytes = 64 : i64, dexec.workspace_bytes = 64 : i64}
// CHECK: dgraph.variable @b : tensor<3xf32> {dexec.offset = 0 : i64}
// CHECK-LABEL: func.func @views()
// CHECK-DAG: %[[BV:.*]] = dexec.buffer "state"[0] {variable = @b} : memref<2x3xf32, strided<[0, 1]>>
// CHECK-DAG: %[[X:.*]] = dexec.buffer "workspace"[0] {live = array<i64: 0, 0>} : memref<2x3xf32>
// CHECK-DAG: %[[R:.*]] = dexec.buffer "workspace"[0] {live = array<i64: 0, 0>} : memref<6xf32>
// CHECK-NOT: broadcast_in_dim
// CHECK: dexec.kernel "add" ins(%[[X]], %[[BV]] : memref<2x3xf32>, memref<2x3xf32, strided<[0, 1]>>) outs(%[[X]] : memref<2x3xf32>)
// CHECK: dexec.output "y", %[[R]] : memref<6xf32>
dgraph.variable @b : tensor<3xf32>
func.func @views(%x: tensor<2x3xf32> {dgraph.name = "x"}) -> (tensor<6xf32> {dgraph.name = "y"}) {
  %b = dgraph.load @b : tensor<3xf32>
  %bb = dgraph.broadcast_in_dim %b, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  %s = dgraph.add %x, %bb : tensor<2x3xf32>
  %r = dgraph.reshape %s : (tensor<2x3xf32>) -> tensor<6xf32>
  return %r : tensor<6xf32>
}

// -----

// Tests that a broadcast of a constant feeding only elementwise ops is a
// stride-0 view of the constant's own elements.
// CHECK-LABEL: func.func @constant_view()
// CHECK-DAG: %[[CV:.*]] = dexec.buffer "constant"[0] {value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>} : memref<3x2xf32, strided<[0, 1]>>
// CHECK-DAG: %[[X:.*]] = dexec.buffer "workspace"[0] {live = array<i64: 0, 0>} : memref<3x2xf32>
// CHECK: dexec.kernel "add" ins(%[[X]], %[[CV]] : memref<3x2xf32>, memref<3x2xf32, strided<[0, 1]>>) outs(%[[X]] : memref<3x2xf32>)
func.func @constant_view(%x: tensor<3x2xf32> {dgraph.name = "x"}) -> (tensor<3x2xf32> {dgraph.name = "y"}) {
  %c = dgraph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %b = dgraph.broadcast_in_dim %c, dims = [1] : (tensor<2xf32>) -> tensor<3x2xf32>
  %y = dgraph.add %x, %b : tensor<3x2xf32>
  return %y : tensor<3x2xf32>
}

// -----

// Tests that a reshape of a constant is a view of the constant's elements.
// CHECK-LABEL: func.func @constant_reshape()
// CHECK-DAG: %[[CV:.*]] = dexec.buffer "constant"[0] {value = dense<[1, 0, 1]> : tensor<3xi64>} : memref<3x1xi64>
// CHECK: dexec.kernel "gather" ins(%{{.*}}, %[[CV]] : memref<4x2xf32>, memref<3x1xi64>)
func.func @constant_reshape(%x: tensor<4x2xf32> {dgraph.name = "x"}) -> (tensor<3x1x2xf32> {dgraph.name = "y"}) {
  %c = dgraph.constant dense<[1, 0, 1]> : tensor<3xi64>
  %r = dgraph.reshape %c : (tensor<3xi64>) -> tensor<3x1xi64>
  %y = dgraph.gather %x, %r axis = 0 : (tensor<4x2xf32>, tensor<3x1xi64>) -> tensor<3x1x2xf32>
  return %y : tensor<3x1x2xf32>
}

// -----

// Tests that a broadcast feeding a non-elementwise op is materialized.
// CHECK-LABEL: func.func @materialized()
// CHECK: dexec.kernel "broadcast_in_dim"
// CHECK-SAME: attrs {dims = array<i64: 1>}
// CHECK: dexec.kernel "matmul"
func.func @materialized(%x: tensor<3xf32> {dgraph.name = "x"}) -> (tensor<3x3xf32> {dgraph.name = "y"}) {
  %bb = dgraph.broadcast_in_dim %x, dims = [1] : (tensor<3xf32>) -> tensor<3x3xf32>
  %m = dgraph.matmul %bb, %bb : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  return %m : tensor<3x3xf32>
}

// -----

// Tests that constants get the constant arena and that outputs held by a
// constant or returned twice are copied into buffers of their own.
// CHECK-LABEL: func.func @outputs()
// CHECK-DAG: %[[C:.*]] = dexec.buffer "constant"[0] {value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>} : memref<2xf32>
// CHECK: dexec.kernel "copy" ins(%[[C]] : memref<2xf32>) outs(%[[O1:.*]] : memref<2xf32>)
// CHECK: dexec.kernel "copy" ins(%[[C]] : memref<2xf32>) outs(%[[O2:.*]] : memref<2xf32>)
// CHECK: dexec.output "a", %[[O1]]
// CHECK: dexec.output "b", %[[O2]]
func.func @outputs() -> (tensor<2xf32> {dgraph.name = "a"}, tensor<2xf32> {dgraph.name = "b"}) {
  %c = dgraph.constant dense<[1.0, 2.0]> : tensor<2xf32>
  return %c, %c : tensor<2xf32>, tensor<2xf32>
}

// -----

// Tests that a store copies into the variable's buffer, and that a value
// loaded before the store but used after it keeps the old value.
// CHECK-LABEL: func.func @store()
// CHECK: %[[V:.*]] = dexec.buffer "state"[0] {variable = @v} : memref<4xf32>
// CHECK: dexec.kernel "copy" ins(%[[V]] : memref<4xf32>) outs(%[[OLD:.*]] : memref<4xf32>)
// CHECK: dexec.kernel "exp" ins(%[[OLD]] : {{.*}}) outs(%[[NEW:.*]] : memref<4xf32>)
// CHECK: dexec.kernel "copy" ins(%[[NEW]] : memref<4xf32>) outs(%[[V]] : memref<4xf32>)
// CHECK: dexec.kernel "add" ins(%[[OLD]], %[[NEW]]
dgraph.variable @v : tensor<4xf32>
func.func @store() -> (tensor<4xf32> {dgraph.name = "y"}) {
  %old = dgraph.load @v : tensor<4xf32>
  %new = dgraph.exp %old : tensor<4xf32>
  dgraph.store %new, @v : tensor<4xf32>
  %sum = dgraph.add %old, %new : tensor<4xf32>
  return %sum : tensor<4xf32>
}

// -----

// Tests that a splat constant read by elementwise ops stores one element.
// CHECK: module attributes {dexec.constant_bytes = 64 : i64
// CHECK-LABEL: func.func @splat()
// CHECK: dexec.buffer "constant"[0] {value = dense<5.000000e-01> : tensor<f32>} : memref<2x3xf32, strided<[0, 0]>>
// CHECK: dexec.kernel "mul"
func.func @splat(%x: tensor<2x3xf32> {dgraph.name = "x"}) -> (tensor<2x3xf32> {dgraph.name = "y"}) {
  %c = dgraph.constant dense<0.5> : tensor<2x3xf32>
  %y = dgraph.mul %x, %c : tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// Tests that a broadcast of a constant that is not a splat (a bound label
// tensor, as the importer leaves it) is a stride-0 view of the constant's
// own elements.
// CHECK-LABEL: func.func @broadcast_constant()
// CHECK: %[[C:.*]] = dexec.buffer "constant"[0] {value = dense<[1, 2, 3]> : tensor<3xi64>} : memref<2x3xi64, strided<[0, 1]>>
// CHECK: dexec.kernel "add" ins(%{{.*}}, %[[C]] : memref<2x3xi64>, memref<2x3xi64, strided<[0, 1]>>)
func.func @broadcast_constant(%x: tensor<2x3xi64> {dgraph.name = "x"}) -> (tensor<2x3xi64> {dgraph.name = "y"}) {
  %c = dgraph.constant dense<[1, 2, 3]> : tensor<3xi64>
  %b = dgraph.broadcast_in_dim %c, dims = [1] : (tensor<3xi64>) -> tensor<2x3xi64>
  %y = dgraph.add %x, %b : tensor<2x3xi64>
  return %y : tensor<2x3xi64>
}

// -----

// Tests that an optimizer update is written in place into its variables:
// no copies, and the step counter increments in place.
// CHECK-LABEL: func.func @update()
// CHECK-DAG: %[[P:.*]] = dexec.buffer "state"[0] {variable = @p} : memref<4xf32>
// CHECK-DAG: %[[M:.*]] = dexec.buffer "state"[64] {variable = @m} : memref<4xf32>
// CHECK-DAG: %[[V:.*]] = dexec.buffer "state"[128] {variable = @v} : memref<4xf32>
// CHECK-DAG: %[[S:.*]] = dexec.buffer "state"[192] {variable = @s} : memref<i64>
// CHECK: dexec.kernel "add" ins(%[[S]], %{{.*}} : memref<i64>, memref<i64>) outs(%[[S]] : memref<i64>)
// CHECK: dexec.kernel "adamw" ins(%[[P]], %{{.*}}, %[[M]], %[[V]], {{.*}}) outs(%[[P]], %[[M]], %[[V]] : memref<4xf32>, memref<4xf32>, memref<4xf32>)
// CHECK-NOT: "copy"
dgraph.variable @p : tensor<4xf32>
dgraph.variable @m : tensor<4xf32>
dgraph.variable @v : tensor<4xf32>
dgraph.variable @s : tensor<i64>
func.func @update(%g: tensor<4xf32> {dgraph.name = "g"}) {
  %p = dgraph.load @p : tensor<4xf32>
  %m = dgraph.load @m : tensor<4xf32>
  %v = dgraph.load @v : tensor<4xf32>
  %s = dgraph.load @s : tensor<i64>
  %one = dgraph.constant dense<1> : tensor<i64>
  %s1 = dgraph.add %s, %one : tensor<i64>
  dgraph.store %s1, @s : tensor<i64>
  %lr = dgraph.constant dense<0.1> : tensor<f32>
  %scale = dgraph.constant dense<1.0> : tensor<f32>
  %p1, %m1, %v1 = dgraph.adamw %p, %g, %m, %v, %lr, %s1, %scale {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.0} : tensor<4xf32>
  dgraph.store %p1, @p : tensor<4xf32>
  dgraph.store %m1, @m : tensor<4xf32>
  dgraph.store %v1, @v : tensor<4xf32>
  return
}

// -----

// Tests that a view's memory lives from its first write to its last read
// through any view: x's bytes, written in place by the exp (kernel 0) and
// read as the reshape %r by the add (kernel 3), are live over kernels 0 to
// 3 in both buffers that view them, though the kernels between name neither.
// CHECK-LABEL: func.func @view_lifetime()
// CHECK-DAG: %[[X:.*]] = dexec.buffer "workspace"[0] {live = array<i64: 0, 3>} : memref<2x3xf32>
// CHECK-DAG: %[[R:.*]] = dexec.buffer "workspace"[0] {live = array<i64: 0, 3>} : memref<6xf32>
// CHECK: dexec.kernel "exp" ins(%[[X]] : {{.*}}) outs(%[[X]] : {{.*}})
// CHECK: dexec.kernel "add" ins(%[[R]], %{{.*}}) outs(%[[R]] : {{.*}})
func.func @view_lifetime(%x: tensor<2x3xf32> {dgraph.name = "x"}, %y: tensor<6xf32> {dgraph.name = "y"}) -> (tensor<6xf32> {dgraph.name = "z"}) {
  %e = dgraph.exp %x : tensor<2x3xf32>
  %n = dgraph.neg %y : tensor<6xf32>
  %t = dgraph.tanh %n : tensor<6xf32>
  %r = dgraph.reshape %e : (tensor<2x3xf32>) -> tensor<6xf32>
  %z = dgraph.add %r, %t : tensor<6xf32>
  return %z : tensor<6xf32>
}

// -----

// Tests that a scatter writes into its data where the data dies at it (the
// vocabulary-parallel cross-entropy gradient's -dloss at the label), and
// copies it where the data is read later.
// CHECK-LABEL: func.func @scatter_in_place()
// CHECK: dexec.kernel "exp" ins(%[[X:.*]] : memref<2x4xf32>) outs(%[[E:.*]] : memref<2x4xf32>)
// CHECK-NEXT: dexec.kernel "scatter_elements" ins(%[[E]], %{{.*}}, %{{.*}} : memref<2x4xf32>, memref<2x1xi64>, memref<2x1xf32>) outs(%[[E]] : memref<2x4xf32>)
// CHECK-NEXT: dexec.kernel "scatter_elements" ins(%[[E]], %{{.*}}, %{{.*}} : memref<2x4xf32>, memref<2x1xi64>, memref<2x1xf32>) outs(%[[C:.*]] : memref<2x4xf32>)
// CHECK-NOT: outs(%[[E]]
// CHECK: dexec.kernel "add" ins(%[[E]], %[[C]]
func.func @scatter_in_place(%x: tensor<2x4xf32> {dgraph.name = "x"}, %i: tensor<2x1xi64> {dgraph.name = "i"}, %u: tensor<2x1xf32> {dgraph.name = "u"}) -> (tensor<2x4xf32> {dgraph.name = "y"}) {
  %e = dgraph.exp %x : tensor<2x4xf32>
  %s = dgraph.scatter_elements %e, %i, %u axis = 1 {reduction = "add"} : (tensor<2x4xf32>, tensor<2x1xi64>, tensor<2x1xf32>) -> tensor<2x4xf32>
  %c = dgraph.scatter_elements %s, %i, %u axis = 1 : (tensor<2x4xf32>, tensor<2x1xi64>, tensor<2x1xf32>) -> tensor<2x4xf32>
  %y = dgraph.add %s, %c : tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
