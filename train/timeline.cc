// Chrome trace JSON writer (see timeline.h).
#include "train/timeline.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "train/file_util.h"

namespace spire {
namespace {

/// `s` as a JSON string literal.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

/// Microseconds with nanosecond digits (the format's unit is the microsecond).
std::string micros(int64_t unix_us, int64_t ns) {
  const int64_t total_ns = unix_us * 1000 + ns;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(total_ns / 1000),
                static_cast<long long>(total_ns % 1000));
  return buf;
}

/// One trace row per lane device: lanes of different runs with the same device (and the
/// same occurrence of it, for a device with several lanes) share a row, whatever their lane
/// index in each run's plan. rows[step][lane] is the row; labels[row] its name.
struct Rows {
  std::vector<std::vector<int>> of;
  std::vector<std::string> labels;
};
Rows trace_rows(const std::vector<StepStats>& steps) {
  Rows r;
  std::map<std::pair<std::string, int>, int> ids;
  for (const StepStats& s : steps) {
    std::map<std::string, int> seen;
    std::vector<int> lanes;
    for (const std::string& device : s.lane_devices) {
      const int occurrence = seen[device]++;
      auto [it, fresh] = ids.emplace(std::make_pair(device, occurrence), static_cast<int>(r.labels.size()));
      if (fresh)
        r.labels.push_back(occurrence == 0 ? device : str_cat(device, " (", occurrence + 1, ")"));
      lanes.push_back(it->second);
    }
    r.of.push_back(std::move(lanes));
  }
  return r;
}

/// The row of event e of step k (an unknown lane gets a row past the others).
int row_of(const Rows& rows, size_t k, const TraceEvent& e) {
  const auto& lanes = rows.of[k];
  return e.lane >= 0 && static_cast<size_t>(e.lane) < lanes.size() ? lanes[static_cast<size_t>(e.lane)]
                                                                  : static_cast<int>(rows.labels.size());
}

}  // namespace

std::string chrome_trace_json(const std::vector<StepStats>& steps, int pid,
                              const std::string& process_name) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto begin_event = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  const std::string p = std::to_string(pid);
  begin_event();
  out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + p +
         ",\"args\":{\"name\":" + json_string(process_name) + "}}";
  const Rows rows = trace_rows(steps);
  bool other = false;  // an event on a lane its run does not list
  for (size_t k = 0; k < steps.size(); ++k)
    for (const TraceEvent& e : steps[k].events)
      other = other || row_of(rows, k, e) == static_cast<int>(rows.labels.size());
  for (size_t row = 0; row < rows.labels.size() + (other ? 1 : 0); ++row) {
    const std::string tid = std::to_string(row);
    const std::string label = row < rows.labels.size() ? rows.labels[row] : "other";
    begin_event();
    out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + p + ",\"tid\":" + tid +
           ",\"args\":{\"name\":" + json_string(label) + "}}";
    begin_event();
    out += "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + p + ",\"tid\":" + tid +
           ",\"args\":{\"sort_index\":" + tid + "}}";
  }
  for (size_t k = 0; k < steps.size(); ++k) {
    const StepStats& s = steps[k];
    for (const TraceEvent& e : s.events) {
      begin_event();
      const int64_t dur_ns = e.end_ns > e.start_ns ? e.end_ns - e.start_ns : 0;
      out += "{\"ph\":\"X\",\"pid\":" + p + ",\"tid\":" + std::to_string(row_of(rows, k, e)) +
             ",\"name\":" + json_string(e.name) + ",\"cat\":" + json_string(e.category) +
             ",\"ts\":" + micros(s.start_unix_us, e.start_ns) + ",\"dur\":" + micros(0, dur_ns) +
             ",\"args\":{\"device\":" + json_string(e.device) +
             ",\"run\":" + std::to_string(s.run_id);
      for (const auto& [k, v] : e.args) out += "," + json_string(k) + ":" + json_string(v);
      out += "}}";
    }
  }
  out += "\n]}\n";
  return out;
}

std::string op_time_summary(const std::vector<StepStats>& steps, int top) {
  if (steps.empty()) return "no traced runs\n";
  struct Row {
    double ns = 0;
    int64_t count = 0;
  };
  std::map<std::string, Row> by_op;
  const Rows lane_rows = trace_rows(steps);
  std::map<int, std::pair<double, double>> lanes;  // row -> {busy ns, span ns}
  double busy = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    std::map<int, std::pair<int64_t, int64_t>> span;  // row -> {first start, last end}
    for (const TraceEvent& e : steps[k].events) {
      if (e.depth != 0) continue;
      const int row = row_of(lane_rows, k, e);
      const double d = static_cast<double>(e.end_ns - e.start_ns);
      by_op[e.category].ns += d;
      ++by_op[e.category].count;
      lanes[row].first += d;
      busy += d;
      auto [it, fresh] = span.emplace(row, std::make_pair(e.start_ns, e.end_ns));
      if (!fresh) {
        it->second.first = std::min(it->second.first, e.start_ns);
        it->second.second = std::max(it->second.second, e.end_ns);
      }
    }
    for (const auto& [lane, se] : span) lanes[lane].second += static_cast<double>(se.second - se.first);
  }
  std::vector<std::pair<std::string, Row>> rows(by_op.begin(), by_op.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  const double runs = static_cast<double>(steps.size());
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-28s %10s %7s %8s\n", "op", "ms/run", "share", "nodes/run");
  out += line;
  Row rest;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (static_cast<int>(i) >= top) {
      rest.ns += rows[i].second.ns;
      rest.count += rows[i].second.count;
      continue;
    }
    std::snprintf(line, sizeof line, "%-28s %10.3f %6.1f%% %8.1f\n", rows[i].first.c_str(),
                  rows[i].second.ns / runs / 1e6, busy > 0 ? 100.0 * rows[i].second.ns / busy : 0.0,
                  static_cast<double>(rows[i].second.count) / runs);
    out += line;
  }
  if (rest.count > 0) {
    std::snprintf(line, sizeof line, "%-28s %10.3f %6.1f%% %8.1f\n", "(other ops)",
                  rest.ns / runs / 1e6, busy > 0 ? 100.0 * rest.ns / busy : 0.0,
                  static_cast<double>(rest.count) / runs);
    out += line;
  }
  for (const auto& [row, bt] : lanes) {
    const std::string device =
        row < static_cast<int>(lane_rows.labels.size()) ? lane_rows.labels[static_cast<size_t>(row)] : "other";
    std::snprintf(line, sizeof line, "%s: busy %.3f ms of %.3f ms per run\n", device.c_str(),
                  bt.first / runs / 1e6, bt.second / runs / 1e6);
    out += line;
  }
  return out;
}

void write_chrome_trace(const std::string& path, const std::vector<StepStats>& steps, int pid,
                        const std::string& process_name) {
  atomic_write_file(path, chrome_trace_json(steps, pid, process_name));
}

}  // namespace spire
