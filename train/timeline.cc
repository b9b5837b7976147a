// Chrome trace JSON writer (see timeline.h).
#include "train/timeline.h"

#include <cstdio>
#include <algorithm>
#include <map>

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
  std::map<int, std::string> lanes;  // lane -> device label (from the first step naming it)
  for (const StepStats& s : steps)
    for (size_t l = 0; l < s.lane_devices.size(); ++l)
      lanes.emplace(static_cast<int>(l), s.lane_devices[l]);
  for (const auto& [lane, device] : lanes) {
    begin_event();
    out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + p +
           ",\"tid\":" + std::to_string(lane) + ",\"args\":{\"name\":" +
           json_string("lane " + std::to_string(lane) + " (" + device + ")") + "}}";
    begin_event();
    out += "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + p +
           ",\"tid\":" + std::to_string(lane) + ",\"args\":{\"sort_index\":" +
           std::to_string(lane) + "}}";
  }
  for (const StepStats& s : steps) {
    for (const TraceEvent& e : s.events) {
      begin_event();
      const int64_t dur_ns = e.end_ns > e.start_ns ? e.end_ns - e.start_ns : 0;
      out += "{\"ph\":\"X\",\"pid\":" + p + ",\"tid\":" + std::to_string(e.lane) +
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
  std::map<int, std::pair<double, double>> lanes;  // lane -> {busy ns, span ns}
  double busy = 0;
  for (const StepStats& s : steps) {
    std::map<int, std::pair<int64_t, int64_t>> span;  // lane -> {first start, last end}
    for (const TraceEvent& e : s.events) {
      if (e.depth != 0) continue;
      const double d = static_cast<double>(e.end_ns - e.start_ns);
      by_op[e.category].ns += d;
      ++by_op[e.category].count;
      lanes[e.lane].first += d;
      busy += d;
      auto [it, fresh] = span.emplace(e.lane, std::make_pair(e.start_ns, e.end_ns));
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
  for (const auto& [lane, bt] : lanes) {
    const std::string device = lane < static_cast<int>(steps.front().lane_devices.size())
                                   ? steps.front().lane_devices[static_cast<size_t>(lane)]
                                   : "?";
    std::snprintf(line, sizeof line, "lane %d (%s): busy %.3f ms of %.3f ms per run\n", lane,
                  device.c_str(), bt.first / runs / 1e6, bt.second / runs / 1e6);
    out += line;
  }
  return out;
}

void write_chrome_trace(const std::string& path, const std::vector<StepStats>& steps, int pid,
                        const std::string& process_name) {
  atomic_write_file(path, chrome_trace_json(steps, pid, process_name));
}

}  // namespace spire
