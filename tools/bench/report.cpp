#include "bench/report.h"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "cuda/device.h"
#include "moefuse/error.h"
#include "moefuse_git_commit.h"

namespace moefuse::bench {
namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string cell_json(const Cell& c) {
  if (auto* s = std::get_if<std::string>(&c)) return "\"" + json_escape(*s) + "\"";
  if (auto* i = std::get_if<long long>(&c)) return std::to_string(*i);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", std::get<double>(c));
  return buf;
}

std::string cell_text(const Cell& c) {
  if (auto* s = std::get_if<std::string>(&c)) return *s;
  if (auto* i = std::get_if<long long>(&c)) return std::to_string(*i);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", std::get<double>(c));
  return buf;
}

}  // namespace

Report::Report(std::string title, std::vector<std::string> columns)
    : title_(std::move(title)), columns_(std::move(columns)) {}

void Report::add_row(std::vector<Cell> row) {
  MOEFUSE_EXPECT(row.size() == columns_.size(), "row",
                 std::to_string(columns_.size()) + " cells", std::to_string(row.size()));
  rows_.push_back(std::move(row));
}

void Report::set_meta(const std::string& key, const Cell& value) { meta_.emplace_back(key, value); }

void Report::print() const {
  std::vector<size_t> width(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    width[c] = columns_[c].size();
    for (const auto& r : rows_) width[c] = std::max(width[c], cell_text(r[c]).size());
  }
  std::printf("\n== %s\n", title_.c_str());
  for (const auto& [k, v] : meta_) std::printf("   %s: %s\n", k.c_str(), cell_text(v).c_str());
  for (size_t c = 0; c < columns_.size(); ++c)
    std::printf("%s%*s", c ? "  " : "", static_cast<int>(width[c]), columns_[c].c_str());
  std::printf("\n");
  for (const auto& r : rows_) {
    for (size_t c = 0; c < columns_.size(); ++c)
      std::printf("%s%*s", c ? "  " : "", static_cast<int>(width[c]), cell_text(r[c]).c_str());
    std::printf("\n");
  }
  std::fflush(stdout);
}

std::string Report::to_json() const {
  std::ostringstream o;
  o << "{\"title\":\"" << json_escape(title_) << "\",\"meta\":{";
  for (size_t i = 0; i < meta_.size(); ++i)
    o << (i ? "," : "") << "\"" << json_escape(meta_[i].first) << "\":" << cell_json(meta_[i].second);
  o << "},\"rows\":[";
  for (size_t r = 0; r < rows_.size(); ++r) {
    o << (r ? "," : "") << "{";
    for (size_t c = 0; c < columns_.size(); ++c)
      o << (c ? "," : "") << "\"" << json_escape(columns_[c]) << "\":" << cell_json(rows_[r][c]);
    o << "}";
  }
  o << "]}";
  return o.str();
}

void write_json_file(const std::string& path, const std::string& command,
                     const std::vector<const Report*>& reports) {
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string why;
  auto dev = cuda::current_device(&why);
  std::ofstream f(path);
  MOEFUSE_EXPECT(f.good(), "--json", "a writable file path", "'" + path + "'");
  f << "{\"date\":\"" << date << "\",\"gpu\":\""
    << json_escape(dev.ordinal >= 0 ? dev.name : "none (" + why + ")") << "\",\"sms\":" << dev.num_sms
    << ",\"commit\":\"" << MOEFUSE_GIT_COMMIT << "\",\"command\":\"" << json_escape(command)
    << "\",\"reports\":[";
  for (size_t i = 0; i < reports.size(); ++i) f << (i ? "," : "") << reports[i]->to_json();
  f << "]}\n";
}

std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

void progress(const std::string& what) {
  std::fprintf(stderr, "\r\033[K%s", what.c_str());
  std::fflush(stderr);
}

void progress_done() { std::fprintf(stderr, "\r\033[K"); }

}  // namespace moefuse::bench
