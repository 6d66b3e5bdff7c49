//===- ShardAttrs.td - mesh and sharding attributes --------*- tablegen -*-===//

#ifndef DTCC_DIALECTS_SHARD_IR_SHARDATTRS_TD
#define DTCC_DIALECTS_SHARD_IR_SHARDATTRS_TD

include "dialects/Shard/IR/ShardDialect.td"

def Shard_MeshAttr : Shard_Attr<"Mesh", "mesh"> {
  let summary = "A device mesh: named axes and their sizes";
  let description = [{
    Example: `#dshard.mesh<[dp = 2, pp = 1, tp = 4]>` (8 ranks; rank
    `r = (dp * 1 + pp) * 4 + tp`).
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr">:$axes,
                        ArrayRefParameter<"int64_t">:$sizes);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The size of `axis`; 1 for an axis the mesh does not have.
    int64_t getSize(::llvm::StringRef axis) const;
    int64_t getNumRanks() const;
  }];
}

def Shard_DimShardingAttr : Shard_Attr<"DimSharding", "dim"> {
  let summary = "How one tensor dimension is split";
  let description = [{
    The mesh axes that split the dimension, major to minor, and the number
    of equal groups the dimension is viewed as (each group is split the
    same way). Printed inside a sharding as `{tp}`, `{dp, tp}` or `{tp}x3`.
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr">:$axes,
                        DefaultValuedParameter<"int64_t", "1">:$groups);
  let assemblyFormat = "`<` `[` $axes `]` (`,` $groups^)? `>`";
}

def Shard_ShardingAttr : Shard_Attr<"Sharding", "sharding"> {
  let summary = "How a tensor is laid out over a mesh";
  let description = [{
    One entry per dimension, and the axes over which the tensor is a
    partial sum. Example: `#dshard.sharding<[{dp}, {}, {tp}x3], partial =
    {}>`: dimension 0 split over dp, dimension 2 viewed as 3 blocks each
    split over tp. An axis may appear once at most.
  }];
  let parameters = (ins ArrayRefParameter<"DimShardingAttr">:$dims,
                        ArrayRefParameter<"::mlir::StringAttr">:$partial);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Fully replicated over a tensor of `rank` dimensions.
    static ShardingAttr replicated(::mlir::MLIRContext *ctx, int64_t rank);
    bool isReplicated() const;
    bool isPartial() const { return !getPartial().empty(); }
    /// The axes that split dimension `d`.
    ::llvm::ArrayRef<::mlir::StringAttr> axesOf(int64_t d) const {
      return getDims()[d].getAxes();
    }
    /// Every axis the sharding uses, in dims then partial.
    ::llvm::SmallVector<::mlir::StringAttr> usedAxes() const;
    /// The local shape of `global` under this sharding on `mesh`, or
    /// failure when a dimension does not divide (with a reason).
    ::mlir::FailureOr<::llvm::SmallVector<int64_t>>
    localShape(::llvm::ArrayRef<int64_t> global, MeshAttr mesh,
               std::string *why = nullptr) const;
    /// The same sharding without partial axes.
    ShardingAttr withoutPartial() const;
  }];
}

#endif // DTCC_DIALECTS_SHARD_IR_SHARDATTRS_TD
