// A plan field whose transformation the compiler does not build yet is
// refused at the module, naming it (planning::unbuiltFeature); one RUN line
// per such field, removed when its pass lands.

// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=tp=2 sequence-parallel=true" 2>&1 | FileCheck %s --check-prefix=SP
// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=cp=2" 2>&1 | FileCheck %s --check-prefix=CP

// SP: error: cannot build this plan: sequence parallelism is not built yet
// CP: error: cannot build this plan: context parallelism (a cp axis) is not built yet

module {
  dgraph.variable @w : tensor<4x8xf32> = dense<1.0> {trainable}
}
