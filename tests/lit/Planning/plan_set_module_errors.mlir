// RUN: dtcc-opt %s -split-input-file -verify-diagnostics -dtcc-plan-set="mesh=dp=4"

// Tests that a plan cannot move a module already placed on a mesh.

// expected-error @+1 {{the module is already placed on #dshard.mesh<[dp = 2]>, the plan's mesh is #dshard.mesh<[dp = 4]>}}
module attributes {dshard.mesh = #dshard.mesh<[dp = 2]>} {
}

// -----

// Tests that the plan's pp is the number of stages a step was cut into:
// the pipeline pass cut two, and a plan without pp is refused.

// expected-error @+1 {{the plan's mesh has pp=1 but dtcc-shard-pipeline cut the step into 2 stages}}
module {
  func.func @train_step_pp0() attributes {dshard.stage = 0 : i64} {
    return
  }
  func.func @train_step_pp1() attributes {dshard.stage = 1 : i64} {
    return
  }
}
