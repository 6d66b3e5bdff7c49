//===- MeshShape.h - a device mesh: named axes in rank order ----*- C++ -*-===//
//
// The one parsed form of a mesh ("dp=2,tp=2") everywhere a plan is decided
// or priced: the CLI parses `--mesh` here once; the compiler, the planner
// and the sharding passes read axes and sizes from it instead of searching
// strings. Ranks lie row-major over the axes, the last axis fastest (as
// runtime/exec/ShardLayout.h places them), so the order the user writes is
// the order ranks are numbered in: `tp=2,dp=2` puts the two dp replicas on
// neighbouring ranks, `dp=2,tp=2` the two tp shards.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_BASE_MESHSHAPE_H
#define DTCC_RUNTIME_BASE_MESHSHAPE_H

#include "runtime/base/Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtcc::runtime {

class MeshShape {
public:
  struct Axis {
    std::string name;
    int64_t size = 1;
    bool operator==(const Axis &o) const {
      return name == o.name && size == o.size;
    }
  };

  /// One device: no axes.
  MeshShape() = default;

  /// Parses "AXIS=SIZE[,AXIS=SIZE...]": axis names are identifiers
  /// ([A-Za-z_][A-Za-z0-9_]*), each once; sizes are integers >= 1; spaces
  /// around entries are allowed. Errors quote the entry at fault.
  static StatusOr<MeshShape> parse(std::string_view spec);
  /// The same checks on axes given in rank order.
  static StatusOr<MeshShape> of(std::vector<Axis> axes);
  /// The mesh of a planner's plan dp x pp x tp, in Megatron-LM's rank order
  /// (tp fastest, then dp, then pp: rank = (p * dp + d) * tp + t), the
  /// order the planner's time model prices groups in: "pp=P,dp=D,tp=T",
  /// axes of size 1 left out (no axes for one device).
  static MeshShape megatron(int64_t dp, int64_t pp, int64_t tp);

  bool empty() const { return axes_.empty(); }
  const std::vector<Axis> &axes() const { return axes_; }
  bool has(std::string_view axis) const;
  /// The size of `axis`; 1 for an axis the mesh lacks.
  int64_t size(std::string_view axis) const;
  /// Ranks in all (1 for no axes).
  int64_t ranks() const;
  /// Ranks between neighbouring members of a group along `axis`: the
  /// product of the sizes of the axes after it (1 for the last; 1 for an
  /// axis the mesh lacks).
  int64_t stride(std::string_view axis) const;
  /// The ranks of `rank`'s group along `axis` (those that differ from it
  /// only there), in axis order; {rank} for an axis the mesh lacks.
  std::vector<int64_t> group(std::string_view axis, int64_t rank = 0) const;
  /// The same over several axes (those that differ from `rank` only on
  /// them), the first axis major; axes the mesh lacks add nothing.
  std::vector<int64_t> group(const std::vector<std::string> &axes,
                             int64_t rank = 0) const;

  /// "dp=2,tp=2" (empty for no axes): parse(str()) gives the mesh back.
  std::string str() const;

  bool operator==(const MeshShape &o) const { return axes_ == o.axes_; }
  bool operator!=(const MeshShape &o) const { return !(*this == o); }

private:
  const Axis *find(std::string_view axis) const;
  std::vector<Axis> axes_;
};

} // namespace dtcc::runtime

#endif // DTCC_RUNTIME_BASE_MESHSHAPE_H
