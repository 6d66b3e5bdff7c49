//===- ProgramMetadata.h - the program's metadata keys ----------*- C++ -*-===//
//
// A program (Program.proto) carries facts about the training step beside its
// buffers and kernels as string metadata. The compiler writes them
// (compiler/Serialize.cpp, from the module's typed dgraph and dshard
// attributes, and compiler/Driver.cpp) and the runtime, the planner's
// program model and `dtcc explain` read them: the keys are spelled once,
// here.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_RUNTIME_FORMAT_PROGRAMMETADATA_H
#define DTCC_RUNTIME_FORMAT_PROGRAMMETADATA_H

namespace dtcc::runtime::metadata {

/// The ONNX graph's name (dgraph.model).
inline constexpr const char kModel[] = "dtcc.model";
/// "1" for a training step that updates its parameters (dgraph.optimizer
/// present), absent otherwise.
inline constexpr const char kTrain[] = "dtcc.train";
/// The optimizer of the step: "adamw" or "sgd" (dgraph.optimizer).
inline constexpr const char kOptimizer[] = "dtcc.optimizer";
/// @train_step calls per optimizer step: the plan's accumulation steps
/// (#dshard.plan; docs/training-abi.md).
inline constexpr const char kMicroBatches[] = "dtcc.micro_batches";
/// A pipeline's schedule (#dshard.plan's, with pp > 1): "1f1b", "gpipe",
/// "zb-h1" or "interleaved" and its chunks per stage, "interleaved 2".
inline constexpr const char kPipelineSchedule[] = "dtcc.pipeline_schedule";
/// A language model's token inputs, "ids,labels" (dgraph.data_inputs).
inline constexpr const char kDataInputs[] = "dtcc.data_inputs";
/// Its vocabulary: the classes of its cross-entropy (dgraph.vocab_size).
inline constexpr const char kVocabSize[] = "dtcc.vocab_size";
/// The compute type of a mixed-precision step, "bf16" or "fp16"
/// (dgraph.dtype); absent for fp32.
inline constexpr const char kDtype[] = "dtcc.dtype";
/// The device the program runs on: "cpu" or "cuda" (dtcc compile --target).
inline constexpr const char kTarget[] = "dtcc.target";
/// What the backward pass recomputes: the plan's mode, then per function
/// the layers and op kinds (dgraph.recomputed); `dtcc explain` prints it.
inline constexpr const char kRecompute[] = "dtcc.recompute";
/// Which attention cores became one fused attention op, and why the others
/// did not (dgraph.fused_attention); `dtcc explain` prints it.
inline constexpr const char kFusedAttention[] = "dtcc.fused_attention";
/// The model's float initializers that are not trained because the loss
/// does not depend on them (no gradient path, dgraph.untrained),
/// comma-separated; absent when there are none. `dtcc explain` prints them.
inline constexpr const char kUntrained[] = "dtcc.untrained";
/// Followed by a function's name: the bytes one rank sends per call of it,
/// as the compiler counted them.
inline constexpr const char kBytesSentPrefix[] = "dtcc.bytes_sent.";
/// Followed by a function's name: the bytes its transfers move per call
/// from the device to the host and back (--offload optimizer).
inline constexpr const char kBytesToHostPrefix[] = "dtcc.bytes_to_host.";
inline constexpr const char kBytesToDevicePrefix[] = "dtcc.bytes_to_device.";
/// Followed by a function's name: the send buffers one rank hands MPI or
/// NCCL per call of it (count x element size of each call), as the
/// compiler predicts them.
inline constexpr const char kBytesHandedPrefix[] = "dtcc.bytes_handed.";

} // namespace dtcc::runtime::metadata

#endif // DTCC_RUNTIME_FORMAT_PROGRAMMETADATA_H
