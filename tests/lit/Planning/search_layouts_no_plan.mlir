// RUN: dtcc-opt %s -verify-diagnostics -dtcc-plan-search-layouts

// Tests that the search needs a plan: it reads the mesh from dshard.plan.

// expected-error @+1 {{expected a module with a dshard.plan (run dtcc-plan-set first)}}
module {
  func.func @train_step() {
    return
  }
}
