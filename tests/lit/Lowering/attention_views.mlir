// RUN: dtcc-opt %s -split-input-file -dtcc-lower-to-exec | FileCheck %s

// Tests that attention reads its heads as views: the slices of a packed
// Q/K/V projection, their reshapes to heads and the heads' transposes are
// strided buffers of the projection (no slice or transpose kernel); that
// attention writes its output where the transpose back to [B, S, H, D]
// would have copied it, and attention_grad writes the heads' gradients into
// the slots of the concat they end in (no concat kernel). Every view of one
// memory carries that memory's lifetime (`live`).
// CHECK-LABEL: func.func @heads()
// CHECK-DAG: %[[QKV:.*]] = dexec.buffer "workspace"[0] {live = [[QKVLIVE:array<i64: [0-9]+, [0-9]+>]]} : memref<2x8x48xf32>
// CHECK-DAG: %[[Q:.*]] = dexec.buffer "workspace"[0] {live = [[QKVLIVE]]} : memref<2x4x8x4xf32, strided<[384, 4, 48, 1]>>
// CHECK-DAG: %[[K:.*]] = dexec.buffer "workspace"[64] {live = [[QKVLIVE]]} : memref<2x4x8x4xf32, strided<[384, 4, 48, 1]>>
// CHECK-DAG: %[[V:.*]] = dexec.buffer "workspace"[128] {live = [[QKVLIVE]]} : memref<2x4x8x4xf32, strided<[384, 4, 48, 1]>>
// CHECK-DAG: %[[O:.*]] = dexec.buffer "workspace"[[[OFF:[0-9]+]]] {live = [[OLIVE:array<i64: [0-9]+, [0-9]+>]]} : memref<2x4x8x4xf32, strided<[128, 4, 16, 1]>>
// CHECK-DAG: %[[Y:.*]] = dexec.buffer "workspace"[[[OFF]]] {live = [[OLIVE]]} : memref<2x8x16xf32>
// CHECK-DAG: %[[DQ:.*]] = dexec.buffer "workspace"[[[G:[0-9]+]]] {live = [[GLIVE:array<i64: [0-9]+, [0-9]+>]]} : memref<2x4x8x4xf32, strided<[384, 4, 48, 1]>>
// CHECK-DAG: %[[DQKV:.*]] = dexec.buffer "workspace"[[[G]]] {live = [[GLIVE]]} : memref<2x8x48xf32>
// CHECK-NOT: dexec.kernel "slice"
// CHECK-NOT: dexec.kernel "transpose"
// CHECK: dexec.kernel "attention" ins(%[[Q]], %[[K]], %[[V]] : {{.*}}) outs(%[[O]], %{{.*}} : {{.*}})
// CHECK-NEXT: dexec.kernel "attention_grad" ins(%[[Q]], %[[K]], %[[V]], %[[O]], %{{.*}}, %{{.*}} : {{.*}}) outs(%[[DQ]], %{{.*}}, %{{.*}} : {{.*}})
// CHECK-NEXT: dexec.output "y", %[[Y]]
// CHECK-NEXT: dexec.output "dqkv", %[[DQKV]]
func.func @heads(%qkv: tensor<2x8x48xf32> {dgraph.name = "qkv"}, %dy: tensor<2x8x16xf32> {dgraph.name = "dy"}) -> (tensor<2x8x16xf32> {dgraph.name = "y"}, tensor<2x8x48xf32> {dgraph.name = "dqkv"}) {
  %qs = dgraph.slice %qkv, start = [0, 0, 0], limit = [2, 8, 16], stride = [1, 1, 1] : (tensor<2x8x48xf32>) -> tensor<2x8x16xf32>
  %ks = dgraph.slice %qkv, start = [0, 0, 16], limit = [2, 8, 32], stride = [1, 1, 1] : (tensor<2x8x48xf32>) -> tensor<2x8x16xf32>
  %vs = dgraph.slice %qkv, start = [0, 0, 32], limit = [2, 8, 48], stride = [1, 1, 1] : (tensor<2x8x48xf32>) -> tensor<2x8x16xf32>
  %qr = dgraph.reshape %qs : (tensor<2x8x16xf32>) -> tensor<2x8x4x4xf32>
  %kr = dgraph.reshape %ks : (tensor<2x8x16xf32>) -> tensor<2x8x4x4xf32>
  %vr = dgraph.reshape %vs : (tensor<2x8x16xf32>) -> tensor<2x8x4x4xf32>
  %q = dgraph.transpose %qr, perm = [0, 2, 1, 3] : (tensor<2x8x4x4xf32>) -> tensor<2x4x8x4xf32>
  %k = dgraph.transpose %kr, perm = [0, 2, 1, 3] : (tensor<2x8x4x4xf32>) -> tensor<2x4x8x4xf32>
  %v = dgraph.transpose %vr, perm = [0, 2, 1, 3] : (tensor<2x8x4x4xf32>) -> tensor<2x4x8x4xf32>
  %o, %lse = dgraph.attention %q, %k, %v {causal, scale = 0.5 : f64} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>) -> (tensor<2x4x8x4xf32>, tensor<2x4x8xf32>)
  %ot = dgraph.transpose %o, perm = [0, 2, 1, 3] : (tensor<2x4x8x4xf32>) -> tensor<2x8x4x4xf32>
  %y = dgraph.reshape %ot : (tensor<2x8x4x4xf32>) -> tensor<2x8x16xf32>
  %dyr = dgraph.reshape %dy : (tensor<2x8x16xf32>) -> tensor<2x8x4x4xf32>
  %do = dgraph.transpose %dyr, perm = [0, 2, 1, 3] : (tensor<2x8x4x4xf32>) -> tensor<2x4x8x4xf32>
  %dq, %dk, %dv = dgraph.attention_grad %q, %k, %v, %o, %lse, %do {causal, scale = 0.5 : f64} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8xf32>, tensor<2x4x8x4xf32>) -> (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>)
  %dqt = dgraph.transpose %dq, perm = [0, 2, 1, 3] : (tensor<2x4x8x4xf32>) -> tensor<2x8x4x4xf32>
  %dkt = dgraph.transpose %dk, perm = [0, 2, 1, 3] : (tensor<2x4x8x4xf32>) -> tensor<2x8x4x4xf32>
  %dvt = dgraph.transpose %dv, perm = [0, 2, 1, 3] : (tensor<2x4x8x4xf32>) -> tensor<2x8x4x4xf32>
  %dqr = dgraph.reshape %dqt : (tensor<2x8x4x4xf32>) -> tensor<2x8x16xf32>
  %dkr = dgraph.reshape %dkt : (tensor<2x8x4x4xf32>) -> tensor<2x8x16xf32>
  %dvr = dgraph.reshape %dvt : (tensor<2x8x4x4xf32>) -> tensor<2x8x16xf32>
  %dqkv = dgraph.concat %dqr, %dkr, %dvr dim = 2 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x48xf32>
  return %y, %dqkv : tensor<2x8x16xf32>, tensor<2x8x48xf32>
}

// -----

// Tests that views are only made for readers that take them: a transpose a
// matmul also reads stays a copy (which attention then reads), and a key
// transposed along its last dimension (rows no longer adjacent) is copied.
// CHECK-LABEL: func.func @copies()
// CHECK: dexec.kernel "transpose" {{.*}}perm = array<i64: 0, 2, 1, 3>
// CHECK: dexec.kernel "transpose" {{.*}}perm = array<i64: 0, 1, 3, 2>
// CHECK: dexec.kernel "attention" ins({{.*}} : memref<1x2x4x4xf32>, memref<1x2x4x4xf32>, memref<1x2x4x4xf32>)
func.func @copies(%x: tensor<1x4x2x4xf32> {dgraph.name = "x"}, %w: tensor<4x4xf32> {dgraph.name = "w"}) -> (tensor<1x2x4x4xf32> {dgraph.name = "y"}, tensor<1x2x4x4xf32> {dgraph.name = "z"}) {
  %q = dgraph.transpose %x, perm = [0, 2, 1, 3] : (tensor<1x4x2x4xf32>) -> tensor<1x2x4x4xf32>
  %z = dgraph.matmul %q, %w : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %kt = dgraph.transpose %z, perm = [0, 1, 3, 2] : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o, %lse = dgraph.attention %q, %kt, %z {scale = 0.5 : f64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4xf32>)
  return %o, %z : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}

// -----

// Gradients of heads unbound along a dimension of size 1 (PyTorch's
// kv.permute(2, 0, 3, 1, 4).unbind(0), timm's PVT v2): attention_grad writes
// them into the concat's slots through a reshape and a transpose that move a
// dimension of size 1, whose stride addresses nothing. The transpose's view
// of its operand is the slot planned for it, so no transpose, copy or concat
// runs; before, the two differed in that stride alone, and the transpose ran
// as a kernel writing a strided buffer, which the runtime refused at load
// ("expected output 0 to be contiguous").
// CHECK-LABEL: func.func @unbind()
// CHECK-NOT: dexec.kernel "transpose"
// CHECK-NOT: dexec.kernel "copy"
// CHECK-NOT: dexec.kernel "concat"
// CHECK: dexec.kernel "attention_grad" {{.*}} outs(%{{.*}}, %{{.*}}, %{{.*}} : memref<2x4x8x4xf32>, memref<2x4x8x4xf32, strided<[256, 64, 4, 1]>>, memref<2x4x8x4xf32, strided<[256, 64, 4, 1]>>)
// CHECK-NOT: dexec.kernel
// CHECK: dexec.output "dkv"
func.func @unbind(%q: tensor<2x4x8x4xf32> {dgraph.name = "q"}, %k: tensor<2x4x8x4xf32> {dgraph.name = "k"}, %v: tensor<2x4x8x4xf32> {dgraph.name = "v"}, %do: tensor<2x4x8x4xf32> {dgraph.name = "do"}) -> (tensor<2x4x2x8x4xf32> {dgraph.name = "dkv"}) {
  %o, %lse = dgraph.attention %q, %k, %v {causal, scale = 0.5 : f64} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>) -> (tensor<2x4x8x4xf32>, tensor<2x4x8xf32>)
  %dq, %dk, %dv = dgraph.attention_grad %q, %k, %v, %o, %lse, %do {causal, scale = 0.5 : f64} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8xf32>, tensor<2x4x8x4xf32>) -> (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>)
  %dkr = dgraph.reshape %dk : (tensor<2x4x8x4xf32>) -> tensor<2x1x4x8x4xf32>
  %dvr = dgraph.reshape %dv : (tensor<2x4x8x4xf32>) -> tensor<2x1x4x8x4xf32>
  %dkt = dgraph.transpose %dkr, perm = [0, 2, 1, 3, 4] : (tensor<2x1x4x8x4xf32>) -> tensor<2x4x1x8x4xf32>
  %dvt = dgraph.transpose %dvr, perm = [0, 2, 1, 3, 4] : (tensor<2x1x4x8x4xf32>) -> tensor<2x4x1x8x4xf32>
  %dkv = dgraph.concat %dkt, %dvt dim = 2 : (tensor<2x4x1x8x4xf32>, tensor<2x4x1x8x4xf32>) -> tensor<2x4x2x8x4xf32>
  return %dkv : tensor<2x4x2x8x4xf32>
}
