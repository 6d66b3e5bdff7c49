// A plan field whose transformation the compiler does not build yet is
// refused at the module, naming it (planning::unbuiltFeature); one RUN line
// per such field, removed when its pass lands.

// RUN: not dtcc-opt %s -dtcc-plan-set="mesh=tp=2 sequence-parallel=true" 2>&1 | FileCheck %s --check-prefix=SP

// SP: error: cannot build this plan: sequence parallelism is not built yet

module {
  dgraph.variable @w : tensor<4x8xf32> = dense<1.0> {trainable}
}
