//===- ShardLayout.cpp - which block of a tensor a rank holds -------------===//

#include "runtime/exec/ShardLayout.h"

#include <cstring>
#include <sstream>

namespace dtcc::runtime {

StatusOr<MeshCoords> MeshCoords::of(const format::Mesh &mesh, int64_t rank) {
  if (mesh.axes_size() != mesh.sizes_size())
    return invalidArgument("mesh has ", mesh.axes_size(), " axes but ",
                           mesh.sizes_size(), " sizes");
  std::vector<MeshShape::Axis> axes;
  for (int i = 0; i < mesh.axes_size(); ++i)
    axes.push_back({mesh.axes(i), mesh.sizes(i)});
  MeshCoords c;
  DTCC_ASSIGN_OR_RETURN(c.shape_, MeshShape::of(std::move(axes)));
  if (rank < 0 || rank >= c.numRanks())
    return invalidArgument("rank ", rank, " is outside the mesh ",
                           c.describe(), " (", c.numRanks(), " ranks)");
  const auto &shapeAxes = c.shape_.axes();
  c.coords_.assign(shapeAxes.size(), 0);
  int64_t r = rank;
  for (size_t i = shapeAxes.size(); i-- > 0;) {
    c.coords_[i] = r % shapeAxes[i].size;
    r /= shapeAxes[i].size;
  }
  return c;
}

int64_t MeshCoords::coord(const std::string &axis) const {
  const auto &axes = shape_.axes();
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i].name == axis)
      return coords_[i];
  return 0;
}

int64_t MeshCoords::index(const std::vector<std::string> &axes) const {
  int64_t idx = 0;
  for (const std::string &a : axes)
    idx = idx * size(a) + coord(a);
  return idx;
}

int64_t MeshCoords::size(const std::vector<std::string> &axes) const {
  int64_t n = 1;
  for (const std::string &a : axes)
    n *= size(a);
  return n;
}

std::string MeshCoords::describe() const {
  std::ostringstream os;
  for (size_t i = 0; i < shape_.axes().size(); ++i)
    os << (i ? " x " : "") << shape_.axes()[i].name << "="
       << shape_.axes()[i].size;
  return shape_.empty() ? "a single device" : os.str();
}

namespace {

struct DimLayout {
  int64_t groups, split, localBlock, globalBlock, index;
};

StatusOr<std::vector<DimLayout>> layoutOf(const format::Sharding &sharding,
                                          const MeshCoords &coords) {
  if (sharding.dims_size() != sharding.global_shape_size())
    return invalidArgument("sharding has ", sharding.dims_size(),
                                   " dimensions for a tensor of rank ",
                                   sharding.global_shape_size());
  std::vector<DimLayout> dims;
  for (int d = 0; d < sharding.dims_size(); ++d) {
    const format::DimSharding &ds = sharding.dims(d);
    std::vector<std::string> axes(ds.axes().begin(), ds.axes().end());
    DimLayout l;
    l.groups = std::max<int64_t>(ds.groups(), 1);
    l.split = coords.size(axes);
    l.index = coords.index(axes);
    int64_t n = sharding.global_shape(d);
    if (n % (l.groups * l.split) != 0)
      return invalidArgument(
          "dimension ", d, " of size ", n, " does not split into ", l.groups,
          " group(s) over ", l.split, " rank(s)");
    l.globalBlock = n / l.groups;
    l.localBlock = l.globalBlock / l.split;
    dims.push_back(l);
  }
  return dims;
}

} // namespace

StatusOr<std::vector<int64_t>> localShape(const format::Sharding &sharding,
                                          const MeshCoords &coords) {
  auto dims = layoutOf(sharding, coords);
  if (!dims.isOk())
    return dims.status();
  std::vector<int64_t> shape;
  for (const DimLayout &l : *dims)
    shape.push_back(l.groups * l.localBlock);
  return shape;
}

StatusOr<std::vector<BlockPiece>> blockPieces(const format::Sharding &sharding,
                                              const MeshCoords &coords) {
  auto dims = layoutOf(sharding, coords);
  if (!dims.isOk())
    return dims.status();
  std::vector<BlockPiece> pieces(1);
  for (const DimLayout &l : *dims) {
    std::vector<BlockPiece> next;
    for (const BlockPiece &p : pieces)
      for (int64_t g = 0; g < l.groups; ++g) {
        BlockPiece q = p;
        q.globalStart.push_back(g * l.globalBlock + l.index * l.localBlock);
        q.localStart.push_back(g * l.localBlock);
        q.size.push_back(l.localBlock);
        next.push_back(std::move(q));
      }
    pieces = std::move(next);
  }
  return pieces;
}

void copyBox(const void *src, const std::vector<int64_t> &srcShape,
             const std::vector<int64_t> &srcStart, void *dst,
             const std::vector<int64_t> &dstShape,
             const std::vector<int64_t> &dstStart,
             const std::vector<int64_t> &size, size_t elementBytes) {
  size_t rank = size.size();
  if (rank == 0) {
    std::memcpy(dst, src, elementBytes);
    return;
  }
  for (int64_t s : size)
    if (s == 0)
      return;
  // Row-major strides in bytes.
  std::vector<int64_t> srcStride(rank), dstStride(rank);
  int64_t a = elementBytes, b = elementBytes;
  for (size_t d = rank; d-- > 0;) {
    srcStride[d] = a;
    dstStride[d] = b;
    a *= srcShape[d];
    b *= dstShape[d];
  }
  const auto *s = static_cast<const uint8_t *>(src);
  auto *t = static_cast<uint8_t *>(dst);
  for (size_t d = 0; d < rank; ++d) {
    s += srcStart[d] * srcStride[d];
    t += dstStart[d] * dstStride[d];
  }
  int64_t run = size[rank - 1] * elementBytes;
  std::vector<int64_t> i(rank, 0);
  while (true) {
    int64_t so = 0, to = 0;
    for (size_t d = 0; d + 1 < rank; ++d) {
      so += i[d] * srcStride[d];
      to += i[d] * dstStride[d];
    }
    std::memcpy(t + to, s + so, run);
    size_t d = rank - 1;
    while (d-- > 0) {
      if (++i[d] < size[d])
        break;
      i[d] = 0;
    }
    if (d == static_cast<size_t>(-1))
      return;
  }
}

Status extractBlock(const format::Sharding &sharding, const MeshCoords &coords,
                    size_t elementBytes, const void *global, void *local) {
  auto shape = localShape(sharding, coords);
  if (!shape.isOk())
    return shape.status();
  auto pieces = blockPieces(sharding, coords);
  if (!pieces.isOk())
    return pieces.status();
  std::vector<int64_t> globalShape(sharding.global_shape().begin(),
                                   sharding.global_shape().end());
  for (const BlockPiece &p : *pieces)
    copyBox(global, globalShape, p.globalStart, local, *shape, p.localStart,
            p.size, elementBytes);
  return Status::ok();
}

} // namespace dtcc::runtime
