#include "data/text_reader.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <variant>

#include "base/error.h"

namespace zt::data {
namespace {

// A label value before string labels are mapped to ids.
using RawLabel = std::variant<int64_t, std::string>;

// Just enough JSON for one object per line: top-level string/number/bool fields are returned,
// nested values are parsed and skipped.
class JsonLine {
 public:
  JsonLine(const std::string& line, const std::string& where) : s_(line), where_(where) {}

  // Parses the object, keeping the fields in `wanted`.
  std::map<std::string, RawLabel> parse(const std::set<std::string>& wanted) {
    std::map<std::string, RawLabel> out;
    skip_ws();
    expect('{');
    skip_ws();
    if (peek() == '}') return out;
    while (true) {
      skip_ws();
      std::string key = parse_string();
      skip_ws();
      expect(':');
      skip_ws();
      const char c = peek();
      if (c == '"') {
        std::string v = parse_string();
        if (wanted.count(key)) out[key] = std::move(v);
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        const size_t start = pos_;
        while (pos_ < s_.size() &&
               std::string("+-.eE0123456789").find(s_[pos_]) != std::string::npos)
          ++pos_;
        std::string num = s_.substr(start, pos_ - start);
        if (wanted.count(key)) {
          size_t used = 0;
          int64_t v = 0;
          try {
            v = std::stoll(num, &used);
          } catch (const std::exception&) {
          }
          ZT_CHECK(used == num.size(), where_, ": field '", key, "' = ", num, " is not an integer");
          out[key] = v;
        }
      } else if (s_.compare(pos_, 4, "true") == 0) {
        pos_ += 4;
        if (wanted.count(key)) out[key] = int64_t{1};
      } else if (s_.compare(pos_, 5, "false") == 0) {
        pos_ += 5;
        if (wanted.count(key)) out[key] = int64_t{0};
      } else if (s_.compare(pos_, 4, "null") == 0) {
        pos_ += 4;
      } else {
        ZT_CHECK(!wanted.count(key), where_, ": field '", key,
                 "' must be a string, an integer or a boolean");
        skip_value();
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      break;
    }
    skip_ws();
    ZT_CHECK(pos_ == s_.size(), where_, ": trailing characters after the JSON object");
    return out;
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  void expect(char c) {
    ZT_CHECK(peek() == c, where_, ": invalid JSON: expected '", c, "' at column ", pos_ + 1);
    ++pos_;
  }
  static void put_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  uint32_t hex4() {
    ZT_CHECK(pos_ + 4 <= s_.size(), where_, ": invalid JSON: short \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<uint32_t>(c - 'A' + 10);
      else
        ZT_THROW(where_, ": invalid JSON: bad \\u escape");
    }
    return v;
  }
  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      ZT_CHECK(pos_ < s_.size(), where_, ": invalid JSON: unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      ZT_CHECK(pos_ < s_.size(), where_, ": invalid JSON: unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(pos_, 2, "\\u") == 0) {
            pos_ += 2;
            const uint32_t lo = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(cp, &out);
          break;
        }
        default: ZT_THROW(where_, ": invalid JSON: bad escape \\", e);
      }
    }
  }
  void skip_value() {
    // Objects and arrays: count brackets outside strings.
    int depth = 0;
    do {
      const char c = peek();
      ZT_CHECK(c != '\0', where_, ": invalid JSON: unterminated value");
      if (c == '"') {
        parse_string();
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') --depth;
      ++pos_;
    } while (depth > 0);
  }

  const std::string& s_;
  const std::string& where_;
  size_t pos_ = 0;
};

}  // namespace

TextFormat parse_text_format(const std::string& name) {
  if (name == "lines") return TextFormat::kLines;
  if (name == "jsonl") return TextFormat::kJsonl;
  if (name == "fortune") return TextFormat::kFortune;
  ZT_THROW("unknown input format '", name, "' (expected lines, jsonl or fortune)");
}

TextCorpus read_text_files(const std::vector<std::string>& paths,
                           const TextReaderOptions& options) {
  TextCorpus corpus;
  const size_t nl = options.label_fields.size();
  ZT_CHECK(nl == 0 || options.format == TextFormat::kJsonl, "label fields need the jsonl format");
  std::vector<std::vector<RawLabel>> raw;
  std::set<std::string> wanted(options.label_fields.begin(), options.label_fields.end());
  wanted.insert(options.text_field);

  for (const std::string& path : paths) {
    std::ifstream in(path);
    ZT_CHECK(in, "corpus ", path, ": cannot open");
    std::string line, entry;
    int64_t line_no = 0;
    auto flush_entry = [&] {
      if (!entry.empty()) corpus.texts.push_back(std::move(entry));
      entry.clear();
    };
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      switch (options.format) {
        case TextFormat::kLines:
          if (!line.empty()) corpus.texts.push_back(line);
          break;
        case TextFormat::kFortune:
          if (line == "%") {
            flush_entry();
          } else {
            const size_t b = line.find_first_not_of(" \t");
            if (b == std::string::npos) break;
            if (!entry.empty()) entry += ' ';
            entry.append(line, b, std::string::npos);
          }
          break;
        case TextFormat::kJsonl: {
          if (line.find_first_not_of(" \t") == std::string::npos) break;
          const std::string where = "corpus " + path + ":" + std::to_string(line_no);
          auto fields = JsonLine(line, where).parse(wanted);
          auto t = fields.find(options.text_field);
          ZT_CHECK(t != fields.end() && std::holds_alternative<std::string>(t->second), where,
                   ": string field '", options.text_field, "' is missing");
          std::vector<RawLabel> row;
          for (const auto& f : options.label_fields) {
            auto it = fields.find(f);
            ZT_CHECK(it != fields.end(), where, ": label field '", f, "' is missing");
            row.push_back(it->second);
          }
          corpus.texts.push_back(std::get<std::string>(t->second));
          raw.push_back(std::move(row));
          break;
        }
      }
    }
    if (options.format == TextFormat::kFortune) flush_entry();
    ZT_CHECK(!in.bad(), "corpus ", path, ": read error");
  }

  // String labels -> ids, per field, in sorted order so the mapping does not depend on file order.
  corpus.labels.assign(corpus.texts.size(), std::vector<int64_t>(nl));
  if (options.format != TextFormat::kJsonl) return corpus;
  for (size_t f = 0; f < nl; ++f) {
    std::set<std::string> values;
    bool any_int = false;
    for (const auto& row : raw) {
      if (auto* s = std::get_if<std::string>(&row[f]))
        values.insert(*s);
      else
        any_int = true;
    }
    ZT_CHECK(values.empty() || !any_int, "corpus: label field '", options.label_fields[f],
             "' mixes strings and integers");
    std::vector<std::string> vocab(values.begin(), values.end());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (auto* s = std::get_if<std::string>(&raw[i][f])) {
        corpus.labels[i][f] = std::lower_bound(vocab.begin(), vocab.end(), *s) - vocab.begin();
      } else {
        corpus.labels[i][f] = std::get<int64_t>(raw[i][f]);
      }
    }
    if (!vocab.empty()) corpus.label_vocab[options.label_fields[f]] = std::move(vocab);
  }
  return corpus;
}

}  // namespace zt::data
