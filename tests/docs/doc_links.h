// tests/docs/doc_links.h — checks that a markdown doc still points at the code it
// describes (tests/docs/test_guide.cpp runs it on README.md and docs/*.md):
//
//   [`symbol`](../ops/ops.h#L40)   line link (#L<n> or #L<n>-L<m>, relative to
//                                  the doc's folder): the file has line n and
//                                  line n contains `symbol`; the text of a line
//                                  link must be exactly one code span
//   [any text](../ops/ops.h)       file link: the file exists (http(s), mailto
//                                  and #anchor-only links are not checked)
//   ```cpp                         quoted code: a fenced block whose first line
//   // ops/ops.h:40                is `// <path>:<n>` or `# <path>:<n>` (path
//   Tensor conv2d(...);            from the repo root); its other lines are the
//   ...                            file's lines from line n on, compared with
//   ```                            surrounding spaces trimmed; a line `...`
//                                  (`// ...`, `# ...`) skips up to 60 file lines
//
// Links inside code spans and fenced blocks are not links. Every error is one
// line: "docs/guide.md:57: ../ops/ops.h#L40: line 40 does not contain 'conv2d'".
#pragma once
#include <string>
#include <vector>

namespace ember::testing {

struct DocReport {
  int line_links = 0;  // links with #L<n>
  int file_links = 0;  // other links to files of the repo
  int quotes = 0;      // quoted code blocks
  std::vector<std::string> errors;
};

// Checks `doc`, a path relative to `root` ("docs/guide.md", "README.md").
DocReport check_doc(const std::string& root, const std::string& doc);

}  // namespace ember::testing
