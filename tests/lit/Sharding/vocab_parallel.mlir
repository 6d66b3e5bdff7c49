// RUN: dtcc-opt %s -dtcc-plan-set="mesh=tp=2" -dtcc-shard-annotate -dtcc-shard-propagate -dtcc-shard-partition | FileCheck %s

// Megatron's vocab-parallel embedding and cross-entropy: each rank holds
// half of the table's rows and of the head's columns; lookups are masked
// to the owned rows and summed over tp, the loss is built from the global
// row max, sum of exponentials and target logit (three all-reduces), and
// the loss's gradient scatters -dloss into the label's column where this
// rank owns it, and the embedding gradient is scattered into the owned
// rows only.
module {
  dgraph.variable @emb : tensor<8x4xf32> = dense<0.5> {trainable}
  dgraph.variable @head : tensor<4x8xf32> = dense<0.25> {trainable}
  func.func @train_step(%ids: tensor<6xi64> {dgraph.name = "ids"}, %labels: tensor<6xi64> {dgraph.name = "labels"}) -> (tensor<f32> {dgraph.name = "loss"}) {
    %e = dgraph.load @emb : tensor<8x4xf32>
    %h = dgraph.load @head : tensor<4x8xf32>
    %x = dgraph.gather %e, %ids axis = 0 : (tensor<8x4xf32>, tensor<6xi64>) -> tensor<6x4xf32>
    %logits = dgraph.matmul %x, %h : (tensor<6x4xf32>, tensor<4x8xf32>) -> tensor<6x8xf32>
    %ce = dgraph.cross_entropy %logits, %labels : (tensor<6x8xf32>, tensor<6xi64>) -> tensor<6xf32>
    %loss = dgraph.reduce_sum %ce, dims = [0] : (tensor<6xf32>) -> tensor<f32>
    %one = dgraph.constant dense<1.0> : tensor<6xf32>
    %dl = dgraph.cross_entropy_grad %logits, %labels, %one : (tensor<6x8xf32>, tensor<6xi64>, tensor<6xf32>) -> tensor<6x8xf32>
    %dx = dgraph.matmul %dl, %h {transpose_rhs} : (tensor<6x8xf32>, tensor<4x8xf32>) -> tensor<6x4xf32>
    %de = dgraph.scatter_add %dx, %ids axis = 0, dim_size = 8 : (tensor<6x4xf32>, tensor<6xi64>) -> tensor<8x4xf32>
    %p = dgraph.load @emb : tensor<8x4xf32>
    %zero = dgraph.constant dense<0.0> : tensor<f32>
    %lr = dgraph.constant dense<0.1> : tensor<f32>
    %step = dgraph.constant dense<1> : tensor<i64>
    %m = dgraph.constant dense<0.0> : tensor<8x4xf32>
    %p1, %m1, %v1 = dgraph.adamw %p, %de, %m, %m, %lr, %step, %lr {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-8, weight_decay = 0.0} : tensor<8x4xf32>
    dgraph.store %p1, @emb : tensor<8x4xf32>
    return %loss : tensor<f32>
  }
}
// CHECK-DAG: dgraph.variable @emb : tensor<4x4xf32> = (tensor<8x4xf32>) {{.*}}dshard.sharding = #dshard.sharding<[{tp}, {}]>
// CHECK-DAG: dgraph.variable @head : tensor<4x4xf32> = (tensor<4x8xf32>) {{.*}}dshard.sharding = #dshard.sharding<[{}, {tp}]>
// Lookup: this rank's rows, masked, summed over tp.
// CHECK: %[[R:.*]] = dshard.axis_index "tp"
// CHECK: %[[SAFE:.*]] = dgraph.select
// CHECK: %[[ROWS:.*]] = dgraph.gather %{{.*}}, %[[SAFE]] axis = 0 : (tensor<4x4xf32>, tensor<6xi64>) -> tensor<6x4xf32>
// CHECK: %[[MASKED:.*]] = dgraph.mul %[[ROWS]]
// CHECK: dshard.all_reduce %[[MASKED]] "tp"
// Cross-entropy over the split vocabulary.
// CHECK: dgraph.matmul {{.*}} -> tensor<6x4xf32>
// CHECK: dgraph.reduce_max
// CHECK: dshard.all_reduce %{{.*}} "tp" {kind = "max"
// CHECK: dshard.all_reduce %{{.*}} "tp"
// CHECK: dgraph.gather_elements
// CHECK: dshard.all_reduce %{{.*}} "tp"
// CHECK-NOT: dgraph.cross_entropy
// Its gradient: the exponentials scaled, less dloss at the label's column on
// the rank holding it (one element a row, no one-hot of [6, 4] indices).
// CHECK-NOT: dgraph.iota
// CHECK: dgraph.scatter_elements {{.*}} axis = 1 {reduction = "add"} : (tensor<6x4xf32>, tensor<6x1xi64>, tensor<6x1xf32>) -> tensor<6x4xf32>
// The embedding gradient: only the owned rows.
// CHECK: dgraph.scatter_add %{{.*}} axis = 0, dim_size = 4 : (tensor<6x4xf32>, tensor<6xi64>) -> tensor<4x4xf32>
// CHECK: dgraph.adamw {{.*}} : tensor<4x4xf32>
