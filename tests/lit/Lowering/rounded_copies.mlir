// RUN: dtcc-opt %s -dtcc-shard-half-weight-copies | FileCheck %s --check-prefix=COPIES
// RUN: dtcc-opt %s -dtcc-shard-half-weight-copies -dtcc-lower-to-exec="rounded-copies=true" | FileCheck %s
// RUN: dtcc-opt %s -dtcc-shard-half-weight-copies -dtcc-lower-to-exec | FileCheck %s --check-prefix=CAST

// Tests that a master weight the step reads only through its bf16 cast
// gets a persistent bf16 copy (started as the master rounded), which the
// step loads instead and the update's new value is rounded into; @main
// (inference) keeps reading the master. Lowered with rounded-copies, the
// cast writes the copy's state buffer and folds into the AdamW kernel as
// its fourth output; without, the cast stays a kernel of its own, writing
// the copy's buffer directly (no copy kernel either way).
// COPIES: dgraph.variable @w : tensor<4xf32> = dense<5.000000e-01> {dshard.half_copy = @"w/half", trainable}
// COPIES: dgraph.variable @"w/half" : tensor<4xbf16> {dgraph.rounded_from = @w}
// COPIES-LABEL: func.func @main
// COPIES: dgraph.load @w : tensor<4xf32>
// COPIES-LABEL: func.func @train_step
// COPIES: %[[H:.*]] = dgraph.load @"w/half" : tensor<4xbf16>
// COPIES: dgraph.mul %[[H]]
// COPIES: %[[P:.*]], %{{.*}}, %{{.*}} = dgraph.adamw
// COPIES: dgraph.store %[[P]], @w
// COPIES: %[[R:.*]] = dgraph.cast %[[P]] : tensor<4xf32> to tensor<4xbf16>
// COPIES: dgraph.store %[[R]], @"w/half"
// CHECK-LABEL: func.func @train_step()
// CHECK-DAG: %[[W:.*]] = dexec.buffer "state"[{{.*}}] {variable = @w} : memref<4xf32>
// CHECK-DAG: %[[H:.*]] = dexec.buffer "state"[{{.*}}] {variable = @"w/half"} : memref<4xbf16>
// CHECK: dexec.kernel "adamw" ins(%[[W]], {{.*}}) outs(%[[W]], %{{.*}}, %{{.*}}, %[[H]] : memref<4xf32>, memref<4xf32>, memref<4xf32>, memref<4xbf16>)
// CHECK-NOT: "cast"
// CHECK-NOT: "copy"
// CAST-LABEL: func.func @train_step()
// CAST-DAG: %[[W:.*]] = dexec.buffer "state"[{{.*}}] {variable = @w} : memref<4xf32>
// CAST-DAG: %[[H:.*]] = dexec.buffer "state"[{{.*}}] {variable = @"w/half"} : memref<4xbf16>
// CAST: dexec.kernel "adamw" ins(%[[W]], {{.*}}) outs(%[[W]], %{{.*}}, %{{.*}} : memref<4xf32>, memref<4xf32>, memref<4xf32>)
// CAST: dexec.kernel "cast" ins(%[[W]] : memref<4xf32>) outs(%[[H]] : memref<4xbf16>)
// CAST-NOT: "copy"
module {
  dgraph.variable @w : tensor<4xf32> = dense<0.5> {trainable}
  dgraph.variable @m : tensor<4xf32>
  dgraph.variable @v : tensor<4xf32>
  dgraph.variable @s : tensor<i64>
  func.func @main(%x: tensor<4xf32> {dgraph.name = "x"}) -> (tensor<4xf32> {dgraph.name = "y"}) {
    %w = dgraph.load @w : tensor<4xf32>
    %y = dgraph.mul %x, %w : tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func @train_step(%x: tensor<4xbf16> {dgraph.name = "x"}, %g: tensor<4xbf16> {dgraph.name = "g"}) -> (tensor<4xbf16> {dgraph.name = "y"}) {
    %w = dgraph.load @w : tensor<4xf32>
    %wh = dgraph.cast %w : tensor<4xf32> to tensor<4xbf16>
    %y = dgraph.mul %wh, %x : tensor<4xbf16>
    %m = dgraph.load @m : tensor<4xf32>
    %v = dgraph.load @v : tensor<4xf32>
    %s = dgraph.load @s : tensor<i64>
    %one = dgraph.constant dense<1> : tensor<i64>
    %s1 = dgraph.add %s, %one : tensor<i64>
    dgraph.store %s1, @s : tensor<i64>
    %lr = dgraph.constant dense<0.1> : tensor<f32>
    %scale = dgraph.constant dense<1.0> : tensor<f32>
    %p1, %m1, %v1 = dgraph.adamw %w, %g, %m, %v, %lr, %s1, %scale {beta1 = 0.9, beta2 = 0.999, epsilon = 1.0e-08, weight_decay = 0.0} : tensor<4xf32>, tensor<4xbf16>
    dgraph.store %p1, @w : tensor<4xf32>
    dgraph.store %m1, @m : tensor<4xf32>
    dgraph.store %v1, @v : tensor<4xf32>
    return %y : tensor<4xbf16>
  }
}
