//===- TrainerTestUtils.h - hand-built training programs ---*- C++ -*-===//
//
// A program builder, two tiny training programs on existing CPU kernels, a
// reference of the ABI's token sampling, and temporary directories.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_TESTS_UNIT_TRAINER_TRAINERTESTUTILS_H
#define DTCC_TESTS_UNIT_TRAINER_TRAINERTESTUTILS_H

#include "runtime/base/HostTensor.h"
#include "runtime/device/Device.h"
#include "runtime/exec/Executable.h"
#include "runtime/format/Container.h"
#include "runtime/format/Program.pb.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <vector>

namespace dtcc::runtime::testing {

/// A directory removed with its contents at the end of the test.
class TempDir {
public:
  TempDir() {
    char name[] = "/tmp/dtcc-trainer-XXXXXX";
    path_ = mkdtemp(name);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string &path() const { return path_; }
  std::string operator/(const std::string &name) const {
    return path_ + "/" + name;
  }

private:
  std::string path_;
};

/// The ABI's splitmix64, written out again so that the runtime's is checked
/// against the text of docs/training-abi.md rather than against itself.
inline uint64_t referenceSplitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// ids and labels of sample k of `tokens` for sequences of `s`.
inline void referenceSample(const std::vector<uint32_t> &tokens, uint64_t seed,
                            uint64_t k, int64_t s, std::vector<int64_t> &ids,
                            std::vector<int64_t> &labels) {
  uint64_t n = tokens.size();
  uint64_t offset =
      referenceSplitmix64(seed ^ referenceSplitmix64(k)) % (n - s);
  ids.assign(tokens.begin() + offset, tokens.begin() + offset + s);
  labels.assign(tokens.begin() + offset + 1, tokens.begin() + offset + s + 1);
}

/// Writes `tokens` as a little-endian uint16 or uint32 file.
inline void writeTokens(const std::string &path,
                        const std::vector<uint32_t> &tokens, int width) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (uint32_t t : tokens) {
    if (width == 2) {
      uint16_t v = static_cast<uint16_t>(t);
      out.write(reinterpret_cast<const char *>(&v), 2);
    } else {
      out.write(reinterpret_cast<const char *>(&t), 4);
    }
  }
}

/// Builds a Program with buffers laid out one after another per arena.
class ProgramBuilder {
public:
  ProgramBuilder() { program_.set_format_version(kProgramFormatVersion); }

  /// A buffer of `shape` in `arena`; `strides` empty: row-major.
  /// `at` >= 0 places it at that offset instead of allocating.
  int buffer(format::Arena arena, DType dtype, std::vector<int64_t> shape,
             std::vector<int64_t> strides = {}, int64_t at = -1) {
    auto *b = program_.add_buffers();
    b->set_id(program_.buffers_size() - 1);
    b->set_dtype(static_cast<int32_t>(dtype));
    int64_t numel = 1, extent = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      b->add_shape(shape[d]);
      numel *= shape[d];
      if (!strides.empty()) {
        b->add_strides(strides[d]);
        extent += (shape[d] - 1) * strides[d];
      }
    }
    if (strides.empty())
      extent = numel;
    b->set_arena(arena);
    int64_t &top = arenaBytes_[arena];
    if (at < 0) {
      at = top;
      top += (extent * dtypeSize(dtype) + 63) / 64 * 64;
    }
    b->set_offset(at);
    return b->id();
  }
  int temp(DType dtype, std::vector<int64_t> shape) {
    return buffer(format::ARENA_WORKSPACE, dtype, std::move(shape));
  }

  /// A variable initialized with `values` (converted to `dtype`).
  template <typename T>
  int variable(const std::string &name, DType dtype, std::vector<int64_t> shape,
               const std::vector<T> &values, bool trainable) {
    int id = buffer(format::ARENA_STATE, dtype, std::move(shape));
    auto *v = program_.add_variables();
    v->set_name(name);
    v->set_buffer(id);
    v->set_trainable(trainable);
    *v->mutable_init() = append(values);
    return id;
  }

  /// A constant scalar, and views of it broadcast to `shape`.
  template <typename T> int constant(DType dtype, T value) {
    int id = buffer(format::ARENA_CONSTANT, dtype, {});
    auto *c = program_.add_constants();
    c->set_buffer(id);
    *c->mutable_data() = append(std::vector<T>{value});
    return id;
  }
  int broadcast(int scalar, std::vector<int64_t> shape) {
    const format::Buffer &b = program_.buffers(scalar);
    std::vector<int64_t> zeros(shape.size(), 0);
    return buffer(b.arena(), static_cast<DType>(b.dtype()), std::move(shape),
                  zeros, b.offset());
  }

  format::Function *function(const std::string &name) {
    auto *f = program_.add_functions();
    f->set_name(name);
    return f;
  }
  static void input(format::Function *f, const std::string &name, int id) {
    auto *b = f->add_inputs();
    b->set_name(name);
    b->set_buffer(id);
  }
  static void output(format::Function *f, const std::string &name, int id) {
    auto *b = f->add_outputs();
    b->set_name(name);
    b->set_buffer(id);
  }
  static format::Instruction *inst(format::Function *f,
                                   const std::string &kernel,
                                   std::vector<int> inputs,
                                   std::vector<int> outputs) {
    auto *i = f->add_instructions();
    i->set_kernel(kernel);
    for (int id : inputs)
      i->add_inputs(id);
    for (int id : outputs)
      i->add_outputs(id);
    i->set_location(kernel + "_" + std::to_string(f->instructions_size()));
    return i;
  }
  static void reduceAll(format::Function *f, int in, int out, int rank) {
    auto *i = inst(f, "reduce_sum", {in}, {out});
    auto *dims = (*i->mutable_attrs())["dims"].mutable_ints();
    for (int d = 0; d < rank; ++d)
      dims->add_values(d);
  }
  /// `var = op(var, other)` through a temporary, as an optimizer would.
  void update(format::Function *f, const std::string &op, int var, int other,
              DType dtype, std::vector<int64_t> shape) {
    int t = temp(dtype, shape);
    inst(f, op, {var, other}, {t});
    inst(f, "copy", {t}, {var});
  }
  void setMetadata(const std::string &key, const std::string &value) {
    (*program_.mutable_metadata())[key] = value;
  }

  format::Program &program() {
    program_.set_workspace_bytes(
        std::max<int64_t>(arenaBytes_[format::ARENA_WORKSPACE], 64));
    program_.set_state_bytes(
        std::max<int64_t>(arenaBytes_[format::ARENA_STATE], 64));
    program_.set_constant_bytes(
        std::max<int64_t>(arenaBytes_[format::ARENA_CONSTANT], 64));
    program_.set_host_workspace_bytes(arenaBytes_[format::ARENA_HOST_WORKSPACE]);
    program_.set_host_state_bytes(arenaBytes_[format::ARENA_HOST_STATE]);
    return program_;
  }
  const std::string &data() const { return data_; }

private:
  template <typename T> format::DataRef append(const std::vector<T> &values) {
    format::DataRef ref;
    ref.set_offset(data_.size());
    ref.set_size(values.size() * sizeof(T));
    data_.append(reinterpret_cast<const char *>(values.data()),
                 values.size() * sizeof(T));
    return ref;
  }

  format::Program program_;
  std::string data_;
  int64_t arenaBytes_[5] = {0, 0, 0, 0, 0}; // by format::Arena
};

/// The shape of the test programs' token batches.
constexpr int64_t kSeq = 4;
/// The learning rate of the test programs' update w -= kRate * labels.
constexpr float kRate = 0.01f;

/// Initial w of the test programs: [rows, kSeq] f32.
inline std::vector<float> initialW(int64_t rows) {
  std::vector<float> w;
  for (int64_t i = 0; i < rows * kSeq; ++i)
    w.push_back(0.5f + 0.25f * i);
  return w;
}

/// A training program with one micro-batch of `rows` x kSeq tokens:
///   loss = sum(cast(ids) * w);  lr = cast(__total_steps - __step);
///   grad_norm = sum(cast(labels));  w -= kRate * cast(labels);  ++__step.
/// `idsType` is i32 or i64.
inline ProgramBuilder singleMicroBatchProgram(int64_t rows,
                                              DType idsType = DType::kI64) {
  ProgramBuilder b;
  const std::vector<int64_t> shape = {rows, kSeq};
  int w = b.variable("w", DType::kF32, shape, initialW(rows), true);
  int step =
      b.variable("__step", DType::kI64, {}, std::vector<int64_t>{0}, false);
  int total = b.variable("__total_steps", DType::kI64, {},
                         std::vector<int64_t>{0}, false);
  int one = b.constant(DType::kI64, int64_t(1));
  int rate = b.broadcast(b.constant(DType::kF32, kRate), shape);

  auto *f = b.function("train_step");
  int ids = b.temp(idsType, shape), labels = b.temp(idsType, shape);
  ProgramBuilder::input(f, "ids", ids);
  ProgramBuilder::input(f, "labels", labels);
  int idsF = b.temp(DType::kF32, shape), prod = b.temp(DType::kF32, shape);
  int loss = b.temp(DType::kF32, {});
  ProgramBuilder::inst(f, "cast", {ids}, {idsF});
  ProgramBuilder::inst(f, "mul", {idsF, w}, {prod});
  ProgramBuilder::reduceAll(f, prod, loss, 2);
  int remaining = b.temp(DType::kI64, {}), lr = b.temp(DType::kF32, {});
  ProgramBuilder::inst(f, "sub", {total, step}, {remaining});
  ProgramBuilder::inst(f, "cast", {remaining}, {lr});
  int labelsF = b.temp(DType::kF32, shape), norm = b.temp(DType::kF32, {});
  ProgramBuilder::inst(f, "cast", {labels}, {labelsF});
  ProgramBuilder::reduceAll(f, labelsF, norm, 2);
  int scaled = b.temp(DType::kF32, shape);
  ProgramBuilder::inst(f, "mul", {labelsF, rate}, {scaled});
  b.update(f, "sub", w, scaled, DType::kF32, shape);
  b.update(f, "add", step, one, DType::kI64, {});
  ProgramBuilder::output(f, "loss", loss);
  ProgramBuilder::output(f, "lr", lr);
  ProgramBuilder::output(f, "grad_norm", norm);

  auto *main = b.function("main");
  int x = b.temp(idsType, shape), y = b.temp(DType::kF32, shape);
  ProgramBuilder::input(main, "ids", x);
  int xF = b.temp(DType::kF32, shape);
  ProgramBuilder::inst(main, "cast", {x}, {xF});
  ProgramBuilder::inst(main, "mul", {xF, w}, {y});
  ProgramBuilder::output(main, "scores", y);

  b.setMetadata("dtcc.train", "1");
  b.setMetadata("dtcc.micro_batches", "1");
  b.setMetadata("dtcc.data_inputs", "ids,labels");
  b.setMetadata("dtcc.optimizer", "sgd");
  b.setMetadata("model", "toy");
  return b;
}

/// The same model with two micro-batches of one row each: train_step
/// accumulates cast(labels) into w/grad_acc and counts its calls in
/// `calls`; apply_step does w -= kRate * grad_acc, zeroes grad_acc, counts
/// in `applies`, and returns lr and grad_norm (the sum of grad_acc).
inline ProgramBuilder twoMicroBatchProgram() {
  ProgramBuilder b;
  const std::vector<int64_t> shape = {1, kSeq};
  int w = b.variable("w", DType::kF32, shape, initialW(1), true);
  int acc = b.variable("w/grad_acc", DType::kF32, shape,
                       std::vector<float>(kSeq, 0.0f), false);
  int step =
      b.variable("__step", DType::kI64, {}, std::vector<int64_t>{0}, false);
  int total = b.variable("__total_steps", DType::kI64, {},
                         std::vector<int64_t>{0}, false);
  int calls =
      b.variable("calls", DType::kI64, {}, std::vector<int64_t>{0}, false);
  int applies =
      b.variable("applies", DType::kI64, {}, std::vector<int64_t>{0}, false);
  int one = b.constant(DType::kI64, int64_t(1));
  int rate = b.broadcast(b.constant(DType::kF32, kRate), shape);

  auto *f = b.function("train_step");
  int ids = b.temp(DType::kI64, shape), labels = b.temp(DType::kI64, shape);
  ProgramBuilder::input(f, "ids", ids);
  ProgramBuilder::input(f, "labels", labels);
  int idsF = b.temp(DType::kF32, shape), prod = b.temp(DType::kF32, shape);
  int loss = b.temp(DType::kF32, {});
  ProgramBuilder::inst(f, "cast", {ids}, {idsF});
  ProgramBuilder::inst(f, "mul", {idsF, w}, {prod});
  ProgramBuilder::reduceAll(f, prod, loss, 2);
  int labelsF = b.temp(DType::kF32, shape);
  ProgramBuilder::inst(f, "cast", {labels}, {labelsF});
  b.update(f, "add", acc, labelsF, DType::kF32, shape);
  b.update(f, "add", calls, one, DType::kI64, {});
  ProgramBuilder::output(f, "loss", loss);

  auto *a = b.function("apply_step");
  int norm = b.temp(DType::kF32, {});
  ProgramBuilder::reduceAll(a, acc, norm, 2);
  int scaled = b.temp(DType::kF32, shape);
  ProgramBuilder::inst(a, "mul", {acc, rate}, {scaled});
  b.update(a, "sub", w, scaled, DType::kF32, shape);
  b.update(a, "sub", acc, acc, DType::kF32, shape);
  int remaining = b.temp(DType::kI64, {}), lr = b.temp(DType::kF32, {});
  ProgramBuilder::inst(a, "sub", {total, step}, {remaining});
  ProgramBuilder::inst(a, "cast", {remaining}, {lr});
  b.update(a, "add", step, one, DType::kI64, {});
  b.update(a, "add", applies, one, DType::kI64, {});
  ProgramBuilder::output(a, "lr", lr);
  ProgramBuilder::output(a, "grad_norm", norm);

  b.setMetadata("dtcc.train", "1");
  b.setMetadata("dtcc.micro_batches", "2");
  b.setMetadata("dtcc.data_inputs", "ids,labels");
  b.setMetadata("dtcc.optimizer", "sgd");
  return b;
}

/// `n` tokens below `vocab`, deterministic.
inline std::vector<uint32_t> makeTokens(int64_t n, uint32_t vocab) {
  std::vector<uint32_t> tokens;
  uint64_t x = 12345;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    tokens.push_back(static_cast<uint32_t>((x >> 33) % vocab));
  }
  return tokens;
}

/// A built program loaded on the CPU.
struct Loaded {
  ProgramBuilder builder;
  std::unique_ptr<Device> device = createCpuDevice();
  std::unique_ptr<Executable> exe;

  explicit Loaded(ProgramBuilder b) : builder(std::move(b)) {
    auto created = Executable::create(
        builder.program(),
        reinterpret_cast<const uint8_t *>(builder.data().data()),
        builder.data().size(), *device);
    EXPECT_TRUE(created.isOk()) << created.status().toString();
    exe = std::move(created.value());
  }
  /// The bytes of every variable, in order.
  std::vector<std::vector<uint8_t>> snapshot() const {
    std::vector<std::vector<uint8_t>> all;
    for (const auto &[name, view] : exe->variables()) {
      const uint8_t *p = static_cast<const uint8_t *>(view.data);
      all.emplace_back(p, p + view.sizeInBytes());
    }
    return all;
  }
  void scribble() {
    for (const auto &[name, view] : exe->variables())
      std::memset(view.data, 0x5a, view.sizeInBytes());
  }
};

inline std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

} // namespace dtcc::runtime::testing

#endif // DTCC_TESTS_UNIT_TRAINER_TRAINERTESTUTILS_H
