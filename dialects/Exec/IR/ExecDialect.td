//===- ExecDialect.td - dexec dialect definition -----------*- tablegen -*-===//
//
// dexec: one rank's program after lowering: buffers at static offsets in
// arenas, kernel calls on them, and the bindings of inputs and outputs. This
// is what serializes into the runtime's program format.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_EXEC_IR_EXECDIALECT_TD
#define DTCC_DIALECTS_EXEC_IR_EXECDIALECT_TD

include "mlir/IR/OpBase.td"

def Exec_Dialect : Dialect {
  let name = "dexec";
  let cppNamespace = "::dtcc::exec";
  let summary = "Buffers, kernel calls and communication of one rank";
  let description = [{
    dexec is the last IR before serialization. Every tensor value of the
    graph has become a `memref` view at a fixed byte offset of one of three
    arenas: `workspace` (temporaries, reused by the static memory plan),
    `state` (variables, persistent across steps) and `constant`. Functions
    are straight-line sequences of `dexec.kernel` calls; the runtime executes
    them in order, so the order is the schedule.

    A memref with a strided layout is a view: a broadcast (stride 0) or a
    reshape of another buffer at the same offset. Only elementwise kernels
    accept non-contiguous inputs.
  }];
  let usePropertiesForAttributes = 1;
}

class Exec_Op<string mnemonic, list<Trait> traits = []>
    : Op<Exec_Dialect, mnemonic, traits>;

#endif // DTCC_DIALECTS_EXEC_IR_EXECDIALECT_TD
