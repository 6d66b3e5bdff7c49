// RUN: dtcc-opt %s -split-input-file -verify-diagnostics -dtcc-plan-set="mesh=dp=2x"
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=ep=2" 2>&1 | FileCheck %s --check-prefix=AXIS
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=dp=2,dp=2" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=dp=2 zero=4" 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="micro-batches=0" 2>&1 | FileCheck %s --check-prefix=MICRO
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=pp=2 schedule=zb" 2>&1 | FileCheck %s --check-prefix=SCHEDULE
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="recompute=half" 2>&1 | FileCheck %s --check-prefix=RECOMPUTE
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=pp=2 virtual-stages=2" 2>&1 | FileCheck %s --check-prefix=VIRTUAL
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="recompute-layers=2" 2>&1 | FileCheck %s --check-prefix=LAYERS
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="offload=params" 2>&1 | FileCheck %s --check-prefix=OFFLOAD
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=dp=2 grad-reduce=bf16" 2>&1 | FileCheck %s --check-prefix=REDUCE
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=dp=2 micro-batches=2 grad-reduce=half" 2>&1 | FileCheck %s --check-prefix=REDUCE-MICRO
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=tp=2 layouts=w1" 2>&1 | FileCheck %s --check-prefix=SPELLING
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=tp=2 layouts=w1=diagonal" 2>&1 | FileCheck %s --check-prefix=SPELLING2
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=tp=2 layouts=w1=rows,w1=cols" 2>&1 | FileCheck %s --check-prefix=LAYOUT-TWICE
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=tp=2 layouts=nope=rows" 2>&1 | FileCheck %s --check-prefix=NOVAR
// RUN: not dtcc-opt %s -split-input-file -dtcc-plan-set="mesh=tp=2 layouts=b=rows" 2>&1 | FileCheck %s --check-prefix=RANK

// Each RUN line gives the one module below an inconsistent plan; the error
// is at the module and names what is wrong.

// expected-error @+1 {{invalid mesh 'dp=2x': expected AXIS=SIZE with SIZE >= 1, got 'dp=2x'}}
module {
  dgraph.variable @w1 : tensor<4x8xf32> = dense<1.0> {trainable}
  dgraph.variable @b : tensor<8xf32> = dense<1.0> {trainable}
}

// AXIS: error: invalid plan: unknown mesh axis 'ep': dtcc knows dp (data), pp (pipeline), tp (tensor parallel) and cp (context parallel)
// TWICE: error: invalid mesh 'dp=2,dp=2': mesh axis 'dp' appears twice
// ZERO: error: invalid plan: expected a ZeRO stage 0, 1, 2 or 3, got 4
// MICRO: error: invalid plan: expected micro-batches >= 1, got 0
// SCHEDULE: error: invalid plan: expected a pipeline schedule gpipe, 1f1b, interleaved or zb-h1, got 'zb'
// RECOMPUTE: error: invalid plan: expected recompute none, selective or full, got 'half'
// VIRTUAL: error: invalid plan: virtual stages (2) need the interleaved schedule, got 1f1b
// LAYERS: error: invalid plan: recompute_layers (2) needs recompute = full, got none
// OFFLOAD: error: invalid plan: expected offload none or optimizer, got 'params'
// REDUCE: error: invalid plan: expected grad-reduce fp32 or half, got 'bf16'
// REDUCE-MICRO: error: invalid plan: grad_reduce = half with 2 micro-batches needs ZeRO-2 or 3 and no pipeline stages
// SPELLING: error: invalid plan: layout 'w1': expected NAME=rows|cols|whole
// SPELLING2: error: invalid plan: layout 'w1=diagonal': expected NAME=rows|cols|whole
// LAYOUT-TWICE: error: invalid plan: layout of variable 'w1' given twice
// NOVAR: error: layout of 'nope': the module has no variable 'nope'
// RANK: error: layout 'b=rows': expected a 2-D variable, got 'tensor<8xf32>'
