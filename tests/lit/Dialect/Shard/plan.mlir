// RUN: dtcc-opt %s -split-input-file | dtcc-opt -split-input-file | FileCheck %s

// Tests that a whole plan round-trips: the mesh in the order written (tp
// outer, dp inner), the schedule that is not a keyword quoted, layouts
// sorted by name, a name that is not a keyword quoted.

// CHECK-LABEL: module @whole
// CHECK-SAME: dshard.plan = #dshard.plan<mesh = [tp = 2, dp = 2], zero = 1, micro_batches = 4, schedule = "1f1b", recompute = full, layouts = {"a/b" = #dshard.sharding<[{tp}, {}]>, fc1 = cols, fc2 = whole}>
module @whole attributes {dshard.plan = #dshard.plan<mesh = [tp = 2, dp = 2], zero = 1, micro_batches = 4, schedule = "1f1b", recompute = full, layouts = {fc2 = whole, "a/b" = #dshard.sharding<[{tp}, {}]>, fc1 = cols}>} {
}

// -----

// Tests that fields may come in any order and default when left out (one
// device, no ZeRO, one micro-batch, 1F1B, no recomputation, no layouts).

// CHECK-LABEL: module @defaults
// CHECK-SAME: dshard.plan = #dshard.plan<mesh = [], zero = 0, micro_batches = 1, schedule = "1f1b", recompute = none>
module @defaults attributes {dshard.plan = #dshard.plan<>} {
}

// -----

// CHECK-LABEL: module @gpipe
// CHECK-SAME: dshard.plan = #dshard.plan<mesh = [pp = 12], zero = 0, micro_batches = 12, schedule = gpipe, recompute = none>
module @gpipe attributes {dshard.plan = #dshard.plan<schedule = gpipe, micro_batches = 12, mesh = [pp = 12]>} {
}

// -----

// Tests that the fields that default quietly round-trip when set: virtual
// stages with the interleaved schedule, the layers that recompute, sequence
// parallelism, offload, and the cp axis.

// CHECK-LABEL: module @interleaved
// CHECK-SAME: dshard.plan = #dshard.plan<mesh = [pp = 2, cp = 2, tp = 2], zero = 1, micro_batches = 4, schedule = interleaved, virtual_stages = 2, recompute = full, recompute_layers = 3, sequence_parallel = true, offload = optimizer>
module @interleaved attributes {dshard.plan = #dshard.plan<offload = optimizer, sequence_parallel = true, recompute_layers = 3, recompute = full, virtual_stages = 2, schedule = interleaved, micro_batches = 4, zero = 1, mesh = [pp = 2, cp = 2, tp = 2]>} {
}

// -----

// CHECK-LABEL: module @zero_bubble
// CHECK-SAME: dshard.plan = #dshard.plan<mesh = [pp = 4], zero = 0, micro_batches = 8, schedule = "zb-h1", recompute = selective>
module @zero_bubble attributes {dshard.plan = #dshard.plan<mesh = [pp = 4], micro_batches = 8, schedule = "zb-h1", recompute = selective, sequence_parallel = false, offload = none>} {
}

// -----

// Tests that gradients summed at the compute type round-trip (with
// accumulated micro-batches under ZeRO-3), and that fp32, the default, is
// not printed.

// CHECK-LABEL: module @half_grad_reduce
// CHECK-SAME: dshard.plan = #dshard.plan<mesh = [dp = 8], zero = 3, micro_batches = 4, schedule = "1f1b", recompute = none, grad_reduce = half>
module @half_grad_reduce attributes {dshard.plan = #dshard.plan<grad_reduce = half, mesh = [dp = 8], zero = 3, micro_batches = 4>} {
}

// -----

// CHECK-LABEL: module @fp32_grad_reduce
// CHECK-SAME: dshard.plan = #dshard.plan<mesh = [dp = 8], zero = 0, micro_batches = 1, schedule = "1f1b", recompute = none>
module @fp32_grad_reduce attributes {dshard.plan = #dshard.plan<grad_reduce = fp32, mesh = [dp = 8]>} {
}
