// RUN: dtcc-opt %s -dtcc-plan-set="mesh=tp=2" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition -canonicalize | FileCheck %s

// A weight multiplied by a frozen tensor of its own shape (a pruning mask,
// state) is still the weight that tensor parallelism splits: the walk
// through elementwise work on it takes the one trainable variable it
// meets, whichever load comes first, and a weight read twice (@v + @v) is
// one weight. The mask stays whole, each rank slicing its columns. A product of two trainable
// variables (@u * @t) is no weight (both stay whole).
module {
  dgraph.variable @w : tensor<4x8xf32> = dense<0.5> {trainable}
  dgraph.variable @mask : tensor<4x8xf32> = dense<1.0>
  dgraph.variable @v : tensor<8x8xf32> = dense<0.25> {trainable}
  dgraph.variable @u : tensor<8x8xf32> = dense<0.75> {trainable}
  dgraph.variable @t : tensor<8x8xf32> = dense<2.0> {trainable}
  func.func @train_step(%x: tensor<6x4xf32> {dgraph.name = "x"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %w = dgraph.load @w : tensor<4x8xf32>
    %m = dgraph.load @mask : tensor<4x8xf32>
    %wm = dgraph.mul %w, %m : tensor<4x8xf32>
    %h = dgraph.matmul %x, %wm : (tensor<6x4xf32>, tensor<4x8xf32>) -> tensor<6x8xf32>
    %v1 = dgraph.load @v : tensor<8x8xf32>
    %v2 = dgraph.load @v : tensor<8x8xf32>
    %vv = dgraph.add %v1, %v2 : tensor<8x8xf32>
    %g = dgraph.matmul %h, %vv : (tensor<6x8xf32>, tensor<8x8xf32>) -> tensor<6x8xf32>
    %u = dgraph.load @u : tensor<8x8xf32>
    %t = dgraph.load @t : tensor<8x8xf32>
    %wu = dgraph.mul %u, %t : tensor<8x8xf32>
    %y = dgraph.matmul %g, %wu : (tensor<6x8xf32>, tensor<8x8xf32>) -> tensor<6x8xf32>
    %sum = dgraph.reduce_sum %y, dims = [0, 1] : (tensor<6x8xf32>) -> tensor<f32>
    return %sum : tensor<f32>
  }
}
// CHECK-DAG: dgraph.variable @w : tensor<4x4xf32> = (tensor<4x8xf32>) dense<5.000000e-01> {{.*}}dshard.sharding = #dshard.sharding<[{}, {tp}]>
// CHECK-DAG: dgraph.variable @mask : tensor<4x8xf32> = dense<1.000000e+00>{{$}}
// CHECK-DAG: dgraph.variable @v : tensor<4x8xf32> = (tensor<8x8xf32>) {{.*}}dshard.sharding = #dshard.sharding<[{tp}, {}]>
// CHECK-DAG: dgraph.variable @u : tensor<8x8xf32> = dense<7.500000e-01> {trainable}
// CHECK-DAG: dgraph.variable @t : tensor<8x8xf32> = dense<2.000000e+00> {trainable}
// CHECK: func.func @train_step
// CHECK: %[[M:.*]] = dgraph.load @mask : tensor<4x8xf32>
// CHECK: dshard.shard_slice %[[M]] "tp" dim = 1
// CHECK-NOT: dshard.all_gather
// CHECK: dgraph.matmul %{{.*}} : (tensor<6x4xf32>, tensor<4x4xf32>) -> tensor<6x4xf32>
