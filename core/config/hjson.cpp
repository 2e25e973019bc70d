#include "core/config/hjson.h"

#include <cstddef>

#include "base/error.h"

namespace zt::config_detail {
namespace {

// What the last significant character of the output was, for the comma rules.
enum class Last { kNone, kOpen, kColon, kComma, kValue };

bool is_blank(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

bool is_structural(char ch) {
  return ch == '{' || ch == '}' || ch == '[' || ch == ']' || ch == ':' || ch == ',' || ch == '"';
}

class Converter {
 public:
  explicit Converter(const std::string& in) : in_(in) { out_.reserve(in.size() + 16); }

  HjsonResult run() {
    while (i_ < in_.size() && error_.empty()) step();
    HjsonResult r;
    if (error_.empty()) r.json = std::move(out_);
    r.error = error_;
    return r;
  }

 private:
  void step() {
    const char ch = in_[i_];
    if (ch == '\n') newline_since_ = true;
    if (is_blank(ch)) {
      copy();
      return;
    }
    if (ch == '#' || (ch == '/' && peek(1) == '/')) {
      while (i_ < in_.size() && in_[i_] != '\n') blank();
      return;
    }
    if (ch == '/' && peek(1) == '*') {
      block_comment();
      return;
    }
    if (ch == '}' || ch == ']') {
      // A trailing comma: hjson drops it.
      if (last_ == Last::kComma) out_[last_pos_] = ' ';
      mark(Last::kValue);
      copy();
      value_end_ = out_.size();  // a closed block or list is a value
      return;
    }
    if (ch == ',') {
      mark(Last::kComma);
      copy();
      return;
    }
    if (ch == ':') {
      mark(Last::kColon);
      copy();
      return;
    }
    // A value or key starts here: after a value and a line break, the comma was left out.
    if (last_ == Last::kValue && newline_since_) out_.insert(value_end_, 1, ',');
    if (ch == '{' || ch == '[') {
      mark(Last::kOpen);
      copy();
      return;
    }
    if (ch == '"') {
      string();
    } else {
      while (i_ < in_.size() && !is_blank(in_[i_]) && !is_structural(in_[i_]) &&
             !(in_[i_] == '/' && (peek(1) == '/' || peek(1) == '*')) && in_[i_] != '#') {
        copy();
      }
    }
    last_ = Last::kValue;
    value_end_ = out_.size();
    newline_since_ = false;
  }

  void string() {
    const size_t start_line = line_, start_col = col_;
    copy();  // opening quote
    while (i_ < in_.size()) {
      const char ch = in_[i_];
      if (ch == '\\') {
        copy();
        if (i_ < in_.size()) copy();
        continue;
      }
      if (ch == '\n') break;
      copy();
      if (ch == '"') return;
    }
    error_ = detail::str("line ", start_line, ", column ", start_col,
                         ": JSON syntax error: string not closed on its line");
  }

  void block_comment() {
    const size_t start_line = line_, start_col = col_;
    blank();
    blank();
    while (i_ < in_.size()) {
      if (in_[i_] == '*' && peek(1) == '/') {
        blank();
        blank();
        return;
      }
      if (in_[i_] == '\n') newline_since_ = true;
      blank();
    }
    error_ = detail::str("line ", start_line, ", column ", start_col,
                         ": JSON syntax error: /* comment not closed");
  }

  void mark(Last kind) {
    last_ = kind;
    last_pos_ = out_.size();
    newline_since_ = false;
  }

  char peek(size_t ahead) const { return i_ + ahead < in_.size() ? in_[i_ + ahead] : '\0'; }

  // Copies the current input character (or writes a blank for it, keeping line breaks).
  void copy() { emit(in_[i_]); }
  void blank() { emit(in_[i_] == '\n' || in_[i_] == '\t' ? in_[i_] : ' '); }
  void emit(char out) {
    out_ += out;
    if (in_[i_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++i_;
  }

  const std::string& in_;
  std::string out_;
  std::string error_;
  size_t i_ = 0;
  size_t line_ = 1;
  size_t col_ = 1;
  Last last_ = Last::kNone;
  size_t last_pos_ = 0;   // output index of the last structural character
  size_t value_end_ = 0;  // output index just after the last value
  bool newline_since_ = false;
};

}  // namespace

HjsonResult hjson_to_json(const std::string& text) {
  return Converter(text).run();
}

}  // namespace zt::config_detail
