// The HTML report of kf-bench: one self-contained file (inline CSS and SVG; no script, no network) drawn
// from kf-bench's JSON (bench/SCHEMA.md) and, optionally, other frameworks' JSON in the same schema.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kf::bench {

// The report of one kf-bench document `kf`, compared with the documents in `others` (torch_bench.py's
// "torch-eager" / "torch-compile" results, say). Its SVG charts carry the ids roofline, fraction-bars,
// fusion-bars and, when `others` is not empty, compare-bars. Throws nlohmann::json::exception or
// std::runtime_error on a document that does not follow the schema.
std::string render_report(const nlohmann::json& kf, const std::vector<nlohmann::json>& others);

// Reads a JSON document (std::runtime_error naming the file when it cannot be read or parsed).
nlohmann::json read_json(const std::string& path);

// Writes render_report(...) to `path` (std::runtime_error when the file cannot be written).
void write_report(const std::string& path, const nlohmann::json& kf, const std::vector<nlohmann::json>& others);

}  // namespace kf::bench
