// RUN: dtcc-opt %s -split-input-file -dtcc-shard-bucket | FileCheck %s

// dtcc-shard-bucket on one rank's program (as dtcc-shard-overlap leaves
// it): the data-parallel collectives of one layer become one.

// Tests that a layer's gradient reduce-scatters over 8 ranks are sent as
// one, where the last was sent, each gradient as [ranks, elements / ranks]
// joined along dimension 1, waited for where the first was, and sliced
// back; another layer's gradient and a split along dimension 1 stay as
// they were.
// CHECK-LABEL: func.func @gradients
// CHECK: %[[B:.*]] = dgraph.mul %{{.*}} {dgraph.layer = #dgraph.layer<index = 0>} : tensor<8xf32>
// CHECK-NEXT: %[[RA:.*]] = dgraph.reshape %[[A:.*]] : (tensor<16x2xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: %[[RB:.*]] = dgraph.reshape %[[B]] : (tensor<8xf32>) -> tensor<8x1xf32>
// CHECK-NEXT: %[[J:.*]] = dgraph.concat %[[RA]], %[[RB]] dim = 1 : (tensor<8x4xf32>, tensor<8x1xf32>) -> tensor<8x5xf32>
// CHECK-NEXT: %[[S:.*]] = dshard.reduce_scatter %[[J]] "dp" dim = 0 {async = 1 : i64, handle = 0 : i64, phase = "backward"} : (tensor<8x5xf32>) -> tensor<1x5xf32>
// CHECK: dshard.reduce_scatter %{{.*}} "dp" dim = 0 {async = 1 : i64, handle = 2 : i64, phase = "backward"} : (tensor<16x2xf32>) -> tensor<2x2xf32>
// CHECK: dshard.reduce_scatter %{{.*}} "dp" dim = 1 {async = 1 : i64, handle = 3 : i64, phase = "backward"}
// CHECK-NEXT: dgraph.mul
// CHECK-NEXT: dshard.wait 0, %[[J]], %[[S]] : tensor<8x5xf32>, tensor<1x5xf32>
// CHECK-NEXT: %[[PA:.*]] = dgraph.slice %[[S]], start = [0, 0], limit = [1, 4], stride = [1, 1] : (tensor<1x5xf32>) -> tensor<1x4xf32>
// CHECK-NEXT: %[[GA:.*]] = dgraph.reshape %[[PA]] : (tensor<1x4xf32>) -> tensor<2x2xf32>
// CHECK-NEXT: %[[PB:.*]] = dgraph.slice %[[S]], start = [0, 4], limit = [1, 5], stride = [1, 1] : (tensor<1x5xf32>) -> tensor<1x1xf32>
// CHECK-NEXT: %[[GB:.*]] = dgraph.reshape %[[PB]] : (tensor<1x1xf32>) -> tensor<1xf32>
// CHECK-NOT: dshard.wait 1,
// CHECK: dshard.wait 2
// CHECK: dshard.wait 3
// CHECK: return %[[GA]], %[[GB]]
module attributes {dshard.mesh = #dshard.mesh<[dp = 8]>} {
func.func @gradients(%x: tensor<16x2xf32>, %y: tensor<8xf32>, %z: tensor<16x2xf32>, %u: tensor<2x16xf32>) -> (tensor<2x2xf32>, tensor<1xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<16x2xf32>) {
  %a = dgraph.mul %x, %x {dgraph.layer = #dgraph.layer<index = 0>} : tensor<16x2xf32>
  %ra = dshard.reduce_scatter %a "dp" dim = 0 {async = 1 : i64, handle = 0 : i64, phase = "backward"} : (tensor<16x2xf32>) -> tensor<2x2xf32>
  %b = dgraph.mul %y, %y {dgraph.layer = #dgraph.layer<index = 0>} : tensor<8xf32>
  %rb = dshard.reduce_scatter %b "dp" dim = 0 {async = 1 : i64, handle = 1 : i64, phase = "backward"} : (tensor<8xf32>) -> tensor<1xf32>
  %c = dgraph.mul %z, %z {dgraph.layer = #dgraph.layer<index = 1>} : tensor<16x2xf32>
  %rc = dshard.reduce_scatter %c "dp" dim = 0 {async = 1 : i64, handle = 2 : i64, phase = "backward"} : (tensor<16x2xf32>) -> tensor<2x2xf32>
  %d = dgraph.mul %u, %u {dgraph.layer = #dgraph.layer<index = 0>} : tensor<2x16xf32>
  %rd = dshard.reduce_scatter %d "dp" dim = 1 {async = 1 : i64, handle = 3 : i64, phase = "backward"} : (tensor<2x16xf32>) -> tensor<2x2xf32>
  %e = dgraph.mul %z, %z : tensor<16x2xf32>
  dshard.wait 0, %a, %ra : tensor<16x2xf32>, tensor<2x2xf32>
  dshard.wait 1, %b, %rb : tensor<8xf32>, tensor<1xf32>
  dshard.wait 2, %c, %rc : tensor<16x2xf32>, tensor<2x2xf32>
  dshard.wait 3, %d, %rd : tensor<2x16xf32>, tensor<2x2xf32>
  return %ra, %rb, %rc, %rd, %e : tensor<2x2xf32>, tensor<1xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<16x2xf32>
}
}

// -----

// Tests that a gradient waited for before the next one of its layer is
// sent cannot wait for that one: the two stay apart.
// CHECK-LABEL: func.func @waited_early
// CHECK-COUNT-2: dshard.reduce_scatter
// CHECK-NOT: dgraph.concat
module attributes {dshard.mesh = #dshard.mesh<[dp = 8]>} {
func.func @waited_early(%x: tensor<8xf32>) -> (tensor<1xf32>, tensor<1xf32>) {
  %a = dgraph.mul %x, %x {dgraph.layer = #dgraph.layer<index = 0>} : tensor<8xf32>
  %ra = dshard.reduce_scatter %a "dp" dim = 0 {async = 1 : i64, handle = 0 : i64, phase = "backward"} : (tensor<8xf32>) -> tensor<1xf32>
  dshard.wait 0, %a, %ra : tensor<8xf32>, tensor<1xf32>
  %b = dgraph.add %x, %x {dgraph.layer = #dgraph.layer<index = 0>} : tensor<8xf32>
  %rb = dshard.reduce_scatter %b "dp" dim = 0 {async = 1 : i64, handle = 1 : i64, phase = "backward"} : (tensor<8xf32>) -> tensor<1xf32>
  dshard.wait 1, %b, %rb : tensor<8xf32>, tensor<1xf32>
  return %ra, %rb : tensor<1xf32>, tensor<1xf32>
}
}

// -----

// Tests that ZeRO-1/2's gathers of updated parameters are sent as one,
// each shard a row of one, the stores moved down to their slices; a
// variable read after its store keeps its own gather.
// CHECK-LABEL: func.func @apply_step
// CHECK: %[[P0:.*]] = dgraph.reshape %[[N0:.*]] : (tensor<1x4xf32>) -> tensor<1x4xf32>
// CHECK-NEXT: %[[P1:.*]] = dgraph.reshape %{{.*}} : (tensor<2xf32>) -> tensor<1x2xf32>
// CHECK-NEXT: %[[J:.*]] = dgraph.concat %[[P0]], %[[P1]] dim = 1 : (tensor<1x4xf32>, tensor<1x2xf32>) -> tensor<1x6xf32>
// CHECK-NEXT: %[[G:.*]] = dshard.all_gather %[[J]] "dp" dim = 0 {phase = "optimizer"} : (tensor<1x6xf32>) -> tensor<8x6xf32>
// CHECK-NEXT: %[[S0:.*]] = dgraph.slice %[[G]], start = [0, 0], limit = [8, 4], stride = [1, 1] : (tensor<8x6xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: %[[W0:.*]] = dgraph.reshape %[[S0]] : (tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: dgraph.store %[[W0]], @w0
// CHECK-NEXT: %[[S1:.*]] = dgraph.slice %[[G]], start = [0, 4], limit = [8, 6]
// CHECK-NEXT: %[[W1:.*]] = dgraph.reshape %[[S1]] : (tensor<8x2xf32>) -> tensor<16xf32>
// CHECK-NEXT: dgraph.store %[[W1]], @w1
// CHECK: dshard.all_gather %{{.*}} "dp" dim = 0 {phase = "optimizer"} : (tensor<2xf32>) -> tensor<16xf32>
// CHECK-NEXT: dgraph.store %{{.*}}, @w2
module attributes {dshard.mesh = #dshard.mesh<[dp = 8]>} {
  dgraph.variable @w0 : tensor<8x4xf32> = dense<0.5> {trainable}
  dgraph.variable @w1 : tensor<16xf32> = dense<0.5> {trainable}
  dgraph.variable @w2 : tensor<16xf32> = dense<0.5> {trainable}
  func.func @apply_step(%a: tensor<1x4xf32>, %b: tensor<2xf32>, %c: tensor<2xf32>) -> tensor<16xf32> {
    %ga = dshard.all_gather %a "dp" dim = 0 {phase = "optimizer"} : (tensor<1x4xf32>) -> tensor<8x4xf32>
    dgraph.store %ga, @w0 : tensor<8x4xf32>
    %gb = dshard.all_gather %b "dp" dim = 0 {phase = "optimizer"} : (tensor<2xf32>) -> tensor<16xf32>
    dgraph.store %gb, @w1 : tensor<16xf32>
    %gc = dshard.all_gather %c "dp" dim = 0 {phase = "optimizer"} : (tensor<2xf32>) -> tensor<16xf32>
    dgraph.store %gc, @w2 : tensor<16xf32>
    %r = dgraph.load @w2 : tensor<16xf32>
    return %r : tensor<16xf32>
  }
}

// -----

// Tests that a collective whose transfer outlasts the ring's latency goes
// alone: over 8 ranks seven steps move 1.75 MiB in their latency, and this
// gradient is 2 MiB.
// CHECK-LABEL: func.func @large
// CHECK-COUNT-2: dshard.reduce_scatter
// CHECK-NOT: dgraph.concat
module attributes {dshard.mesh = #dshard.mesh<[dp = 8]>} {
func.func @large(%x: tensor<512x1024xf32>, %y: tensor<8xf32>, %z: tensor<8xf32>) -> (tensor<64x1024xf32>, tensor<1xf32>) {
  %a = dgraph.mul %x, %x {dgraph.layer = #dgraph.layer<index = 0>} : tensor<512x1024xf32>
  %ra = dshard.reduce_scatter %a "dp" dim = 0 {async = 1 : i64, handle = 0 : i64, phase = "backward"} : (tensor<512x1024xf32>) -> tensor<64x1024xf32>
  %b = dgraph.mul %y, %y {dgraph.layer = #dgraph.layer<index = 0>} : tensor<8xf32>
  %rb = dshard.reduce_scatter %b "dp" dim = 0 {async = 1 : i64, handle = 1 : i64, phase = "backward"} : (tensor<8xf32>) -> tensor<1xf32>
  %c = dgraph.add %y, %y : tensor<8xf32>
  dshard.wait 0, %a, %ra : tensor<512x1024xf32>, tensor<64x1024xf32>
  dshard.wait 1, %b, %rb : tensor<8xf32>, tensor<1xf32>
  return %ra, %rb : tensor<64x1024xf32>, tensor<1xf32>
}
}

// -----

// Tests that over 2 ranks nothing is joined: the one ring step each
// collective saves is shorter than the join and slice kernels it adds.
// CHECK-LABEL: func.func @two_ranks
// CHECK-COUNT-3: dshard.reduce_scatter
// CHECK-NOT: dgraph.concat
module attributes {dshard.mesh = #dshard.mesh<[dp = 2]>} {
func.func @two_ranks(%x: tensor<4xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
  %a = dgraph.mul %x, %x {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4xf32>
  %ra = dshard.reduce_scatter %a "dp" dim = 0 {async = 1 : i64, handle = 0 : i64, phase = "backward"} : (tensor<4xf32>) -> tensor<2xf32>
  %b = dgraph.add %x, %x {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4xf32>
  %rb = dshard.reduce_scatter %b "dp" dim = 0 {async = 1 : i64, handle = 1 : i64, phase = "backward"} : (tensor<4xf32>) -> tensor<2xf32>
  %c = dgraph.sub %x, %x {dgraph.layer = #dgraph.layer<index = 0>} : tensor<4xf32>
  %rc = dshard.reduce_scatter %c "dp" dim = 0 {async = 1 : i64, handle = 2 : i64, phase = "backward"} : (tensor<4xf32>) -> tensor<2xf32>
  %d = dgraph.mul %x, %x : tensor<4xf32>
  dshard.wait 0, %a, %ra : tensor<4xf32>, tensor<2xf32>
  dshard.wait 1, %b, %rb : tensor<4xf32>, tensor<2xf32>
  dshard.wait 2, %c, %rc : tensor<4xf32>, tensor<2xf32>
  return %ra, %rb, %rc : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}
}
