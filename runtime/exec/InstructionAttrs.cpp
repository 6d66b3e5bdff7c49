//===- InstructionAttrs.cpp - an instruction's attributes for its kernel --===//

#include "runtime/exec/Kernel.h"
#include "runtime/format/Program.pb.h"

namespace dtcc::runtime {

Attrs instructionAttrs(const format::Instruction &inst) {
  Attrs attrs;
  for (const auto &[name, value] : inst.attrs()) {
    switch (value.value_case()) {
    case format::AttrValue::kI:
      attrs.set(name, value.i());
      break;
    case format::AttrValue::kF:
      attrs.set(name, value.f());
      break;
    case format::AttrValue::kS:
      attrs.set(name, value.s());
      break;
    case format::AttrValue::kInts:
      attrs.set(name, std::vector<int64_t>(value.ints().values().begin(),
                                           value.ints().values().end()));
      break;
    case format::AttrValue::kFloats:
      attrs.set(name, std::vector<double>(value.floats().values().begin(),
                                          value.floats().values().end()));
      break;
    case format::AttrValue::kStrings:
      attrs.set(name, std::vector<std::string>(value.strings().values().begin(),
                                               value.strings().values().end()));
      break;
    case format::AttrValue::VALUE_NOT_SET:
      break;
    }
  }
  return attrs;
}

} // namespace dtcc::runtime
