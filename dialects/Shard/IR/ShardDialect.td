//===- ShardDialect.td - dshard dialect definition ---------*- tablegen -*-===//
//
// dshard: where tensors live on a device mesh, and the communication that
// moves them. Before partitioning, shardings are attributes on a global
// (whole-model) program; after it, the program is one rank's, with local
// shapes and explicit collectives.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_DIALECTS_SHARD_IR_SHARDDIALECT_TD
#define DTCC_DIALECTS_SHARD_IR_SHARDDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Shard_Dialect : Dialect {
  let name = "dshard";
  let cppNamespace = "::dtcc::shard";
  let summary = "Meshes, shardings and collectives";
  let description = [{
    A mesh (`#dshard.mesh<[dp = 2, pp = 2, tp = 2]>`) names the axes of the
    device grid; ranks are laid out row-major (the last axis varies
    fastest). A sharding (`#dshard.sharding<[{dp}, {}, {tp} ]>`) says, per tensor dimension, which mesh axes split it (major to
    minor), and over which axes the tensor is a partial sum that still needs
    reducing. A dimension can be split in groups: `{tp}x3` views the
    dimension as 3 equal blocks and splits each block (a fused q|k|v
    projection whose heads are sharded).

    The collectives (`all_reduce`, `all_gather`, `reduce_scatter`,
    `all_to_all`, `broadcast`) and the pipeline transfers (`send`, `recv`,
    tagged with a micro-batch) operate on local tensors over one mesh axis.
    The vocabulary is Shardy's and upstream MLIR's `shard`; the partitioner
    is dtcc's own because it needs partial sums, reduce-scatter, multi-step
    resharding and pipelines.
  }];
  let useDefaultAttributePrinterParser = 1;
  let usePropertiesForAttributes = 1;
  // The dshard.* attributes that passes put on other dialects' ops (a
  // sharding per operand and result, a variable's sharding, the module's
  // mesh) are checked like an op's own: a malformed one is an error at the
  // op, never a crash of a pass that reads it.
  let hasOperationAttrVerify = 1;
}

class Shard_Op<string mnemonic, list<Trait> traits = []>
    : Op<Shard_Dialect, mnemonic, traits>;

class Shard_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Shard_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif // DTCC_DIALECTS_SHARD_IR_SHARDDIALECT_TD
