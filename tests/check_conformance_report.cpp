// Checks the reports kf-conformance writes: the JSON parses and has the structure the tool documents, the
// JUnit XML is well formed (XML 1.0: a declaration, one root element, properly nested elements, quoted
// attributes without duplicates, known entity and character references, valid UTF-8, no forbidden
// control characters), and the two agree (one testsuite per device, one testcase per case and per mask
// check, the same numbers of failures and skips, the totals on the root).
// Usage: check_conformance_report [--expect-failures] REPORT.json REPORT.xml
// Exit status 0 when every check holds; 77 (CTest's skip) when there is no JSON report (the run was
// skipped: no such device); else 1 with the first problem on stderr.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<Element> children;
  std::string text;
};

class XmlParser {
 public:
  explicit XmlParser(const std::string& s) : s_(s) {}

  Element document() {
    check_encoding();
    if (!starts("<?xml")) fail("no XML declaration");
    skip_past("?>");
    misc();
    if (!starts("<")) fail("no root element");
    Element root = element();
    misc();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) line += s_[k] == '\n';
    throw std::runtime_error("XML: " + what + " (line " + std::to_string(line) + ")");
  }
  bool starts(const char* p) const { return s_.compare(i_, std::strlen(p), p) == 0; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void skip_past(const char* end) {
    const size_t k = s_.find(end, i_);
    if (k == std::string::npos) fail(std::string("unterminated construct, no '") + end + "'");
    i_ = k + std::strlen(end);
  }
  void expect(char c) {
    if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  // Valid UTF-8 and no control characters other than tab, newline and carriage return.
  void check_encoding() {
    for (i_ = 0; i_ < s_.size();) {
      const unsigned char c = static_cast<unsigned char>(s_[i_]);
      const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (len == 0 || i_ + len > s_.size()) fail("invalid UTF-8");
      for (int k = 1; k < len; ++k)
        if ((static_cast<unsigned char>(s_[i_ + k]) & 0xC0) != 0x80) fail("invalid UTF-8");
      if (len == 1 && c < 0x20 && c != '\t' && c != '\n' && c != '\r') fail("a control character XML forbids");
      i_ += len;
    }
    i_ = 0;
  }
  // Comments, processing instructions and white space between elements.
  void misc() {
    for (;;) {
      skip_ws();
      if (starts("<!--")) skip_past("-->");
      else if (starts("<?")) skip_past("?>");
      else return;
    }
  }
  static bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
  std::string name() {
    if (i_ >= s_.size() || !name_start(s_[i_])) fail("expected a name");
    const size_t b = i_;
    while (i_ < s_.size() && (name_start(s_[i_]) || std::isdigit(static_cast<unsigned char>(s_[i_])) ||
                              s_[i_] == '-' || s_[i_] == '.'))
      ++i_;
    return s_.substr(b, i_ - b);
  }
  // After '&': a predefined entity or a character reference; returns its text.
  std::string reference() {
    const size_t end = s_.find(';', i_);
    if (end == std::string::npos || end - i_ > 12) fail("'&' that starts no reference");
    const std::string r = s_.substr(i_, end - i_);
    i_ = end + 1;
    static const std::map<std::string, std::string> named = {
        {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}};
    if (auto it = named.find(r); it != named.end()) return it->second;
    if (r.size() > 1 && r[0] == '#') {
      const bool hex = r[1] == 'x';
      const std::string digits = r.substr(hex ? 2 : 1);
      if (digits.empty() || digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") != std::string::npos)
        fail("bad character reference &" + r + ";");
      const unsigned long v = std::stoul(digits, nullptr, hex ? 16 : 10);
      if ((v < 0x20 && v != 9 && v != 10 && v != 13) || v > 0x10FFFF) fail("character reference to a forbidden character");
      return v < 0x80 ? std::string(1, char(v)) : std::string("?");
    }
    fail("unknown entity &" + r + ";");
  }
  Element element() {
    Element e;
    expect('<');
    e.name = name();
    for (;;) {
      const bool ws = i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]));
      skip_ws();
      if (starts("/>")) {
        i_ += 2;
        return e;
      }
      if (starts(">")) {
        ++i_;
        break;
      }
      if (!ws) fail("attributes must be separated by white space");
      const std::string a = name();
      skip_ws();
      expect('=');
      skip_ws();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) fail("attribute " + a + " is not quoted");
      const char q = s_[i_++];
      std::string v;
      while (i_ < s_.size() && s_[i_] != q) {
        if (s_[i_] == '<') fail("'<' in the value of attribute " + a);
        if (s_[i_] == '&') {
          ++i_;
          v += reference();
        } else {
          v += s_[i_++];
        }
      }
      expect(q);
      if (!e.attrs.emplace(a, v).second) fail("attribute " + a + " given twice on <" + e.name + ">");
    }
    for (;;) {
      if (i_ >= s_.size()) fail("<" + e.name + "> is never closed");
      if (starts("</")) {
        i_ += 2;
        const std::string n = name();
        if (n != e.name) fail("</" + n + "> closes <" + e.name + ">");
        skip_ws();
        expect('>');
        return e;
      }
      if (starts("<!--")) {
        skip_past("-->");
      } else if (starts("<![CDATA[")) {
        const size_t b = i_ + 9;
        skip_past("]]>");
        e.text += s_.substr(b, i_ - 3 - b);
      } else if (starts("<?")) {
        skip_past("?>");
      } else if (starts("<")) {
        e.children.push_back(element());
      } else if (s_[i_] == '&') {
        ++i_;
        e.text += reference();
      } else {
        if (starts("]]>")) fail("']]>' in text");
        e.text += s_[i_++];
      }
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

int attr_int(const Element& e, const std::string& a) {
  auto it = e.attrs.find(a);
  require(it != e.attrs.end(), "<" + e.name + "> has no attribute " + a);
  return std::stoi(it->second);
}

bool is_status(const nlohmann::json& v) {
  return v.is_string() && (v == "pass" || v == "fail" || v == "unsupported");
}

}  // namespace

int main(int argc, char** argv) {
  bool expect_failures = false;
  std::vector<std::string> files;
  for (int k = 1; k < argc; ++k) {
    if (std::string(argv[k]) == "--expect-failures") expect_failures = true;
    else files.push_back(argv[k]);
  }
  if (files.size() != 2) {
    std::fprintf(stderr, "usage: check_conformance_report [--expect-failures] REPORT.json REPORT.xml\n");
    return 2;
  }
  struct stat st;
  if (stat(files[0].c_str(), &st) != 0) {
    std::printf("check_conformance_report: no report %s: the run was skipped\n", files[0].c_str());
    return 77;
  }
  try {
    // The JSON report.
    const auto j = nlohmann::json::parse(read(files[0]));
    require(j.is_object() && j.value("tool", "") == "kf-conformance", "JSON: not a kf-conformance report");
    require(j.contains("devices") && j["devices"].is_array() && !j["devices"].empty(), "JSON: no devices");
    require(j.contains("summary") && j["summary"]["passed"].is_boolean(), "JSON: no summary.passed");
    int failures = 0, skipped = 0, errors = 0, tests = 0;
    std::vector<int> suite_tests;
    bool all_passed = true;
    for (const auto& d : j["devices"]) {
      for (const char* k : {"tag", "backend", "name", "vendor", "driver", "api_version"})
        require(d.contains(k) && d[k].is_string(), std::string("JSON: a device without '") + k + "'");
      require(d["counts"].is_object() && d["results"].is_array(), "JSON: device " + d["tag"].get<std::string>() +
                                                                      " has no counts or results");
      int n = d.contains("error") ? 1 : 0, fails = 0, fail_pairs = 0;
      errors += n;
      for (const auto& p : d["results"]) {
        require(p["op"].is_string() && p["dtype"].is_string() && is_status(p["status"]),
                "JSON: a result without op, dtype or status");
        fail_pairs += p["status"] == "fail";
        for (const char* list : {"cases", "masks"})
          for (const auto& c : p[list]) {
            ++n;
            require(c["case"].is_string() && is_status(c["status"]), "JSON: a case without label or status in " +
                                                                          p["op"].get<std::string>());
            if (c["status"] == "fail") {
              ++fails;
              require(c["message"].is_string() && !c["message"].get<std::string>().empty(),
                      "JSON: a failing case of " + p["op"].get<std::string>() + " without a message");
            }
            if (c["status"] == "unsupported") {
              ++skipped;
              require(c["reason"].is_string() && !c["reason"].get<std::string>().empty(),
                      "JSON: an unsupported case of " + p["op"].get<std::string>() + " without a reason");
            }
          }
      }
      require(d["counts"]["fail"] == fail_pairs, "JSON: counts.fail disagrees with the results of " +
                                                     d["tag"].get<std::string>());
      require(d["passed"] == (fail_pairs == 0 && !d.contains("error")), "JSON: passed disagrees with the results");
      all_passed = all_passed && d["passed"].get<bool>();
      failures += fails;
      tests += n;
      suite_tests.push_back(n);
    }
    require(j["summary"]["passed"] == all_passed, "JSON: summary.passed disagrees with the devices");
    if (expect_failures) require(!all_passed && failures > 0, "JSON: failures were expected, the report has none");
    else require(all_passed, "JSON: the report says the run failed");

    // The JUnit XML.
    const std::string xml = read(files[1]);
    const Element root = XmlParser(xml).document();
    require(root.name == "testsuites", "JUnit: the root element is <" + root.name + ">, not <testsuites>");
    require(root.children.size() == suite_tests.size(), "JUnit: " + std::to_string(root.children.size()) +
                                                            " testsuites for " + std::to_string(suite_tests.size()) +
                                                            " devices");
    int x_fail = 0, x_skip = 0, x_err = 0, x_tests = 0;
    for (size_t s = 0; s < root.children.size(); ++s) {
      const Element& suite = root.children[s];
      require(suite.name == "testsuite", "JUnit: <" + suite.name + "> under <testsuites>");
      require(suite.attrs.count("name") == 1, "JUnit: a testsuite without a name");
      int n = 0, f = 0, sk = 0, er = 0;
      for (const auto& c : suite.children) {
        if (c.name == "properties") continue;
        require(c.name == "testcase", "JUnit: <" + c.name + "> in a testsuite");
        for (const char* a : {"classname", "name", "time"})
          require(c.attrs.count(a) == 1, std::string("JUnit: a testcase without ") + a);
        ++n;
        for (const auto& r : c.children) {
          require(r.name == "failure" || r.name == "skipped" || r.name == "error", "JUnit: <" + r.name + "> in a testcase");
          require(r.attrs.count("message") == 1, "JUnit: <" + r.name + "> without a message");
          f += r.name == "failure", sk += r.name == "skipped", er += r.name == "error";
        }
      }
      require(n == suite_tests[s], "JUnit: testsuite " + suite.attrs.at("name") + " has " + std::to_string(n) +
                                       " testcases, the JSON " + std::to_string(suite_tests[s]));
      require(attr_int(suite, "tests") == n && attr_int(suite, "failures") == f && attr_int(suite, "skipped") == sk &&
                  attr_int(suite, "errors") == er,
              "JUnit: the counts on testsuite " + suite.attrs.at("name") + " disagree with its testcases");
      x_fail += f, x_skip += sk, x_err += er, x_tests += n;
    }
    require(x_tests == tests && x_fail == failures && x_skip == skipped && x_err == errors,
            "JUnit: failures, skips or errors disagree with the JSON");
    require(attr_int(root, "tests") == x_tests && attr_int(root, "failures") == x_fail &&
                attr_int(root, "skipped") == x_skip && attr_int(root, "errors") == x_err,
            "JUnit: the totals on <testsuites> disagree with its testsuites");
    std::printf("%s and %s agree: %zu device(s), %d testcases, %d failures, %d skipped, %d errors\n",
                files[0].c_str(), files[1].c_str(), suite_tests.size(), tests, failures, skipped, errors);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "check_conformance_report: %s\n", e.what());
    return 1;
  }
  return 0;
}
