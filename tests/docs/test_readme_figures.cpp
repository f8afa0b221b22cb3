// tests/docs/test_readme_figures.cpp — every figure README.md quotes is a
// measurement recorded in docs/benchmarks.md, so the front page cannot carry
// a number that no row backs (or one a newer row replaced without the
// README following).
//
// What counts as a figure: a number in README.md's prose (tables and
// headings included) followed by a unit:
//   - directly attached: `%` (93.55%) or `x` not followed by a letter or digit
//     (1.56x; 3x3, 2x2 and x86-64 are not figures);
//   - after one space or line break: img/s, samples/s, GFLOP/s, TFLOP/s,
//     GB/s, MB/s, M/s, GiB, MiB, KiB, GB, MB, KB, ms, us, ns, s, seconds,
//     min, minutes, h, hours (952 img/s, 12 min 32 s is two figures: 12 min
//     and 32 s), the unit ending where a word would.
// The number is digits with an optional fraction (93.55), thousands written
// 1,024, or a range (0.94-0.97 GB/s, one figure). It starts a word: digits
// glued to letters or joined by - / ^ : , to a word or number (ResNet-50,
// top-5, H200, 1/2, 1024^3, 5,6,7) are names and lists, not figures.
// Not prose, so never figures: fenced code blocks, inline code spans (the
// command lines), link targets, URLs, HTML tags and comments. A number right
// after a comparison is a bound, not a measurement: after <, >, <=, >=, ≤, ≥
// or the words "at most", "at least", "under", "within", "up to"
// ("make test takes at most 10 minutes").
//
// A figure is in docs/benchmarks.md when its text, written as above (one
// space between number and a spelled unit), occurs there with whitespace
// runs read as one space and is not the tail of a longer number ("1.56x" is
// not found in "11.56x"). Each one missing is one line:
//   README.md:12: figure '1.56x' is not in docs/benchmarks.md
// The README's links to rows, docs/benchmarks.md#ID, must name an
// `<a id="ID">` of the page. Tests run from the repository's root.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Figure {
  int line = 0;      // 1-based line of README.md where the number starts
  std::string text;  // "93.55%", "1.56x", "952 img/s", "0.94-0.97 GB/s"
};

bool is_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Overwrites s[from, to) with spaces, keeping line breaks (line numbers hold).
void blank(std::string& s, size_t from, size_t to) {
  for (size_t i = from; i < to && i < s.size(); ++i)
    if (s[i] != '\n') s[i] = ' ';
}

size_t line_end(const std::string& s, size_t i) {
  const size_t e = s.find('\n', i);
  return e == std::string::npos ? s.size() : e;
}

// The markdown with everything that is not prose blanked: fenced blocks,
// code spans, link targets, URLs, HTML comments and tags.
std::string prose_only(std::string s) {
  // Fenced code blocks: a line opening with ``` or ~~~ (up to 3 spaces in)
  // to the line that closes it with at least as many of the same character.
  for (size_t at = 0; at < s.size();) {
    const size_t end = line_end(s, at);
    size_t i = at;
    while (i < end && i - at < 3 && s[i] == ' ') ++i;
    const char fence = i < end ? s[i] : '\0';
    size_t n = 0;
    while (i + n < end && s[i + n] == fence) ++n;
    if ((fence == '`' || fence == '~') && n >= 3) {
      size_t close = end;
      for (size_t next = end + 1; next < s.size(); next = line_end(s, next) + 1) {
        const size_t e = line_end(s, next);
        size_t j = next;
        while (j < e && j - next < 3 && s[j] == ' ') ++j;
        size_t m = 0;
        while (j + m < e && s[j + m] == fence) ++m;
        close = e;
        if (m >= n) break;
      }
      blank(s, at, close);
      at = close + 1;
    } else {
      at = end + 1;
    }
  }
  // HTML comments.
  for (size_t i = s.find("<!--"); i != std::string::npos; i = s.find("<!--", i)) {
    const size_t e = s.find("-->", i);
    const size_t to = e == std::string::npos ? s.size() : e + 3;
    blank(s, i, to);
    i = to;
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '`') {  // a code span: a run of n backticks to the next run of exactly n
      size_t n = 1;
      while (i + n < s.size() && s[i + n] == '`') ++n;
      for (size_t j = s.find(std::string(n, '`'), i + n); j != std::string::npos;
           j = s.find(std::string(n, '`'), j + 1)) {
        size_t m = n;
        while (j + m < s.size() && s[j + m] == '`') ++m;
        if (j > 0 && s[j - 1] == '`') continue;
        if (m != n) {
          j += m - 1;
          continue;
        }
        blank(s, i, j + n);
        break;
      }
      i += n - 1;
    } else if (s[i] == ']' && i + 1 < s.size() && s[i + 1] == '(') {  // a link's target
      const size_t e = s.find(')', i + 2);
      if (e != std::string::npos && s.find('\n', i) > e) blank(s, i + 1, e + 1);
    } else if (s.compare(i, 7, "http://") == 0 || s.compare(i, 8, "https://") == 0) {
      size_t e = i;
      while (e < s.size() && !is_space(s[e]) && s[e] != ')' && s[e] != '>') ++e;
      blank(s, i, e);
    } else if (s[i] == '<' && i + 1 < s.size() &&
               (std::isalpha(static_cast<unsigned char>(s[i + 1])) || s[i + 1] == '/')) {
      const size_t e = s.find('>', i);  // an HTML tag such as <a id="x"> (not "<=", "< 10")
      if (e != std::string::npos && s.find('\n', i) > e) blank(s, i, e + 1);
    }
  }
  return s;
}

// The canonical text of the number at s[i] (a range is one number), and
// where it ends; empty when s[i] does not start one.
std::string read_number(const std::string& s, size_t i, size_t& end) {
  const auto one = [&](size_t at) -> size_t {  // end of digits[,ddd...][.digits] from `at`
    size_t j = at;
    while (j < s.size() && is_digit(s[j])) ++j;
    while (j + 3 < s.size() && s[j] == ',' && is_digit(s[j + 1]) && is_digit(s[j + 2]) && is_digit(s[j + 3]) &&
           (j + 4 >= s.size() || !is_digit(s[j + 4])))
      j += 4;
    if (j + 1 < s.size() && s[j] == '.' && is_digit(s[j + 1])) {
      ++j;
      while (j < s.size() && is_digit(s[j])) ++j;
    }
    return j;
  };
  end = one(i);
  if (end < s.size() && s[end] == '-' && end + 1 < s.size() && is_digit(s[end + 1])) end = one(end + 1);
  return s.substr(i, end - i);
}

// Whether the number at s[i] starts a word (not part of a name, list or path).
bool starts_word(const std::string& s, size_t i) {
  if (i == 0) return true;
  const char p = s[i - 1];
  if (is_alnum(p) || p == '_' || p == '.' || p == '#' || p == '$') return false;
  if ((p == '-' || p == '/' || p == '^' || p == ':' || p == ',') && i >= 2 && is_alnum(s[i - 2])) return false;
  return true;
}

// Whether the number at s[i] is a bound: right after a comparison sign or word.
bool after_comparison(const std::string& s, size_t i) {
  size_t j = i;
  while (j > 0 && (s[j - 1] == ' ' || s[j - 1] == '\t')) --j;
  const std::string_view before(s.data(), j);
  if (before.ends_with("<") || before.ends_with(">") || before.ends_with("<=") || before.ends_with(">=") ||
      before.ends_with("\u2264") || before.ends_with("\u2265"))
    return true;
  for (const std::string_view word : {"at most", "at least", "under", "within", "up to"}) {
    if (before.size() < word.size()) continue;
    const size_t at = before.size() - word.size();
    if (at > 0 && is_alnum(before[at - 1])) continue;
    bool same = true;
    for (size_t k = 0; k < word.size(); ++k)
      same = same && std::tolower(static_cast<unsigned char>(before[at + k])) == word[k];
    if (same) return true;
  }
  return false;
}

// The unit after a number ending at s[end], "" if none: "%", "x" or " img/s".
std::string read_unit(const std::string& s, size_t end) {
  if (end < s.size() && s[end] == '%') return "%";
  if (end < s.size() && s[end] == 'x' && (end + 1 >= s.size() || !is_alnum(s[end + 1]))) return "x";
  if (end >= s.size() || (s[end] != ' ' && s[end] != '\n')) return "";
  const size_t at = end + 1;
  // Longest first where one unit starts another (minutes before min, ms before s).
  static constexpr std::array<std::string_view, 23> units = {
      "samples/s", "GFLOP/s", "TFLOP/s", "seconds", "minutes", "img/s", "hours", "GB/s", "MB/s", "M/s", "GiB", "MiB",
      "KiB",       "min",     "GB",      "MB",      "KB",      "ms",    "us",    "ns",   "s",    "h",   "\u00b5s"};
  for (const std::string_view u : units) {
    if (s.compare(at, u.size(), u) != 0) continue;
    const size_t after = at + u.size();
    if (after < s.size() && (is_alnum(s[after]) || s[after] == '/' || s[after] == '_')) continue;
    return " " + std::string(u);
  }
  return "";
}

// Every figure of a README's prose, in order.
std::vector<Figure> extract_figures(const std::string& markdown) {
  const std::string s = prose_only(markdown);
  std::vector<Figure> figures;
  int line = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n') {
      ++line;
      continue;
    }
    if (!is_digit(s[i]) || !starts_word(s, i)) continue;
    size_t end = 0;
    const std::string number = read_number(s, i, end);
    const std::string unit = read_unit(s, end);
    if (!unit.empty() && !after_comparison(s, i)) figures.push_back({line, number + unit});
    for (; i + 1 < end; ++i)
      if (s[i + 1] == '\n') ++line;
  }
  return figures;
}

// Whitespace runs as one space.
std::string squeeze(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (is_space(c)) {
      if (out.empty() || out.back() != ' ') out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// Whether `figure` occurs in `text` (already squeezed), not as the tail of a longer number.
bool contains_figure(const std::string& text, const std::string& figure) {
  for (size_t at = text.find(figure); at != std::string::npos; at = text.find(figure, at + 1)) {
    if (at > 0 && (is_digit(text[at - 1]) || text[at - 1] == '.' || text[at - 1] == ',')) continue;
    const size_t after = at + figure.size();  // "12 min" is not in "12 minutes", "2.5x" not in "2.5x3"
    if (is_alnum(figure.back()) && after < text.size() && is_alnum(text[after])) continue;
    return true;
  }
  return false;
}

// One line per figure of `readme` that `benchmarks` lacks, and per link to a
// row of benchmarks that names no anchor of it.
std::vector<std::string> check_readme(const std::string& readme, const std::string& benchmarks,
                                      const std::string& readme_name = "README.md",
                                      const std::string& benchmarks_name = "docs/benchmarks.md") {
  std::vector<std::string> errors;
  const std::string text = squeeze(benchmarks);
  for (const Figure& f : extract_figures(readme))
    if (!contains_figure(text, f.text))
      errors.push_back(readme_name + ":" + std::to_string(f.line) + ": figure '" + f.text + "' is not in " +
                       benchmarks_name);
  const std::string link = benchmarks_name + "#";
  for (size_t at = readme.find(link); at != std::string::npos; at = readme.find(link, at + 1)) {
    size_t e = at + link.size();
    while (e < readme.size() && (is_alnum(readme[e]) || readme[e] == '-' || readme[e] == '_')) ++e;
    const std::string id = readme.substr(at + link.size(), e - at - link.size());
    if (benchmarks.find("id=\"" + id + "\"") == std::string::npos) {
      const int line = 1 + int(std::count(readme.begin(), readme.begin() + std::ptrdiff_t(at), '\n'));
      errors.push_back(readme_name + ":" + std::to_string(line) + ": link " + link + id + ": no <a id=\"" + id +
                       "\"> in " + benchmarks_name);
    }
  }
  return errors;
}

std::string figure_texts(const std::vector<Figure>& figures) {
  std::string out;
  for (const Figure& f : figures) out += std::to_string(f.line) + ":" + f.text + "\n";
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

TEST_CASE("readme figures: numbers with units are figures, names, code and bounds are not") {
  CHECK(figure_texts(extract_figures("ember reaches **93.55%** in 12 min 32 s at 952 img/s: 1.56x PyTorch\n"
                                     "SGEMM 1.14x / 1.06x, 44.2 TFLOP/s, 2.08-2.42 GB/s, 1,024 MiB, 0.40 s\n")) ==
        "1:93.55%\n1:12 min\n1:32 s\n1:952 img/s\n1:1.56x\n"
        "2:1.14x\n2:1.06x\n2:44.2 TFLOP/s\n2:2.08-2.42 GB/s\n2:1,024 MiB\n2:0.40 s\n");
  // Names, shapes, lists and counts without a unit.
  CHECK(extract_figures("ResNet-50 on an H200, top-5, 3x3 and F(2x2, 3x3) tiles, x86-64, 1024^3, 1/2 scale, "
                        "classes 5,6,7, 10 epochs on 2 cores, 505,176 assertions, 16 sectors, 2 hosts\n")
            .empty());
  // Code, link targets, URLs, tags and comments.
  CHECK(extract_figures("```sh\nbuild/train_resnet  # 5.5x faster, 17 min\n```\n"
                        "run `ROUNDS=3 x 1.5x` then [the row](docs/b.md#r-2.5x) or https://e.org/3.5x\n"
                        "<a id=\"t-9%\"></a> <!-- 12 s -->\n~~~\n4 ms\n~~~\n")
            .empty());
  // Bounds.
  CHECK(extract_figures("at most 10 minutes, within 30 min, <= 5 s, >= 92%, \u2264 3x, up to 2 GB, under 1 h\n")
            .empty());
  // A spelled unit after a line break; line numbers after code blocks and spans.
  CHECK(figure_texts(extract_figures("```\na\nb\n```\nabout 952\nimg/s and `x` 7%\n")) == "5:952 img/s\n6:7%\n");
}

TEST_CASE("readme figures: a figure missing from the benchmarks is one line naming it") {
  const std::string readme = "# ember\n\n93.55% in 12 min 32 s, 1.56x and 2.01x PyTorch, `3.5x` in code\n";
  const std::string benchmarks = "| make train | **93.55%** (top-5) in 12 min\n32 s |\n| r20 | 11.56x |\n";
  CHECK(joined(check_readme(readme, benchmarks)) ==
        "README.md:3: figure '1.56x' is not in docs/benchmarks.md\n"
        "README.md:3: figure '2.01x' is not in docs/benchmarks.md\n");
  CHECK(check_readme(readme, benchmarks + "| x | 1.56x | 2.01x |\n").empty());
  // Links to rows name anchors of the page.
  CHECK(joined(check_readme("[row](docs/benchmarks.md#make-train)\n\n[gone](docs/benchmarks.md#old-row)\n",
                            "| <a id=\"make-train\"></a>make train |\n")) ==
        "README.md:3: link docs/benchmarks.md#old-row: no <a id=\"old-row\"> in docs/benchmarks.md\n");
}

TEST_CASE("readme figures: every figure README.md quotes is in docs/benchmarks.md") {
  REQUIRE_MESSAGE(fs::exists("README.md"), "run the tests from the repository's root");
  REQUIRE_MESSAGE(fs::exists("docs/benchmarks.md"), "docs/benchmarks.md is missing");
  const std::string readme = read_text("README.md");
  const std::vector<Figure> figures = extract_figures(readme);
  CHECK_MESSAGE(!figures.empty(), "README.md: no figures found in it: is the extractor broken?");
  for (const std::string& e : check_readme(readme, read_text("docs/benchmarks.md"))) FAIL_CHECK(e);
  MESSAGE("README.md quotes " << figures.size() << " figures");
}
