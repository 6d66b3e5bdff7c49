//===- Json.cpp - a small JSON value, parser and writer -------------------===//

#include "planner/Json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dtcc::planner {

using runtime::invalidArgument;

Json &Json::push(Json value) {
  items_.push_back(std::move(value));
  return items_.back();
}

Json &Json::set(const std::string &key, Json value) {
  for (auto &member : members_)
    if (member.first == key) {
      member.second = std::move(value);
      return member.second;
    }
  members_.emplace_back(key, std::move(value));
  return members_.back().second;
}

const Json *Json::find(const std::string &key) const {
  for (const auto &member : members_)
    if (member.first == key)
      return &member.second;
  return nullptr;
}

const char *Json::kindName(Kind kind) {
  switch (kind) {
  case Kind::kNull:
    return "null";
  case Kind::kBool:
    return "a boolean";
  case Kind::kNumber:
    return "a number";
  case Kind::kString:
    return "a string";
  case Kind::kArray:
    return "an array";
  case Kind::kObject:
    return "an object";
  }
  return "unknown";
}

std::string jsonEscape(const std::string &s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      } else {
        out += char(c);
      }
    }
  }
  return out;
}

static void dumpNumber(std::string &out, double d) {
  if (!std::isfinite(d)) {
    // JSON has no infinities; null keeps the document valid.
    out += "null";
    return;
  }
  char buf[40];
  if (d == std::floor(d) && std::fabs(d) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", d);
    out += buf;
    return;
  }
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d)
      break;
  }
  out += buf;
}

static void newline(std::string &out, int indent, int depth) {
  if (indent < 0)
    return;
  out += '\n';
  out.append(size_t(indent) * depth, ' ');
}

void Json::dumpTo(std::string &out, int indent, int depth) const {
  switch (kind_) {
  case Kind::kNull:
    out += "null";
    return;
  case Kind::kBool:
    out += bool_ ? "true" : "false";
    return;
  case Kind::kNumber:
    dumpNumber(out, number_);
    return;
  case Kind::kString:
    out += '"';
    out += jsonEscape(string_);
    out += '"';
    return;
  case Kind::kArray: {
    if (items_.empty()) {
      out += "[]";
      return;
    }
    // Arrays of scalars stay on one line; they are usually short vectors.
    bool flat = true;
    for (const Json &item : items_)
      flat &= !item.isArray() && !item.isObject();
    out += '[';
    for (size_t i = 0; i < items_.size(); ++i) {
      if (i)
        out += flat && indent >= 0 ? ", " : ",";
      if (!flat)
        newline(out, indent, depth + 1);
      items_[i].dumpTo(out, indent, depth + 1);
    }
    if (!flat)
      newline(out, indent, depth);
    out += ']';
    return;
  }
  case Kind::kObject: {
    if (members_.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t i = 0; i < members_.size(); ++i) {
      if (i)
        out += ',';
      newline(out, indent, depth + 1);
      out += '"';
      out += jsonEscape(members_[i].first);
      out += indent >= 0 ? "\": " : "\":";
      members_[i].second.dumpTo(out, indent, depth + 1);
    }
    newline(out, indent, depth);
    out += '}';
    return;
  }
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dumpTo(out, indent, 0);
  if (indent >= 0)
    out += '\n';
  return out;
}

namespace {

/// Recursive-descent JSON parser with line/column tracking.
class Parser {
public:
  explicit Parser(const std::string &text) : text_(text) {}

  StatusOr<Json> parseDocument() {
    Json value;
    DTCC_RETURN_IF_ERROR(parseValue(value, 0));
    skipSpace();
    if (pos_ != text_.size())
      return error("unexpected text after the JSON value");
    return value;
  }

private:
  Status error(const std::string &message) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return invalidArgument("line ", line, ", column ", column, ": ", message);
  }

  void skipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' ||
            text_[pos_] == '\r'))
      ++pos_;
  }

  bool consume(const char *word) {
    size_t n = std::strlen(word);
    if (text_.compare(pos_, n, word) != 0)
      return false;
    pos_ += n;
    return true;
  }

  Status parseValue(Json &out, int depth) {
    if (depth > 100)
      return error("nesting deeper than 100 levels");
    skipSpace();
    if (pos_ >= text_.size())
      return error("unexpected end of input");
    char c = text_[pos_];
    if (c == '{')
      return parseObject(out, depth);
    if (c == '[')
      return parseArray(out, depth);
    if (c == '"') {
      std::string s;
      DTCC_RETURN_IF_ERROR(parseString(s));
      out = Json(std::move(s));
      return Status::ok();
    }
    if (consume("true")) {
      out = Json(true);
      return Status::ok();
    }
    if (consume("false")) {
      out = Json(false);
      return Status::ok();
    }
    if (consume("null")) {
      out = Json();
      return Status::ok();
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      const char *begin = text_.c_str() + pos_;
      char *end = nullptr;
      double d = std::strtod(begin, &end);
      if (end == begin)
        return error("malformed number");
      pos_ += size_t(end - begin);
      out = Json(d);
      return Status::ok();
    }
    return error(std::string("unexpected character '") + c + "'");
  }

  Status parseString(std::string &out) {
    ++pos_; // opening quote
    while (pos_ < text_.size()) {
      char c = text_[pos_++];
      if (c == '"')
        return Status::ok();
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size())
        break;
      char e = text_[pos_++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'u': {
        if (pos_ + 4 > text_.size())
          return error("truncated \\u escape");
        unsigned code = unsigned(std::strtoul(text_.substr(pos_, 4).c_str(),
                                              nullptr, 16));
        pos_ += 4;
        // UTF-8 encode (surrogate pairs are kept as two code units).
        if (code < 0x80) {
          out += char(code);
        } else if (code < 0x800) {
          out += char(0xC0 | (code >> 6));
          out += char(0x80 | (code & 0x3F));
        } else {
          out += char(0xE0 | (code >> 12));
          out += char(0x80 | ((code >> 6) & 0x3F));
          out += char(0x80 | (code & 0x3F));
        }
        break;
      }
      default:
        return error(std::string("unknown escape '\\") + e + "'");
      }
    }
    return error("unterminated string");
  }

  Status parseArray(Json &out, int depth) {
    ++pos_;
    out = Json::array();
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return Status::ok();
    }
    while (true) {
      Json item;
      DTCC_RETURN_IF_ERROR(parseValue(item, depth + 1));
      out.push(std::move(item));
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return Status::ok();
      }
      return error("expected ',' or ']' in an array");
    }
  }

  Status parseObject(Json &out, int depth) {
    ++pos_;
    out = Json::object();
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return Status::ok();
    }
    while (true) {
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"')
        return error("expected a quoted key in an object");
      std::string key;
      DTCC_RETURN_IF_ERROR(parseString(key));
      if (out.find(key))
        return error("duplicate key '" + key + "'");
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':')
        return error("expected ':' after key '" + key + "'");
      ++pos_;
      Json value;
      DTCC_RETURN_IF_ERROR(parseValue(value, depth + 1));
      out.set(key, std::move(value));
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return Status::ok();
      }
      return error("expected ',' or '}' in an object");
    }
  }

  const std::string &text_;
  size_t pos_ = 0;
};

} // namespace

StatusOr<Json> Json::parse(const std::string &text) {
  return Parser(text).parseDocument();
}

//===----------------------------------------------------------------------===//
// YAML subset
//===----------------------------------------------------------------------===//

namespace {

struct YamlLine {
  int number;
  int indent;
  std::string key;
  std::string value; // empty: a nested mapping follows
  bool quoted = false;
};

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

/// Removes a trailing `# comment` that is outside quotes.
std::string stripComment(const std::string &s) {
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == quote)
        quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
      return s.substr(0, i);
    }
  }
  return s;
}

Json yamlScalar(const YamlLine &line) {
  if (line.quoted)
    return Json(line.value);
  const std::string &v = line.value;
  if (v == "true" || v == "True" || v == "yes")
    return Json(true);
  if (v == "false" || v == "False" || v == "no")
    return Json(false);
  if (v == "null" || v == "~")
    return Json();
  char *end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (!v.empty() && end == v.c_str() + v.size())
    return Json(d);
  return Json(v);
}

Status parseYamlBlock(const std::vector<YamlLine> &lines, size_t &index,
                      int indent, Json &out) {
  out = Json::object();
  while (index < lines.size()) {
    const YamlLine &line = lines[index];
    if (line.indent < indent)
      return Status::ok();
    if (line.indent > indent)
      return invalidArgument("line ", line.number,
                             ": unexpected indentation (expected ", indent,
                             " spaces, got ", line.indent, ")");
    if (out.find(line.key))
      return invalidArgument("line ", line.number, ": duplicate key '",
                             line.key, "'");
    ++index;
    if (!line.value.empty() || line.quoted) {
      out.set(line.key, yamlScalar(line));
      continue;
    }
    if (index < lines.size() && lines[index].indent > indent) {
      Json child;
      DTCC_RETURN_IF_ERROR(
          parseYamlBlock(lines, index, lines[index].indent, child));
      out.set(line.key, std::move(child));
    } else {
      out.set(line.key, Json());
    }
  }
  return Status::ok();
}

} // namespace

StatusOr<Json> parseYamlSubset(const std::string &text) {
  std::vector<YamlLine> lines;
  size_t start = 0;
  int number = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    std::string raw = text.substr(start, end - start);
    start = end + 1;
    ++number;
    std::string content = stripComment(raw);
    if (trim(content).empty() || trim(content) == "---")
      continue;
    if (content.find('\t') != std::string::npos &&
        content.find_first_not_of(" \t") > content.find('\t'))
      return invalidArgument("line ", number, ": tabs are not allowed in "
                                              "indentation");
    YamlLine line;
    line.number = number;
    line.indent = int(content.find_first_not_of(' '));
    std::string body = trim(content);
    if (body[0] == '-' || body[0] == '[' || body[0] == '{')
      return invalidArgument("line ", number,
                             ": sequences and flow style are not part of the "
                             "supported YAML subset; use JSON");
    size_t colon = body.find(':');
    if (colon == std::string::npos)
      return invalidArgument("line ", number, ": expected 'key: value'");
    line.key = trim(body.substr(0, colon));
    if (line.key.size() >= 2 &&
        (line.key.front() == '"' || line.key.front() == '\'') &&
        line.key.back() == line.key.front())
      line.key = line.key.substr(1, line.key.size() - 2);
    std::string value = trim(body.substr(colon + 1));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      line.quoted = true;
      value = value.substr(1, value.size() - 2);
    } else if (!value.empty() && (value[0] == '[' || value[0] == '{' ||
                                  value[0] == '|' || value[0] == '>')) {
      return invalidArgument("line ", number,
                             ": flow collections and block scalars are not "
                             "part of the supported YAML subset");
    }
    line.value = value;
    lines.push_back(line);
  }
  Json root = Json::object();
  if (lines.empty())
    return root;
  size_t index = 0;
  DTCC_RETURN_IF_ERROR(parseYamlBlock(lines, index, lines[0].indent, root));
  if (index != lines.size())
    return invalidArgument("line ", lines[index].number,
                           ": indentation does not match any enclosing key");
  return root;
}

} // namespace dtcc::planner
