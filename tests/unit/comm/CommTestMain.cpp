//===- CommTestMain.cpp - one GoogleTest run per rank of a job ------------===//
//
// Every rank runs every test in the same order (collectives inside tests
// must match up). Rank 0 prints GoogleTest's output; the others print only
// their failures, prefixed with their rank.
//
//===----------------------------------------------------------------------===//

#include "tests/unit/comm/CommTestUtils.h"

#include <cstdio>
#include <memory>

namespace dtcc::runtime::testing {
namespace {

std::unique_ptr<World> gWorld;
MeshComms gMesh;
std::unique_ptr<CommContext> gComm;

/// Prints this rank's failed assertions.
class FailurePrinter : public ::testing::EmptyTestEventListener {
public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult &result) override {
    if (!result.failed())
      return;
    std::fprintf(stderr, "rank %d: %s:%d: failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }

private:
  int rank_;
};

} // namespace

World &testWorld() { return *gWorld; }
const MeshComms &testMesh() { return gMesh; }
CommContext &testComm() { return *gComm; }

} // namespace dtcc::runtime::testing

int main(int argc, char **argv) {
  using namespace dtcc::runtime;
  using namespace dtcc::runtime::testing;
  ::testing::InitGoogleTest(&argc, argv);
  auto world = World::init();
  if (!world.isOk()) {
    std::fprintf(stderr, "error: %s\n", world.status().toString().c_str());
    return 1;
  }
  gWorld = std::move(world.value());
  const int n = gWorld->size();
  auto mesh = n == 4 ? createMeshComms(*gWorld, {"dp", "tp"}, {2, 2})
                     : createMeshComms(*gWorld, {"dp", "tp"}, {1, n});
  if (!mesh.isOk()) {
    std::fprintf(stderr, "error: %s\n", mesh.status().toString().c_str());
    return 1;
  }
  gMesh = std::move(mesh.value());
  gComm = std::make_unique<CommContext>(gMesh, gWorld->queue());
  if (gWorld->rank() != 0) {
    auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(gWorld->rank()));
  }
  int rc = RUN_ALL_TESTS();
  gComm.reset();
  gMesh = MeshComms();
  gWorld.reset();
  return rc;
}
