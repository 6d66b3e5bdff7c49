//===- Json.h - a small JSON value, parser and writer -----------*- C++ -*-===//
//
// The planner reads cluster files and plans and writes reports as JSON without
// depending on LLVM; objects keep their keys in insertion order so the output
// is stable.
//
//===----------------------------------------------------------------------===//

#ifndef DTCC_PLANNER_JSON_H
#define DTCC_PLANNER_JSON_H

#include "runtime/base/Status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtcc::planner {

using runtime::Status;
using runtime::StatusOr;

/// A JSON value. Objects are ordered lists of (key, value) pairs.
class Json {
public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Json() = default;
  Json(bool b) : kind_(Kind::kBool), bool_(b) {}
  Json(double d) : kind_(Kind::kNumber), number_(d) {}
  Json(int i) : kind_(Kind::kNumber), number_(i) {}
  Json(int64_t i) : kind_(Kind::kNumber), number_(double(i)) {}
  Json(const char *s) : kind_(Kind::kString), string_(s) {}
  Json(std::string s) : kind_(Kind::kString), string_(std::move(s)) {}

  static Json array() {
    Json j;
    j.kind_ = Kind::kArray;
    return j;
  }
  static Json object() {
    Json j;
    j.kind_ = Kind::kObject;
    return j;
  }

  Kind kind() const { return kind_; }
  bool isNull() const { return kind_ == Kind::kNull; }
  bool isBool() const { return kind_ == Kind::kBool; }
  bool isNumber() const { return kind_ == Kind::kNumber; }
  bool isString() const { return kind_ == Kind::kString; }
  bool isArray() const { return kind_ == Kind::kArray; }
  bool isObject() const { return kind_ == Kind::kObject; }

  bool asBool() const { return bool_; }
  double asNumber() const { return number_; }
  const std::string &asString() const { return string_; }
  const std::vector<Json> &items() const { return items_; }
  const std::vector<std::pair<std::string, Json>> &members() const {
    return members_;
  }

  /// Appends to an array.
  Json &push(Json value);
  /// Sets a member of an object (replacing one with the same key).
  Json &set(const std::string &key, Json value);
  /// The member named `key` of an object, or nullptr.
  const Json *find(const std::string &key) const;

  /// Compact (indent < 0) or pretty-printed text. Numbers print in the
  /// shortest form that reads back to the same double, so round trips are
  /// lossless.
  std::string dump(int indent = 2) const;

  /// Parses JSON text; errors give line and column.
  static StatusOr<Json> parse(const std::string &text);

  /// "null", "a boolean", "a number", ... for error messages.
  static const char *kindName(Kind kind);

private:
  void dumpTo(std::string &out, int indent, int depth) const;

  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

/// Escapes a string for a JSON string literal (without the quotes).
std::string jsonEscape(const std::string &s);

/// Parses the documented YAML subset (block mappings by indentation, `key:
/// value` scalars, `#` comments, quoted or plain strings) into the same value
/// a JSON file would give. Sequences and flow style are not supported and are
/// reported as errors with their line.
StatusOr<Json> parseYamlSubset(const std::string &text);

} // namespace dtcc::planner

#endif // DTCC_PLANNER_JSON_H
