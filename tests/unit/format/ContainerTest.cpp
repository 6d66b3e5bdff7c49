//===- ContainerTest.cpp - program containers and executable loading ------===//
//
// Round-trips programs through the container format and checks that corrupt,
// truncated and inconsistent programs are rejected with a clear error.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/Device.h"
#include "runtime/exec/Executable.h"
#include "runtime/format/Container.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>

using namespace dtcc::runtime;

namespace {

/// A temporary file path removed at the end of the test.
class TempFile {
public:
  TempFile() {
    char name[] = "/tmp/dtcc-container-XXXXXX";
    int fd = mkstemp(name);
    close(fd);
    path_ = name;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

format::Buffer *addBuffer(format::Program &p, format::Arena arena,
                          int64_t offset, std::vector<int64_t> shape) {
  auto *b = p.add_buffers();
  b->set_id(p.buffers_size() - 1);
  b->set_dtype(static_cast<int32_t>(DType::kF32));
  for (int64_t d : shape)
    b->add_shape(d);
  b->set_arena(arena);
  b->set_offset(offset);
  return b;
}

/// y = x + w, with w a variable initialized from the data section.
format::Program addProgram(std::string &data) {
  format::Program p;
  p.set_format_version(kProgramFormatVersion);
  p.set_workspace_bytes(128);
  p.set_state_bytes(64);
  addBuffer(p, format::ARENA_WORKSPACE, 0, {4});  // x
  addBuffer(p, format::ARENA_STATE, 0, {4});      // w
  addBuffer(p, format::ARENA_WORKSPACE, 64, {4}); // y
  auto *var = p.add_variables();
  var->set_name("w");
  var->set_buffer(1);
  var->set_trainable(true);
  float w[4] = {10, 20, 30, 40};
  data.assign(reinterpret_cast<const char *>(w), sizeof(w));
  var->mutable_init()->set_offset(0);
  var->mutable_init()->set_size(sizeof(w));
  auto *fn = p.add_functions();
  fn->set_name("main");
  auto *in = fn->add_inputs();
  in->set_name("x");
  in->set_buffer(0);
  auto *out = fn->add_outputs();
  out->set_name("y");
  out->set_buffer(2);
  auto *inst = fn->add_instructions();
  inst->set_kernel("add");
  inst->add_inputs(0);
  inst->add_inputs(1);
  inst->add_outputs(2);
  inst->set_location("Add_0");
  return p;
}

TEST(ContainerTest, RoundTripsAndRuns) {
  std::string data;
  format::Program program = addProgram(data);
  TempFile file;
  ASSERT_TRUE(writeContainer(file.path(), "", program, data).isOk());
  EXPECT_TRUE(LoadedProgram::hasProgram(file.path()));

  auto loaded = LoadedProgram::open(file.path());
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  EXPECT_EQ(loaded.value()->program().functions(0).name(), "main");
  EXPECT_EQ(loaded.value()->dataSize(), data.size());

  auto device = createCpuDevice();
  auto exe = Executable::create(loaded.value()->program(),
                                loaded.value()->data(),
                                loaded.value()->dataSize(), *device);
  ASSERT_TRUE(exe.isOk()) << exe.status().toString();
  EXPECT_EQ(exe.value()->peakBytes(), 128 + 64);
  HostTensor x(DType::kF32, {4});
  for (int i = 0; i < 4; ++i)
    x.data<float>()[i] = i;
  std::vector<HostTensor> outputs;
  ASSERT_TRUE(exe.value()->run(*exe.value()->findFunction("main"), {&x}, &outputs).isOk());
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].data<float>()[3], 43.0f);
}

TEST(ContainerTest, RejectsWrongInputTypes) {
  std::string data;
  format::Program program = addProgram(data);
  auto device = createCpuDevice();
  auto exe = Executable::create(program,
                                reinterpret_cast<const uint8_t *>(data.data()),
                                data.size(), *device);
  ASSERT_TRUE(exe.isOk());
  HostTensor x(DType::kF32, {5});
  std::vector<HostTensor> outputs;
  Status s = exe.value()->run(*exe.value()->findFunction("main"), {&x}, &outputs);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "input 'x': expected tensor<4xf32>, got tensor<5xf32>");
  HostTensor i(DType::kI32, {4});
  s = exe.value()->run(*exe.value()->findFunction("main"), {&i}, &outputs);
  EXPECT_EQ(s.message(), "input 'x': expected tensor<4xf32>, got tensor<4xi32>");
}

TEST(ContainerTest, RejectsFilesThatAreNotPrograms) {
  TempFile file;
  {
    std::ofstream out(file.path());
    out << "#!/bin/sh\necho this is a shell script, not a dtcc program\n";
  }
  EXPECT_FALSE(LoadedProgram::hasProgram(file.path()));
  auto loaded = LoadedProgram::open(file.path());
  ASSERT_FALSE(loaded.isOk());
  EXPECT_NE(loaded.status().message().find("not a dtcc program"), std::string::npos);

  auto missing = LoadedProgram::open("/nonexistent/program");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(ContainerTest, DetectsCorruption) {
  std::string data;
  format::Program program = addProgram(data);
  TempFile file;
  ASSERT_TRUE(writeContainer(file.path(), "", program, data).isOk());
  std::string bytes;
  {
    std::ifstream in(file.path(), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Flip a byte of the program: the checksum catches it.
  std::string corrupt = bytes;
  corrupt[3] ^= 0x5a;
  {
    std::ofstream out(file.path(), std::ios::binary | std::ios::trunc);
    out.write(corrupt.data(), corrupt.size());
  }
  auto loaded = LoadedProgram::open(file.path());
  ASSERT_FALSE(loaded.isOk());
  EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find("checksum"), std::string::npos);

  // Drop bytes from the middle: the trailer points outside the file.
  std::string truncated = bytes.substr(0, 10) + bytes.substr(bytes.size() - 48);
  {
    std::ofstream out(file.path(), std::ios::binary | std::ios::trunc);
    out.write(truncated.data(), truncated.size());
  }
  loaded = LoadedProgram::open(file.path());
  ASSERT_FALSE(loaded.isOk());
  EXPECT_NE(loaded.status().message().find("truncated or corrupt"), std::string::npos);
}

TEST(ContainerTest, RejectsInconsistentPrograms) {
  std::string data;
  auto device = createCpuDevice();
  auto create = [&](const format::Program &p) {
    return Executable::create(p, reinterpret_cast<const uint8_t *>(data.data()),
                              data.size(), *device);
  };
  {
    format::Program p = addProgram(data);
    p.mutable_buffers(2)->set_offset(96); // 96 + 16 > 128 is fine...
    p.mutable_buffers(2)->set_offset(120); // ...120 + 16 is not
    auto exe = create(p);
    ASSERT_FALSE(exe.isOk());
    EXPECT_NE(exe.status().message().find("does not fit its arena of 128 bytes"),
              std::string::npos);
  }
  {
    format::Program p = addProgram(data);
    p.mutable_variables(0)->mutable_init()->set_size(8);
    auto exe = create(p);
    ASSERT_FALSE(exe.isOk());
    EXPECT_EQ(exe.status().message(),
              "variable 'w' has 8 bytes of data, expected 16");
  }
  {
    format::Program p = addProgram(data);
    p.mutable_variables(0)->mutable_init()->set_offset(1000);
    auto exe = create(p);
    ASSERT_FALSE(exe.isOk());
    EXPECT_NE(exe.status().message().find("outside the data section"), std::string::npos);
  }
  {
    format::Program p = addProgram(data);
    p.mutable_cpu_kernels()->set_offset(100);
    p.mutable_cpu_kernels()->set_size(64);
    auto exe = create(p);
    ASSERT_FALSE(exe.isOk());
    EXPECT_NE(exe.status().message().find(
                  "the generated CPU kernels lie outside the data section"),
              std::string::npos)
        << exe.status().message();
  }
  {
    // Kernels generated for CUDA: the CPU device refuses them, naming why.
    format::Program p = addProgram(data);
    p.mutable_gpu_kernels()->set_offset(0);
    p.mutable_gpu_kernels()->set_size(16);
    auto exe = create(p);
    ASSERT_FALSE(exe.isOk());
    EXPECT_NE(exe.status().message().find(
                  "cannot run kernels generated for CUDA"),
              std::string::npos)
        << exe.status().message();
  }
  {
    format::Program p = addProgram(data);
    p.mutable_functions(0)->mutable_instructions(0)->set_kernel("frobnicate");
    auto *extra = p.mutable_functions(0)->add_instructions();
    *extra = p.functions(0).instructions(0);
    extra->set_kernel("warp_drive");
    auto exe = create(p);
    ASSERT_FALSE(exe.isOk());
    EXPECT_EQ(exe.status().code(), StatusCode::kUnimplemented);
    EXPECT_EQ(exe.status().message(),
              "device 'cpu' has no kernel for: frobnicate, warp_drive");
  }
  {
    format::Program p = addProgram(data);
    p.mutable_functions(0)->mutable_instructions(0)->add_inputs(77);
    auto exe = create(p);
    ASSERT_FALSE(exe.isOk());
    EXPECT_EQ(exe.status().message(), "program refers to buffer 77 of 3");
  }
  {
    format::Program p = addProgram(data);
    p.mutable_buffers(0)->set_dtype(8); // ONNX string
    auto exe = create(p);
    ASSERT_FALSE(exe.isOk());
    EXPECT_EQ(exe.status().message(), "buffer 0 has unknown element type 8");
  }
}

TEST(Container, InsideDataSectionAtItsEdgesAndOnOverflow) {
  auto ref = [](int64_t offset, int64_t size) {
    format::DataRef r;
    r.set_offset(offset);
    r.set_size(size);
    return r;
  };
  EXPECT_TRUE(insideDataSection(ref(0, 128), 128));
  EXPECT_TRUE(insideDataSection(ref(128, 0), 128));
  EXPECT_FALSE(insideDataSection(ref(120, 16), 128));
  EXPECT_FALSE(insideDataSection(ref(129, 0), 128));
  EXPECT_FALSE(insideDataSection(ref(-1, 4), 128));
  EXPECT_FALSE(insideDataSection(ref(4, -1), 128));
  // offset + size past int64's range: no wrap-around into "inside".
  EXPECT_FALSE(insideDataSection(ref(64, INT64_MAX), 128));
}

} // namespace
