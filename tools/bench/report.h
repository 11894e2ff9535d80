// Benchmark output: a fixed-column table on stdout and, with --json FILE, the same rows as JSON
// with their provenance (date, GPU, git commit, command line), for bench/results/.
#pragma once

#include <string>
#include <variant>
#include <vector>

namespace moefuse::bench {

using Cell = std::variant<std::string, double, long long>;

class Report {
 public:
  Report(std::string title, std::vector<std::string> columns);
  void add_row(std::vector<Cell> row);
  void set_meta(const std::string& key, const Cell& value);
  void print() const;
  // Appends this report to the JSON document named by `path` (the whole run's reports share one
  // file: write_json_file below).
  std::string to_json() const;

 private:
  std::string title_;
  std::vector<std::string> columns_;
  std::vector<std::vector<Cell>> rows_;
  std::vector<std::pair<std::string, Cell>> meta_;
};

// {"date":..., "gpu":..., "commit":..., "command":..., "reports":[...]} to `path`.
void write_json_file(const std::string& path, const std::string& command,
                     const std::vector<const Report*>& reports);

// The argv joined with spaces, for the JSON's "command" and the reproduce line.
std::string command_line(int argc, char** argv);

// "\r[stage 3/12] FC1 ..." on stderr, overwritten in place; done() ends the line.
void progress(const std::string& what);
void progress_done();

}  // namespace moefuse::bench
