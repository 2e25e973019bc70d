#pragma once
// DeepSpeed reads its config file with hjson, and real DeepSpeed configs rely on it. This turns
// such a text into strict JSON for the config reader, accepting the leniencies those files use:
//   - comments: `# ...` and `// ...` to the end of the line, `/* ... */`;
//   - a trailing comma before `}` or `]`;
//   - a line break in place of the comma between two members or elements.
// Nothing else of hjson (quoteless strings, unquoted keys, ''' strings) is accepted.
//
// The output keeps every line and column of the input: comments and trailing commas become
// spaces, and a missing comma is written right after the value it follows (where only blanks
// or a comment came next on that line). So a later syntax error's line and column are those of
// the file as written.

#include <string>

namespace zt::config_detail {

struct HjsonResult {
  std::string json;   // strict JSON with the input's line/column layout
  std::string error;  // "line L, column C: ..." when the text cannot be made JSON; else empty
};

HjsonResult hjson_to_json(const std::string& text);

}  // namespace zt::config_detail
