// tests/docs/doc_links.cpp — the markdown checker of tests/docs/doc_links.h: finds the
// fenced blocks and the links of a doc, and checks each against the files.
#include "tests/docs/doc_links.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string_view>

namespace ember::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kElisionReach = 60;  // file lines an elision may skip, at most

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1));
}

// The lines of a regular file, or nothing when there is none.
std::optional<std::vector<std::string>> read_lines(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The end of the code span starting at s[i] (a run of backticks closed by a
// run of the same length within the paragraph), or just past the run when it
// is not closed (then the backticks are plain text).
size_t skip_code_span(const std::string& s, size_t i) {
  size_t run = 0;
  while (i + run < s.size() && s[i + run] == '`') ++run;
  const size_t paragraph_end = std::min(s.find("\n\n", i), s.size());
  for (size_t j = i + run; j < paragraph_end;) {
    if (s[j] != '`') { ++j; continue; }
    size_t r = 0;
    while (j + r < s.size() && s[j + r] == '`') ++r;
    if (r == run) return j + r;
    j += r;
  }
  return i + run;
}

class Checker {
 public:
  Checker(const std::string& root, const std::string& doc) : root_(root), doc_(doc) {}

  DocReport run() {
    const auto lines = read_lines(root_ / doc_);
    if (!lines) {
      error(0, "cannot read the doc");
      return report_;
    }
    // Fenced blocks are checked as quotes and blanked out of the prose.
    std::string prose;
    std::string fence;  // the open fence's backticks or tildes, empty outside a block
    std::string info;
    std::vector<std::string> block;
    int block_line = 0;
    for (size_t i = 0; i < lines->size(); ++i) {
      const std::string t = trim((*lines)[i]);
      if (fence.empty() && (t.starts_with("```") || t.starts_with("~~~"))) {
        fence = t.substr(0, t.find_first_not_of(t[0]));
        info = trim(t.substr(fence.size()));
        block.clear();
        block_line = int(i) + 2;
      } else if (!fence.empty() && t.starts_with(fence) && t.find_first_not_of(fence[0]) == std::string::npos) {
        if (!info.starts_with("console")) quote(block_line, block);
        fence.clear();
      } else if (!fence.empty()) {
        block.push_back((*lines)[i]);
      } else {
        prose += (*lines)[i];
      }
      prose += '\n';
    }
    if (!fence.empty()) error(block_line - 1, "code fence " + fence + " is never closed");
    links(prose);
    return report_;
  }

 private:
  void error(int line, const std::string& what) {
    report_.errors.push_back(doc_ + ":" + std::to_string(line) + ": " + what);
  }

  // Every [text](target) of the prose, outside code spans.
  void links(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
      if (s[i] == '`') { i = skip_code_span(s, i); continue; }
      if (s[i] == '\\') { i += 2; continue; }
      if (s[i] != '[') { ++i; continue; }
      // The matching ']' (code spans and nested brackets inside), then '('.
      size_t j = i + 1;
      for (int depth = 1; j < s.size() && depth > 0;) {
        if (s[j] == '`') { j = skip_code_span(s, j); continue; }
        if (s.compare(j, 2, "\n\n") == 0) break;
        depth += s[j] == '[' ? 1 : s[j] == ']' ? -1 : 0;
        ++j;
      }
      const size_t close = s.find(')', j);
      if (j >= s.size() || s[j - 1] != ']' || s[j] != '(' || close == std::string::npos) { ++i; continue; }
      std::string text = s.substr(i + 1, j - i - 2);
      std::replace(text.begin(), text.end(), '\n', ' ');
      std::string target = trim(s.substr(j + 1, close - j - 1));
      target = target.substr(0, target.find_first_of(" \t\n"));  // drop a "title"
      if (target.size() > 1 && target.front() == '<' && target.back() == '>') target = target.substr(1, target.size() - 2);
      link(1 + int(std::count(s.begin(), s.begin() + i, '\n')), text, target);
      i = close + 1;
    }
  }

  void link(int line, const std::string& text, const std::string& target) {
    if (target.empty() || target[0] == '#' || target.find("://") != std::string::npos ||
        target.starts_with("mailto:"))
      return;
    const size_t hash = target.find('#');
    const std::string path = target.substr(0, hash);
    const std::string anchor = hash == std::string::npos ? "" : target.substr(hash + 1);
    const fs::path rel = (fs::path(doc_).parent_path() / path).lexically_normal();
    if (rel.empty() || *rel.begin() == "..") return error(line, target + ": points outside the repository");
    const bool line_link = anchor.size() > 1 && anchor[0] == 'L' && std::isdigit(static_cast<unsigned char>(anchor[1]));
    if (!line_link) {
      ++report_.file_links;
      if (std::error_code ec; !fs::exists(root_ / rel, ec)) error(line, target + ": no such file");
      return;
    }
    ++report_.line_links;
    static const std::regex range(R"(L(\d+)(?:-L(\d+))?)"), code_span(R"(`([^`]+)`)");
    std::smatch m, code;
    if (!std::regex_match(anchor, m, range))
      return error(line, target + ": a line anchor is #L<n> or #L<n>-L<m>");
    const std::string trimmed = trim(text);
    if (!std::regex_match(trimmed, code, code_span))
      return error(line, target + ": link text '" + text +
                             "' is not one code span: every line link must name the symbol it points at");
    const auto file = read_lines(root_ / rel);
    if (!file) return error(line, target + ": no such file");
    const size_t n = std::stoul(m[1]), last = m[2].matched ? std::stoul(m[2]) : n;
    const std::string symbol = code[1];
    if (n == 0 || last < n)
      error(line, target + ": not a line range");
    else if (last > file->size())
      error(line, target + ": line " + std::to_string(last) + " is past the end of the file (" +
                      std::to_string(file->size()) + " lines)");
    else if ((*file)[n - 1].find(symbol) == std::string::npos)
      error(line, target + ": line " + std::to_string(n) + " does not contain '" + symbol + "'" +
                      moved_hint(*file, n, [&](const std::string& l) { return l.find(symbol) != std::string::npos; }));
  }

  // " (the nearest line with it: 212)" when some line of the file matches,
  // so that a doc whose code moved is quick to fix; else "".
  template <typename Match>
  static std::string moved_hint(const std::vector<std::string>& file, size_t n, Match&& match) {
    for (size_t d = 1; d <= file.size(); ++d)
      for (const size_t at : {n + d, n - d})  // 1-based; below 1 wraps past the end and is skipped
        if (at >= 1 && at <= file.size() && match(file[at - 1])) return " (the nearest line with it: " + std::to_string(at) + ")";
    return "";
  }

  // A fenced block whose first line is `// <path>:<n>` or `# <path>:<n>`;
  // `line` is the doc line of that first line.
  void quote(int line, const std::vector<std::string>& block) {
    static const std::regex header(R"((?://|#) (\S+):(\d+))");
    std::smatch m;
    const std::string first = block.empty() ? "" : trim(block[0]);
    if (!std::regex_match(first, m, header)) return;
    ++report_.quotes;
    const std::string where = m[1].str() + ":" + m[2].str();
    const auto file = read_lines(root_ / m[1].str());
    if (!file) return error(line, where + ": no such file");
    const auto is_elision = [](const std::string& t) { return t == "..." || t == "// ..." || t == "# ..."; };
    size_t next = std::stoul(m[2]) - 1;  // index of the file line the next quoted line must be
    bool skipping = false;
    for (size_t k = 1; k < block.size(); ++k) {
      const int at = line + int(k);
      const std::string want = trim(block[k]);
      if (is_elision(want)) {
        if (k == 1) return error(at, where + ": a quote starts at its line, not with '...'");
        skipping = true;
        continue;
      }
      if (skipping) {
        const size_t end = std::min(file->size(), next + kElisionReach);
        size_t j = next;
        while (j < end && trim((*file)[j]) != want) ++j;
        if (j == end)
          return error(at, where + ": '" + want + "' is not in the " + std::to_string(kElisionReach) +
                               " lines after line " + std::to_string(next));
        next = j;
        skipping = false;
      }
      if (next >= file->size())
        return error(at, where + ": the doc has '" + want + "', the file ends at line " + std::to_string(file->size()));
      if (const std::string have = trim((*file)[next]); have != want)
        return error(at, where + ": the doc has '" + want + "', line " + std::to_string(next + 1) + " is '" + have + "'" +
                             (k == 1 ? moved_hint(*file, next + 1, [&](const std::string& l) { return trim(l) == want; })
                                     : std::string()));
      ++next;
    }
  }

  const fs::path root_;
  const std::string doc_;
  DocReport report_;
};

}  // namespace

DocReport check_doc(const std::string& root, const std::string& doc) { return Checker(root, doc).run(); }

}  // namespace ember::testing
