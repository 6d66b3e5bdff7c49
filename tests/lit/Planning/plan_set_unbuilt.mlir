// A plan field whose transformation the compiler does not build yet is
// refused at the module, naming it (planning::unbuiltFeature); one RUN line
// per such field, removed when its pass lands.

// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=pp=2 schedule=interleaved virtual-stages=2" 2>&1 | FileCheck %s --check-prefix=INTERLEAVED
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=pp=2 schedule=zb-h1" 2>&1 | FileCheck %s --check-prefix=ZB
// RUN: not dtcc-opt %s -dtcc-plan-set="recompute=selective" 2>&1 | FileCheck %s --check-prefix=SELECTIVE
// RUN: not dtcc-opt %s -dtcc-plan-set="recompute=full recompute-layers=1" 2>&1 | FileCheck %s --check-prefix=LAYERS
// RUN: not dtcc-opt %s -dtcc-plan-set="offload=optimizer" 2>&1 | FileCheck %s --check-prefix=OFFLOAD
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=cp=2" 2>&1 | FileCheck %s --check-prefix=CP

// INTERLEAVED: error: cannot build this plan: the interleaved pipeline schedule is not built yet
// ZB: error: cannot build this plan: the zb-h1 pipeline schedule is not built yet
// SELECTIVE: error: cannot build this plan: selective recomputation is not built yet
// LAYERS: error: cannot build this plan: recomputing only some layers (recompute_layers) is not built yet
// OFFLOAD: error: cannot build this plan: optimizer offload is not built yet
// CP: error: cannot build this plan: context parallelism (a cp axis) is not built yet

module {
  dgraph.variable @w : tensor<4x8xf32> = dense<1.0> {trainable}
}
