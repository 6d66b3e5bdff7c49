//===- MeshShape.cpp - a device mesh: named axes in rank order ------------===//

#include "runtime/base/MeshShape.h"

#include <cctype>
#include <limits>

namespace dtcc::runtime {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

bool isIdentifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_'))
    return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      return false;
  return true;
}

/// A decimal integer >= 1 that fits int64 (no sign, no spaces inside).
bool parseSize(std::string_view s, int64_t &out) {
  if (s.empty() || s.size() > 18)
    return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return v >= 1;
}

} // namespace

StatusOr<MeshShape> MeshShape::of(std::vector<Axis> axes) {
  if (axes.empty())
    return invalidArgument("expected a mesh such as dp=2,tp=2");
  int64_t ranks = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    const Axis &a = axes[i];
    if (!isIdentifier(a.name))
      return invalidArgument("mesh axis '", a.name,
                             "' is not a name (letters, digits, _)");
    if (a.size < 1)
      return invalidArgument("mesh axis ", a.name, " has size ", a.size,
                             " (expected at least 1)");
    for (size_t j = 0; j < i; ++j)
      if (axes[j].name == a.name)
        return invalidArgument("mesh axis '", a.name, "' appears twice");
    if (ranks > std::numeric_limits<int32_t>::max() / a.size)
      return invalidArgument("mesh has more than 2^31 ranks");
    ranks *= a.size;
  }
  MeshShape m;
  m.axes_ = std::move(axes);
  return m;
}

StatusOr<MeshShape> MeshShape::parse(std::string_view spec) {
  std::vector<Axis> axes;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view entry = trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view()
                                           : spec.substr(comma + 1);
    if (entry.empty())
      continue;
    size_t eq = entry.find('=');
    int64_t size = 0;
    if (eq == std::string_view::npos || !parseSize(trim(entry.substr(eq + 1)), size))
      return invalidArgument("expected AXIS=SIZE with SIZE >= 1, got '",
                             std::string(entry), "'");
    axes.push_back({std::string(trim(entry.substr(0, eq))), size});
  }
  return of(std::move(axes));
}

MeshShape MeshShape::megatron(int64_t dp, int64_t pp, int64_t tp) {
  MeshShape m;
  for (const Axis &a : {Axis{"pp", pp}, Axis{"dp", dp}, Axis{"tp", tp}})
    if (a.size > 1)
      m.axes_.push_back(a);
  return m;
}

const MeshShape::Axis *MeshShape::find(std::string_view axis) const {
  for (const Axis &a : axes_)
    if (a.name == axis)
      return &a;
  return nullptr;
}

bool MeshShape::has(std::string_view axis) const { return find(axis); }

int64_t MeshShape::size(std::string_view axis) const {
  const Axis *a = find(axis);
  return a ? a->size : 1;
}

int64_t MeshShape::ranks() const {
  int64_t n = 1;
  for (const Axis &a : axes_)
    n *= a.size;
  return n;
}

int64_t MeshShape::stride(std::string_view axis) const {
  int64_t s = 1;
  for (size_t i = axes_.size(); i-- > 0;) {
    if (axes_[i].name == axis)
      return s;
    s *= axes_[i].size;
  }
  return 1;
}

std::vector<int64_t> MeshShape::group(std::string_view axis,
                                      int64_t rank) const {
  return group(std::vector<std::string>{std::string(axis)}, rank);
}

std::vector<int64_t> MeshShape::group(const std::vector<std::string> &axes,
                                      int64_t rank) const {
  std::vector<int64_t> out = {rank};
  for (const std::string &name : axes) {
    const Axis *a = find(name);
    if (!a)
      continue;
    // Each member so far expands into the ranks along this axis.
    const int64_t s = stride(name);
    std::vector<int64_t> next;
    next.reserve(out.size() * size_t(a->size));
    for (int64_t r : out) {
      const int64_t first = r - (r / s) % a->size * s;
      for (int64_t k = 0; k < a->size; ++k)
        next.push_back(first + k * s);
    }
    out = std::move(next);
  }
  return out;
}

std::string MeshShape::str() const {
  std::string s;
  for (const Axis &a : axes_) {
    if (!s.empty())
      s += ',';
    s += a.name + "=" + std::to_string(a.size);
  }
  return s;
}

} // namespace dtcc::runtime
