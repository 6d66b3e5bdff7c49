//===- ShardLayout.h - which block of a tensor a rank holds -----*- C++ -*-===//
//
// A program compiled for a mesh holds, on each rank, one block of every
// split variable and input (format::Sharding). These functions place a
// rank on the mesh and map its blocks to global coordinates: to take its
// part of an initial value or of a batch, and to save and restore
// checkpoints in global coordinates whatever the plan.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_EXEC_SHARDLAYOUT_H
#define DTCC_RUNTIME_EXEC_SHARDLAYOUT_H

#include "runtime/base/MeshShape.h"
#include "runtime/base/Status.h"
#include "runtime/format/Program.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtcc::runtime {

/// A rank's place on a mesh (runtime::MeshShape: ranks row-major over the
/// axes, the last axis fastest).
class MeshCoords {
public:
  /// The single-device mesh: no axes.
  MeshCoords() = default;
  /// `rank` on `mesh`; an error when the rank is outside it.
  static StatusOr<MeshCoords> of(const format::Mesh &mesh, int64_t rank);

  const MeshShape &shape() const { return shape_; }
  int64_t numRanks() const { return shape_.ranks(); }
  /// The size of `axis` (1 for an axis the mesh lacks).
  int64_t size(const std::string &axis) const { return shape_.size(axis); }
  /// This rank's coordinate on `axis` (0 for an axis the mesh lacks).
  int64_t coord(const std::string &axis) const;
  /// This rank's index among the ranks that differ only on `axes`, the
  /// first axis major: what a dimension split over `axes` gives it.
  int64_t index(const std::vector<std::string> &axes) const;
  int64_t size(const std::vector<std::string> &axes) const;
  /// "dp=2 x tp=2".
  std::string describe() const;

private:
  MeshShape shape_;
  std::vector<int64_t> coords_; ///< one per axis of shape_
};

/// One contiguous-in-each-dimension piece of a rank's block: `size`
/// elements per dimension at `globalStart` in the whole tensor and at
/// `localStart` in the rank's local tensor.
struct BlockPiece {
  std::vector<int64_t> globalStart, localStart, size;
};

/// The local shape of `sharding` on `coords`' mesh, or an error when a
/// dimension does not divide.
StatusOr<std::vector<int64_t>> localShape(const format::Sharding &sharding,
                                          const MeshCoords &coords);
/// The pieces of this rank's block (one, unless dimensions have groups).
StatusOr<std::vector<BlockPiece>> blockPieces(const format::Sharding &sharding,
                                              const MeshCoords &coords);

/// Copies a box of `size` elements from `src` (row-major, shape `srcShape`)
/// at `srcStart` to `dst` (shape `dstShape`) at `dstStart`.
void copyBox(const void *src, const std::vector<int64_t> &srcShape,
             const std::vector<int64_t> &srcStart, void *dst,
             const std::vector<int64_t> &dstShape,
             const std::vector<int64_t> &dstStart,
             const std::vector<int64_t> &size, size_t elementBytes);

/// Copies this rank's block of the whole tensor `global` into `local`.
Status extractBlock(const format::Sharding &sharding, const MeshCoords &coords,
                    size_t elementBytes, const void *global, void *local);

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_EXEC_SHARDLAYOUT_H
