// RUN: dtcc-opt %s -split-input-file -dtcc-shard-combine-all-reduces | FileCheck %s

// Tests that a gradient norm's chain of partial squared norms, each
// all-reduced over tp before it is added to a replicated total, becomes
// the total of the replicated terms plus one all-reduce of the partials
// (which keeps the phase attribute).

// CHECK-LABEL: func.func @norm
// CHECK-SAME: (%[[R:.*]]: tensor<f32>, %[[P:.*]]: tensor<f32>, %[[S:.*]]: tensor<f32>, %[[Q:.*]]: tensor<f32>, %[[U:.*]]: tensor<f32>)
// CHECK: %[[RS:.*]] = dgraph.add %[[R]], %[[S]] : tensor<f32>
// CHECK: %[[PQ:.*]] = dgraph.add %[[P]], %[[Q]] : tensor<f32>
// CHECK: %[[PQU:.*]] = dgraph.add %[[PQ]], %[[U]] : tensor<f32>
// CHECK: %[[AR:.*]] = dshard.all_reduce %[[PQU]] "tp" {phase = "optimizer"} : tensor<f32>
// CHECK: %[[T:.*]] = dgraph.add %[[RS]], %[[AR]] : tensor<f32>
// CHECK: return %[[T]]
// CHECK-NOT: dshard.all_reduce
func.func @norm(%r: tensor<f32>, %p: tensor<f32>, %s: tensor<f32>, %q: tensor<f32>,
                %u: tensor<f32>) -> tensor<f32> {
  %a = dshard.all_reduce %p "tp" {phase = "optimizer"} : tensor<f32>
  %0 = dgraph.add %r, %a : tensor<f32>
  %b = dshard.all_reduce %q "tp" {phase = "optimizer"} : tensor<f32>
  %1 = dgraph.add %0, %b : tensor<f32>
  %2 = dgraph.add %1, %s : tensor<f32>
  %c = dshard.all_reduce %u "tp" {phase = "optimizer"} : tensor<f32>
  %3 = dgraph.add %2, %c : tensor<f32>
  return %3 : tensor<f32>
}

// -----

// Tests that all-reduces combine per axis (a lone one stays as it is), and
// that an all-reduce with another user, an asynchronous one and a max are
// left alone.

// CHECK-LABEL: func.func @axes
// CHECK-DAG: %[[DP:.*]] = dshard.all_reduce %{{.*}} "dp" : tensor<4xf32>
// CHECK-DAG: %[[SHARED:.*]] = dshard.all_reduce %arg3 "tp" : tensor<4xf32>
// CHECK-DAG: dshard.all_reduce %arg4 "tp" {async = 1 : i64, handle = 0 : i64} : tensor<4xf32>
// CHECK-DAG: dshard.all_reduce %arg5 "tp" {kind = "max"} : tensor<4xf32>
// CHECK: %[[TP:.*]] = dshard.all_reduce %{{.*}} "tp" : tensor<4xf32>
// CHECK-NOT: dshard.all_reduce
// CHECK: return
func.func @axes(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>, %d: tensor<4xf32>,
                %e: tensor<4xf32>, %f: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = dshard.all_reduce %a "tp" : tensor<4xf32>
  %1 = dshard.all_reduce %b "dp" : tensor<4xf32>
  %2 = dshard.all_reduce %c "tp" : tensor<4xf32>
  %3 = dshard.all_reduce %d "tp" : tensor<4xf32>
  %4 = dshard.all_reduce %e "tp" {async = 1 : i64, handle = 0 : i64} : tensor<4xf32>
  %5 = dshard.all_reduce %f "tp" {kind = "max"} : tensor<4xf32>
  %s0 = dgraph.add %0, %1 : tensor<4xf32>
  %s1 = dgraph.add %s0, %2 : tensor<4xf32>
  %s2 = dgraph.add %s1, %3 : tensor<4xf32>
  %s3 = dgraph.add %s2, %4 : tensor<4xf32>
  %s4 = dgraph.add %s3, %5 : tensor<4xf32>
  return %s4, %3 : tensor<4xf32>, tensor<4xf32>
}
