// RUN: dtcc-opt %s -split-input-file -verify-diagnostics

// Tests that a mesh axis dtcc does not know is refused.

// expected-error @+1 {{unknown mesh axis 'ep': dtcc knows dp (data), pp (pipeline), tp (tensor parallel) and cp (context parallel)}}
module attributes {dshard.plan = #dshard.plan<mesh = [ep = 2]>} {
}

// -----

// Tests that a mesh axis given twice is refused.

// expected-error @+1 {{mesh axis 'dp' repeats}}
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2, dp = 2]>} {
}

// -----

// Tests that a mesh axis of size 0 is refused.

// expected-error @+1 {{expected mesh axis 'tp' of size >= 1, got 0}}
module attributes {dshard.plan = #dshard.plan<mesh = [tp = 0]>} {
}

// -----

// Tests that a ZeRO stage outside 0..3 is refused.

// expected-error @+1 {{expected a ZeRO stage 0, 1, 2 or 3, got 4}}
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2], zero = 4>} {
}

// -----

// Tests that fewer than one micro-batch is refused.

// expected-error @+1 {{expected micro-batches >= 1, got 0}}
module attributes {dshard.plan = #dshard.plan<micro_batches = 0>} {
}

// -----

// Tests that an unknown schedule is refused.

// expected-error @+1 {{expected a pipeline schedule gpipe, 1f1b, interleaved or zb-h1, got 'zb-h2'}}
module attributes {dshard.plan = #dshard.plan<schedule = "zb-h2">} {
}

// -----

// Tests that an unknown recomputation is refused.

// expected-error @+1 {{expected recompute none, selective or full, got 'some'}}
module attributes {dshard.plan = #dshard.plan<recompute = some>} {
}

// -----

// Tests that an unknown field is refused.

// expected-error @+1 {{unknown plan field 'stages' (expected mesh, zero, micro_batches, schedule, virtual_stages, recompute, recompute_layers, sequence_parallel, offload, grad_reduce or layouts)}}
module attributes {dshard.plan = #dshard.plan<stages = 2>} {
}

// -----

// Tests that a field given twice is refused.

// expected-error @+1 {{plan field 'zero' appears twice}}
module attributes {dshard.plan = #dshard.plan<zero = 1, zero = 2>} {
}

// -----

// Tests that a layout keyword other than rows, cols and whole is refused.

// expected-error @+1 {{expected a layout rows, cols, whole or a #dshard.sharding, got 'diagonal'}}
module attributes {dshard.plan = #dshard.plan<mesh = [tp = 2], layouts = {w = diagonal}>} {
}

// -----

// Tests that a layout that is neither a keyword nor a sharding is refused.

// expected-error @+1 {{expected the layout of 'w' to be rows, cols, whole or a #dshard.sharding, got 3 : i64}}
module attributes {dshard.plan = #dshard.plan<mesh = [tp = 2], layouts = {w = 3}>} {
}

// -----

// Tests that a layout on an axis the mesh lacks is refused.

// expected-error @+1 {{the layout of 'w' uses mesh axis 'tp', which the plan's mesh does not have}}
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2], layouts = {w = #dshard.sharding<[{tp}, {}]>}>} {
}

// -----

// Tests that a variable's layout given twice is refused.

// expected-error @+1 {{layout of variable 'w' given twice}}
module attributes {dshard.plan = #dshard.plan<mesh = [tp = 2], layouts = {w = rows, w = cols}>} {
}

// -----

// Tests that the plan is a module's.

module {
  // expected-error @+1 {{'func.func' op expected 'dshard.plan' on a module}}
  func.func @f() attributes {dshard.plan = #dshard.plan<>} {
    return
  }
}

// -----

// Tests that dshard.plan holds a plan.

// expected-error @+1 {{'builtin.module' op expected 'dshard.plan' to be a #dshard.plan attribute, got "dp=2"}}
module attributes {dshard.plan = "dp=2"} {
}

// -----

// Tests that virtual stages need the interleaved schedule.

// expected-error @+1 {{virtual stages (2) need the interleaved schedule, got 1f1b}}
module attributes {dshard.plan = #dshard.plan<mesh = [pp = 2], virtual_stages = 2>} {
}

// -----

// expected-error @+1 {{expected virtual stages >= 1, got 0}}
module attributes {dshard.plan = #dshard.plan<mesh = [pp = 2], schedule = interleaved, virtual_stages = 0>} {
}

// -----

// Tests that recomputing some layers needs full recomputation.

// expected-error @+1 {{recompute_layers (2) needs recompute = full, got selective}}
module attributes {dshard.plan = #dshard.plan<recompute = selective, recompute_layers = 2>} {
}

// -----

// expected-error @+1 {{expected offload none or optimizer, got 'params'}}
module attributes {dshard.plan = #dshard.plan<offload = params>} {
}

// -----

// expected-error @+1 {{expected sequence_parallel true or false, got 'yes'}}
module attributes {dshard.plan = #dshard.plan<mesh = [tp = 2], sequence_parallel = yes>} {
}

// -----

// expected-error @+1 {{expected grad_reduce fp32 or half, got 'bf16'}}
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2], grad_reduce = bf16>} {
}

// -----

// Tests that gradients summed at the compute type take accumulated
// micro-batches only where each micro-batch's gradient is reduce-scattered
// into a split accumulator (ZeRO-2 and 3, no pipeline).

// expected-error @+1 {{grad_reduce = half with 4 micro-batches needs ZeRO-2 or 3 and no pipeline stages (accumulated micro-batches' gradients are otherwise summed once per step, in fp32)}}
module attributes {dshard.plan = #dshard.plan<mesh = [dp = 2], zero = 1, micro_batches = 4, grad_reduce = half>} {
}

// -----

// expected-error @+1 {{grad_reduce = half with 4 micro-batches needs ZeRO-2 or 3 and no pipeline stages}}
module attributes {dshard.plan = #dshard.plan<mesh = [pp = 2, dp = 2], zero = 3, micro_batches = 4, grad_reduce = half>} {
}
